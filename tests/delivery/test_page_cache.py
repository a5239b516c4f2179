"""The page-match cache: one match per page, text, post, slots and place; shared while in
flight; expired after its time to live; failures are not cached."""

from __future__ import annotations

import asyncio

import pytest

from edge.delivery.page_cache import PageMatchCache, page_key
from matcher.types import GeoSignal, MatchResult
from tests.conftest import FakeClock

RESULT = MatchResult("no_match", reason="no_relevant_demand")


def test_key_changes_with_every_input():
    base = ("pub-1", "https://a.example/p", "text", None, 2, None)
    keys = {
        page_key(*base),
        page_key("pub-2", *base[1:]),
        page_key(base[0], "https://a.example/q", *base[2:]),
        page_key(*base[:2], "text!", *base[3:]),
        page_key(*base[:3], "p-1", *base[4:]),
        page_key(*base[:4], 3, None),
        page_key(*base[:5], GeoSignal(state="US-CA", country="US")),
    }
    assert len(keys) == 7
    # Parts cannot run into each other: ("ab", "c") is not ("a", "bc").
    assert page_key("pub", "ab", "c", None, 1, None) != page_key("pub", "a", "bc", None, 1, None)


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
