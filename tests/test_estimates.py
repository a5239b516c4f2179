"""The click-through estimates refresher: stored counts reach the ranking and `explain`."""

from __future__ import annotations

import asyncio

import pytest

from edge.context import Context
from matcher.ctr import CtrModel
from matcher.state import ThreadState
from matcher.types import MatchRequest


@pytest.fixture
def restore_estimates(shared_matcher):
    yield shared_matcher
    shared_matcher.set_estimates(CtrModel(shared_matcher.catalogue.placements))


def test_refresh_reads_the_stored_counts_and_explain_shows_the_evidence(
    settings, clock, restore_estimates
):
    matcher = restore_estimates
    ctx = Context.build(settings, clock=clock, matcher=matcher)
    req = MatchRequest(product="ugc", content="training for my first marathon", explain=True)

    async def go():
        await ctx.store.open()
        try:
            top = matcher.decide(req, ThreadState(), clock(), {}).ads[0].placement.ad.id
            await ctx.store.add_counts(
                [("ad", top, "viewable_impressions", 4000.0), ("ad", top, "clicks", 120.0)]
            )
            await ctx.estimates.refresh(ctx.store, matcher, clock())
            return top, matcher.decide(req, ThreadState(), clock(), {})
        finally:
            await ctx.store.close()

    top, result = asyncio.run(go())
    entry = next(r for r in result.explanation["ranked"] if r["ad_id"] == top)
    ctr = entry["estimate"]["ctr"]
    assert (ctr["successes"], ctr["trials"]) == (120.0, 4000.0)
    assert 0.01 < ctr["mean"] < 0.03  # 3% raw, smoothed toward its parents' 1%
    assert result.explanation["ranking"]["estimates_as_of"] == clock()
    assert entry["ecpm"] > 0 and entry["pricing"] in ("cpc", "cpm", "cpa")


def test_the_background_task_refreshes_at_its_interval(settings, clock, restore_estimates):
    matcher = restore_estimates
    ctx = Context.build(settings, clock=clock, matcher=matcher)
    ctx.estimates.interval = 0.05
    ad_id = matcher.catalogue.placements[0].ad.id

    async def go():
        await ctx.store.open()
        try:
            ctx.estimates.start(ctx.store, lambda: matcher, clock)
            await ctx.store.add_counts([("ad", ad_id, "viewable_impressions", 10.0)])
            for _ in range(100):
                if matcher.estimates.estimate(ad_id).ctr.trials == 10.0:
                    return True
                await asyncio.sleep(0.02)
            return False
        finally:
            await ctx.estimates.stop()
            await ctx.store.close()

    assert asyncio.run(go())
