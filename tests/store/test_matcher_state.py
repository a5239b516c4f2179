"""The matcher state on both backends: disables (idempotent, thread-scoped), frequency
window, backoff."""

from __future__ import annotations

import pytest

from matcher.state import FREQUENCY_WINDOW_SECONDS, Backoff
from tests.store.conftest import sql

T0 = 1_790_000_000.0


@pytest.fixture
def go(store, run):
    """``go(fn)``: run ``await fn(store)`` on the store's loop (both backends)."""

    def call(fn):
        return run(fn(store))

    return call


def test_disables_are_idempotent_and_thread_scoped(go, db_target):
    async def fn(s):
        await s.disable_ads([("p-1", "ad-a", {"source": "x"}), ("p-1", "ad-b", None)], T0)
        await s.disable_ads([("p-1", "ad-a", {"source": "again"})], T0 + 5)
        return await s.load_matcher_state("p-1", "p-1", T0), await s.load_matcher_state(
            "p-2", None, T0
        )

    one, other = go(fn)
    assert one.disabled == {"ad-a", "ad-b"}
    assert other.disabled == frozenset()
    rows = sql(db_target, "SELECT ad_id, meta, created_at FROM thread_disables ORDER BY ad_id")
    assert rows == [("ad-a", '{"source":"x"}', T0), ("ad-b", None, T0)]


def test_disables_of_a_second_thread_can_be_read_with_a_thread(go):
    async def fn(s):
        await s.disable_ads([("bare", "ad-a", None), ("ugc:key_1:bare", "ad-b", None)], T0)
        both = await s.load_matcher_state("ugc:key_1:bare", None, T0, also_disabled_in="bare")
        alone = await s.load_matcher_state("ugc:key_1:bare", None, T0)
        other = await s.load_matcher_state("ugc:key_2:bare", None, T0, also_disabled_in="x")
        return both, alone, other

    both, alone, other = go(fn)
    assert both.disabled == {"ad-a", "ad-b"}
    assert alone.disabled == {"ad-b"}
    assert other.disabled == frozenset()


def test_serves_count_distinct_units_within_the_window(go):
    async def fn(s):
        await s.record_serves("t", "post-1", ["ad-a", "ad-b"], T0)
        await s.record_serves("t", "post-1", ["ad-a"], T0 + 30)  # a refresh: no new unit
        await s.record_serves("t", "post-2", ["ad-a"], T0 + 60)
        during = await s.load_matcher_state("t", None, T0 + 120, "post-1")
        other_unit = await s.load_matcher_state("t", None, T0 + 120, "post-3")
        later = T0 + FREQUENCY_WINDOW_SECONDS + 61
        expired = await s.load_matcher_state("t", None, later)
        return during, other_unit, expired

    during, other_unit, expired = go(fn)
    assert during.served == {"ad-a": 2, "ad-b": 1}
    assert during.unit_ads == {"ad-a", "ad-b"}
    assert other_unit.unit_ads == frozenset()
    assert expired.served == {}


def test_backoff_put_replace_clear(go):
    async def fn(s):
        await s.put_backoff("p", Backoff(1, T0 + 300, "d1"), T0)
        first = (await s.load_matcher_state(None, "p", T0)).backoff
        await s.put_backoff("p", Backoff(2, T0 + 3600, "d1", "unsafe"), T0 + 300)
        second = (await s.load_matcher_state(None, "p", T0)).backoff
        await s.clear_backoff("p")
        gone = (await s.load_matcher_state(None, "p", T0)).backoff
        return first, second, gone

    first, second, gone = go(fn)
    assert first == Backoff(1, T0 + 300, "d1", "no_relevant_demand")
    assert second == Backoff(2, T0 + 3600, "d1", "unsafe")
    assert gone is None


def test_no_ids_reads_nothing(go):
    async def fn(s):
        return await s.load_matcher_state(None, None, T0)

    state = go(fn)
    assert state.disabled == frozenset() and state.served == {} and state.backoff is None


def test_prune_removes_only_what_the_caller_names_in_bounded_batches(go):
    async def fn(s):
        for i in range(5):
            await s.put_backoff(f"old-{i}", Backoff(1, T0 + i, "d"), T0)
        await s.put_backoff("fresh", Backoff(1, T0 + 1000, "d"), T0)
        await s.record_serves("t", "u-old", ["ad-a", "ad-b"], T0)
        await s.record_serves("t", "u-new", ["ad-a"], T0 + 500)
        first = await s.prune_matcher_state(T0 + 100, T0 + 100, 3)
        rest = await s.prune_matcher_state(T0 + 100, T0 + 100, 3)
        again = await s.prune_matcher_state(T0 + 100, T0 + 100, 3)
        kept = await s.load_matcher_state("t", "fresh", T0 + 600)
        return first, rest, again, kept

    first, rest, again, kept = go(fn)
    assert (first, rest, again) == (5, 2, 0)  # 3 + 2 windows, then the 2 old serves
    assert kept.backoff is not None and kept.served == {"ad-a": 1}


def test_a_serve_again_renews_the_units_record(go):
    # A post matched again keeps its serve of the ad for a day after the latest serve, so
    # what reads the serves (the frequency cap, the earlier API's impression check) sees a
    # post re-served minutes ago, however long ago it was first served.
    now = T0 + FREQUENCY_WINDOW_SECONDS + 50  # the first serve is out of the window

    async def fn(s):
        await s.record_serves("t", "post-1", ["ad-a"], T0)
        await s.record_serves("t", "post-1", ["ad-a"], now - 600)
        await s.record_serves("t", "post-1", ["ad-a"], T0 + 10)  # late write: never older
        await s.prune_matcher_state(now, now - FREQUENCY_WINDOW_SECONDS, 100)
        return await s.load_matcher_state("t", None, now, "post-1")

    state = go(fn)
    assert state.unit_ads == {"ad-a"} and state.served == {"ad-a": 1}
