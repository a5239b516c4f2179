"""The backoff schedule, the in-memory state, the explanation's shape, the bench helpers."""

from __future__ import annotations

import asyncio

import pytest

from matcher import MemoryState, perf
from matcher.state import (
    HOURS_CAP,
    MINUTES_CAP,
    YOUNG_POST_SECONDS,
    Backoff,
    ThreadState,
    next_window,
)
from matcher.types import GeoSignal, MatchRequest

T0 = 1_790_000_000.0


def windows(n, *, created_at=None, demands=None, reason="no_relevant_demand"):
    out, prev = [], None
    for i in range(n):
        demand = demands[i] if demands else "d"
        prev = next_window(prev, now=T0, created_at=created_at, demand=demand, reason=reason)
        out.append(prev.until - T0)
    return out


def test_minutes_then_hours_doubling_to_a_cap():
    assert windows(8) == [300, 3600, 7200, 14400, 28800, 57600, HOURS_CAP, HOURS_CAP]


def test_young_post_stays_on_minutes():
    young = windows(5, created_at=T0 - 60)
    assert young == [300, 600, 1200, MINUTES_CAP, MINUTES_CAP]
    old = windows(2, created_at=T0 - YOUNG_POST_SECONDS - 1)
    assert old == [300, 3600]


@pytest.mark.parametrize("ahead", [5.0, YOUNG_POST_SECONDS + 1, 253402300799.0 - T0])
def test_a_post_from_the_future_is_young(ahead):
    # Partner clock skew, or a created_at of 9999-12-31T23:59:59Z: age 0, not old.
    assert windows(3, created_at=T0 + ahead) == [300, 600, 1200]


def test_changed_demand_brings_minutes_back():
    assert windows(3, demands=["a", "a", "b"]) == [300, 3600, 1200]


def test_unsafe_starts_at_hours():
    assert windows(2, reason="unsafe") == [3600, 7200]


def test_memory_state_round_trip():
    async def go():
        s = MemoryState()
        await s.disable([("t", "ad-1", None)], T0)
        await s.record_served("t", "u-1", ["ad-2", "ad-2"], T0)
        await s.record_served("t", "u-2", ["ad-2"], T0)
        await s.record_miss("p", Backoff(1, T0 + 300, "d"), T0)
        got = await s.load("t", "p", "u-1", T0 + 1)
        await s.clear_backoff("p")
        return got, await s.load("t", "p", None, T0 + 86_401)

    got, later = asyncio.run(go())
    assert got.disabled == {"ad-1"} and got.served == {"ad-2": 2} and got.backoff.misses == 1
    assert got.unit_ads == {"ad-2"}
    assert later.served == {} and later.backoff is None


def test_explanation_names_a_gate_for_every_listed_ad(shared_matcher):
    req = MatchRequest(
        product="ugc",
        content="training for my first marathon, my knees ache",
        geo=GeoSignal(zipcode="10001"),
        explain=True,
    )
    result = shared_matcher.decide(req, ThreadState(disabled=frozenset({"ad-gps-watch"})), T0, {})
    ex = result.explanation
    assert ex["outcome"] == result.outcome == "matched"
    assert ex["location"]["dmas"] == ["501"]
    assert ex["floor"]["relevancy"] == 0.5
    assert ex["safety"][0]["safe"] is True
    gates = {a["ad_id"]: a["gate"] for a in ex["ads"]}
    assert len(gates) == len(shared_matcher.catalogue)
    assert gates["ad-gps-watch"] == "disabled_in_thread"
    assert gates["ad-vinyl-records"] == "status_paused"
    assert gates["ad-audiobooks"] == "product_not_ugc"
    assert gates["ad-water-park"] == "expired"
    assert gates["ad-bay-delivery"] in ("geo", "below_floor")
    shown = [s.placement.ad.id for s in result.ads]
    assert [r["ad_id"] for r in ex["ranked"]] == shown
    assert all(gates[a] is None for a in shown)
    assert all(0 <= a["relevancy"] <= 1 for a in ex["ads"])


def test_no_explanation_unless_asked(shared_matcher):
    req = MatchRequest(product="ugc", content="training for my first marathon")
    assert shared_matcher.decide(req, ThreadState(), T0, {}).explanation is None


@pytest.mark.slow
def test_bench_helpers_on_a_small_synthetic_catalogue(shared_matcher):
    m = perf.synthetic_matcher(1000, shared_matcher.embedder.inner)
    try:
        assert len(m.catalogue) == 1000 and m.index.kind == "exact"
        floor = perf.forward_pass_ms(shared_matcher.embedder, runs=3)
        whole = perf.match_ms(m, runs=3)
        assert floor["tokens"] > 30 and floor["p50_ms"] > 0 and whole["p50_ms"] > 0
        result = m.decide(
            MatchRequest(product="ugc", content=perf.POST_40_WORDS), ThreadState(), T0, {}
        )
        assert result.outcome == "matched"  # the synthetic vectors have real structure
    finally:
        m.close()


def test_search_widens_when_every_first_candidate_is_gated_out(shared_matcher):
    """With room for one candidate, the geo-excluded best ad must not hide the next one."""
    import dataclasses

    from matcher import Matcher

    m = Matcher(
        shared_matcher.catalogue,
        shared_matcher.embedder,
        shared_matcher.index.matrix,
        gazetteer=shared_matcher.gazetteer,
        safety=shared_matcher.safety,
        config=dataclasses.replace(shared_matcher.config, candidates=1),
    )
    try:
        req = MatchRequest(
            product="ugc",
            content="Looking for a gym membership with early morning classes and coaches",
            geo=GeoSignal(zipcode="10001"),  # New York: the Austin gym is out
        )
        # The Austin gym is the nearest ad (the only first candidate) and geo removes it.
        assert m.index.search(m.embedder.embed([req.content])[0], m.masks.mask("ugc", T0), 0.27, 1)[
            0
        ].tolist() == [m.catalogue.placements.index(m.catalogue.placement("ad-gym-austin"))]
        result = m.decide(req, ThreadState(), T0, {})
        assert result.outcome == "matched"
        assert "ad-gym-austin" not in [s.placement.ad.id for s in result.ads]
    finally:
        m.close()
