"""The page-match cache: one match per page, text, post, slots and place; shared while in
flight; expired after its time to live; failures are not cached; and a cached answer never
serves an ad that a fresh match would refuse (a catalogue swap, a spent budget or daily cap,
a paused campaign, an ended flight)."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import time
from collections.abc import Callable
from importlib import resources

import httpx2 as httpx
import orjson
import pytest

from edge import matching
from edge.delivery.page_cache import PageMatchCache, page_key
from matcher.catalogue import parse_catalogue
from matcher.types import GeoSignal, MatchResult
from tests.conftest import US_CLIENT, FakeClock
from tests.delivery.helpers import ORIGIN, PUB, register

RESULT = MatchResult("no_match", reason="no_relevant_demand")


def test_key_changes_with_every_input():
    base = ("cat-1", "pub-1", "https://a.example/p", "text", None, 2, None)
    keys = {
        page_key(*base),
        page_key("cat-2", *base[1:]),
        page_key(base[0], "pub-2", *base[2:]),
        page_key(*base[:2], "https://a.example/q", *base[3:]),
        page_key(*base[:3], "text!", *base[4:]),
        page_key(*base[:4], "p-1", *base[5:]),
        page_key(*base[:5], 3, None),
        page_key(*base[:6], GeoSignal(state="US-CA", country="US")),
    }
    assert len(keys) == 8
    # Parts cannot run into each other: ("ab", "c") is not ("a", "bc").
    assert page_key("c", "pub", "ab", "c", None, 1, None) != page_key(
        "c", "pub", "a", "bc", None, 1, None
    )


def test_many_visitors_at_once_cost_one_match_and_later_ones_hit_the_cache():
    clock = FakeClock()
    cache = PageMatchCache(60, 100, clock)
    calls = 0

    async def match() -> MatchResult:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return RESULT

    async def main() -> list[MatchResult]:
        return await asyncio.gather(*(cache.get_or_match("k", match) for _ in range(50)))

    assert asyncio.run(main()) == [RESULT] * 50
    assert calls == 1
    asyncio.run(cache.get_or_match("k", match))
    assert calls == 1
    clock.advance(61)  # expired
    asyncio.run(cache.get_or_match("k", match))
    assert calls == 2


def test_failures_are_raised_to_every_waiter_and_not_cached():
    cache = PageMatchCache(60, 100, FakeClock())
    calls = 0

    async def failing() -> MatchResult:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        raise RuntimeError("model down")

    async def main() -> list[object]:
        return await asyncio.gather(
            *(cache.get_or_match("k", failing) for _ in range(3)), return_exceptions=True
        )

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(main()))
    assert calls == 1 and len(cache) == 0


@pytest.mark.parametrize("capacity", [1, 3])
def test_capacity_is_bounded(capacity):
    cache = PageMatchCache(60, capacity, FakeClock())
    for i in range(10):
        cache.put(str(i), RESULT)
    assert len(cache) == capacity and cache.get("9") is RESULT and cache.get("0") is None


# -- a cached page never serves what a fresh match would refuse --------------------------------
# Through the routes on the real matcher: a page is matched, its answer cached, then the
# demand changes (a catalogue swap, spend, the clock) before the next visitor's hit. The next
# visitor must get what a fresh match gives now (the same text on a page not seen before).

PAGE = "https://news.example/trail"
RUNNING = "Training for my first trail marathon; my shoes slip on wet rocks on the descents."
KNITTING = "Knitting my first wool sweater: which yarn weight and needle size for a chunky cable?"
TRAILHEAD = {"ad-trail-shoes", "ad-road-shoes"}  # cmp-trailhead's ads
BUNDLED = resources.files("matcher.data").joinpath("sandbox_catalogue.json")


@pytest.fixture
def client(make_client):
    c = make_client(env="production")
    register(c)
    return c


def ads_on(client, page_url: str, text: str = RUNNING) -> list[str]:
    """Each slot's ad id, or its reason when it stays empty."""
    body = {"publisher_id": PUB, "v": "1", "page_url": page_url, "text": text, "slots": ["a", "b"]}
    r = client.post("/dea/url/keywords", json=body, headers={"Origin": ORIGIN})
    assert r.status_code == 200, r.text
    return [p["ad"]["ad_id"] if p["ad"] else p["reason"] for p in r.json()["placements"]]


def cached_then(client, text: str = RUNNING) -> list[str]:
    """The page's first answer, after checking that the next visitor's comes from the cache."""
    cache = client.app.state.ctx.page_cache
    first = ads_on(client, PAGE, text)
    hits = cache.hits
    assert ads_on(client, PAGE, text) == first and cache.hits == hits + 1
    return first


def swap(client, edit: Callable[[dict], None]) -> None:
    doc = json.loads(BUNDLED.read_bytes())
    edit(doc)
    ctx = client.app.state.ctx
    catalogue = parse_catalogue(orjson.dumps(doc))
    assert client.portal.call(ctx.live_catalogue.swap, ctx, catalogue, None)


def trailhead(doc: dict) -> dict:
    return next(c for c in doc["campaigns"] if c["id"] == "cmp-trailhead")


def fresh(client, text: str = RUNNING) -> list[str]:
    return ads_on(client, f"{PAGE}?fresh={time.monotonic_ns()}", text)


def without_trailhead(doc: dict) -> None:
    doc["campaigns"].remove(trailhead(doc))


def trailhead_paused(doc: dict) -> None:
    trailhead(doc)["status"] = "paused"


@pytest.mark.parametrize("change", [without_trailhead, trailhead_paused])
def test_a_campaign_a_swap_takes_out_is_not_served_from_the_cache(client, change):
    assert TRAILHEAD & set(cached_then(client))
    swap(client, change)
    after = ads_on(client, PAGE)
    assert not TRAILHEAD & set(after)
    assert after == fresh(client)


def with_yarn(doc: dict) -> None:
    """A new campaign for the knitting page, which the bundled catalogue has no ad for."""
    yarn = copy.deepcopy(next(c for c in doc["campaigns"] if c["id"] == "cmp-stride"))
    yarn["id"], yarn["advertiser_name"] = "cmp-yarn", "Loop & Purl"
    ad_set = yarn["ad_sets"][0]
    ad_set["id"] = "as-yarn"
    ad_set["ads"][0].update(
        id="ad-chunky-yarn",
        title="Chunky wool yarn and needles for your first sweater",
        description="Merino yarn in every weight, circular needles and beginner cable "
        "knitting patterns.",
        keywords=["knitting", "wool yarn", "knitting needles", "sweater pattern"],
    )
    doc["campaigns"].append(yarn)


def test_a_swap_shows_new_demand_on_a_page_cached_without_ads(client):
    # An answer without ads has nothing to re-check: only the swap clearing the cache (and
    # the catalogue's version in the key) stops it hiding the new catalogue's demand.
    assert cached_then(client, KNITTING) == ["no_relevant_demand"] * 2
    swap(client, with_yarn)
    after = ads_on(client, PAGE, KNITTING)
    assert "ad-chunky-yarn" in after
    assert after == fresh(client, KNITTING)


def test_an_answer_of_the_old_catalogue_stored_after_the_swap_is_not_served(client, monkeypatch):
    # A match running across the swap finishes on the old catalogue and is stored after the
    # swap cleared the cache: the catalogue's version in its key keeps it from later visitors.
    ctx = client.app.state.ctx
    done, release = asyncio.Event(), asyncio.Event()
    real = matching.match

    async def held(ctx, request, *, lane="partner"):
        result = await real(ctx, request, lane=lane)
        done.set()
        await release.wait()
        return result

    monkeypatch.setattr(matching, "match", held)
    body = {"publisher_id": PUB, "v": "1", "page_url": PAGE, "text": KNITTING, "slots": ["a", "b"]}

    async def race() -> httpx.Response:
        transport = httpx.ASGITransport(app=client.app, client=US_CLIENT)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            running = asyncio.create_task(
                http.post("/dea/url/keywords", json=body, headers={"Origin": ORIGIN})
            )
            await done.wait()  # matched on the old catalogue, not yet stored
            doc = json.loads(BUNDLED.read_bytes())
            with_yarn(doc)
            assert await ctx.live_catalogue.swap(ctx, parse_catalogue(orjson.dumps(doc)), None)
            release.set()
            return await running

    first = client.portal.call(race)
    assert first.json()["placements"][0]["reason"] == "no_relevant_demand"
    assert len(ctx.page_cache) == 1  # stored after the swap's clear
    assert ads_on(client, PAGE, KNITTING)[0] == "ad-chunky-yarn"


@pytest.mark.parametrize("limit", ["budget_usd", "daily_cap_usd"])
def test_a_campaign_out_of_money_is_not_served_from_the_cache(client, limit):
    swap(client, lambda doc: trailhead(doc).update({limit: 50.0}))
    assert TRAILHEAD & set(cached_then(client))
    ctx = client.app.state.ctx
    ctx.spend.add("cmp-trailhead", 50.0, ctx.clock())  # billed up to its budget or cap
    after = ads_on(client, PAGE)
    assert not TRAILHEAD & set(after)
    hits = ctx.page_cache.hits
    assert ads_on(client, PAGE) == after and ctx.page_cache.hits == hits + 1  # cached again
    assert after == fresh(client)


def test_a_flight_that_ended_is_not_served_from_the_cache(client, clock):
    end = dt.datetime.fromtimestamp(clock() + 30, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    swap(client, lambda doc: trailhead(doc).update(end_at=end))
    assert TRAILHEAD & set(cached_then(client))
    clock.advance(31)  # past the flight's end, within the cache's time to live
    after = ads_on(client, PAGE)
    assert not TRAILHEAD & set(after)
    assert after == fresh(client)


def test_a_page_matched_by_the_scripted_matcher_is_served_from_the_cache(make_client):
    # The route tests' stand-in matcher has the real one's pacer, so a cached hit is
    # re-checked (page_cache.servable) and served as it would be on the real matcher.
    from matcher.catalogue import load_catalogue
    from tests.routes.conftest import CATALOGUE, Script

    stand_in = Script(load_catalogue(CATALOGUE))
    client = make_client(matcher=stand_in)
    register(client)
    cache = client.app.state.ctx.page_cache
    assert ads_on(client, PAGE) == ["ad-dog-food", "no_relevant_demand"]
    assert ads_on(client, PAGE) == ["ad-dog-food", "no_relevant_demand"]
    assert len(stand_in.requests) == 1 and cache.hits == 1
