"""edge.matching: the shared matcher through the real store, the deadline, the 502s."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from edge import matching
from edge.context import Context
from edge.errors import BadGateway
from edge.settings import Settings
from matcher.types import MatchRequest


@pytest.fixture
def ctx(tmp_path, clock, shared_matcher):
    settings = Settings(db=tmp_path / "edge.db", cache_dir=tmp_path / "cache")
    return Context.build(settings, clock=clock, matcher=shared_matcher)


def run(ctx: Context, coro_fn):
    async def go():
        await ctx.start()
        try:
            return await coro_fn()
        finally:
            await ctx.stop()

    return asyncio.run(go())


def ugc(text: str, post_id: str = "p-1", **kw) -> MatchRequest:
    return MatchRequest(product="ugc", content=text, post_id=post_id, thread_id=post_id, **kw)


def test_paraphrase_finds_dog_food_through_the_edge(ctx):
    result = run(ctx, lambda: matching.match(ctx, ugc("my pup won't touch his kibble")))
    assert result.outcome == "matched"
    assert result.ads[0].placement.campaign.id == "cmp-happy-hound"
    assert 0.5 <= result.ads[0].relevancy_score <= 1.0


def test_no_match_window_is_stored_and_honoured(ctx, clock):
    async def go():
        first = await matching.match(ctx, ugc("the weather is grey and I am bored", "p-9"))
        clock.advance(10)
        again = await matching.match(ctx, ugc("the weather is grey and I am bored", "p-9"))
        return first, again

    first, again = run(ctx, go)
    assert first.outcome == "no_match" and first.retry_after_seconds > 0
    assert again.reason == "backoff"
    assert again.retry_after_seconds == first.retry_after_seconds - 10


def test_disables_are_thread_scoped(ctx):
    async def go():
        before = await matching.match(ctx, ugc("my pup won't touch his kibble", "p-2"))
        shown = before.ads[0].placement.ad.id
        await ctx.store.disable_ads([("p-2", shown, {"why": "user hid it"})], ctx.clock())
        await ctx.store.disable_ads([("p-2", shown, None)], ctx.clock())  # idempotent
        after = await matching.match(ctx, ugc("my pup won't touch his kibble", "p-2"))
        other = await matching.match(ctx, ugc("my pup won't touch his kibble", "p-3"))
        return shown, after, other

    shown, after, other = run(ctx, go)
    assert shown not in [s.placement.ad.id for s in after.ads]
    assert other.ads[0].placement.ad.id == shown


def test_timeout_is_a_502_with_retry_after(tmp_path, clock, shared_matcher):
    settings = dataclasses.replace(
        Settings(db=tmp_path / "edge.db", cache_dir=tmp_path / "c"), match_timeout_ms=10
    )
    ctx = Context.build(settings, clock=clock, matcher=shared_matcher)

    class Slow:
        catalogue = shared_matcher.catalogue

        async def match(self, *a, **kw):
            await asyncio.sleep(1)

    ctx.matcher = Slow()
    with pytest.raises(BadGateway) as err:
        run(ctx, lambda: matching.match(ctx, ugc("anything")))
    assert err.value.status == 502 and err.value.headers["Retry-After"] == "1"


def test_matcher_failure_is_a_502(ctx):
    class Broken:
        catalogue = None

        async def match(self, *a, **kw):
            raise RuntimeError("model crashed")

    ctx.matcher = Broken()
    with pytest.raises(BadGateway):
        run(ctx, lambda: matching.match(ctx, ugc("anything")))


@pytest.mark.slow
def test_startup_loads_catalogue_dma_table_and_reuses_the_vector_cache(tmp_path, clock):
    from importlib import resources

    cat = tmp_path / "cat.json"
    cat.write_bytes(resources.files("matcher.data").joinpath("sandbox_catalogue.json").read_bytes())
    dma = tmp_path / "dma.csv"
    dma.write_text("state,county,dma,dma_name\nTX,Travis County,777,Test\n")
    settings = Settings(
        db=tmp_path / "edge.db", cache_dir=tmp_path / "cache", catalogue=cat, dma_table=dma
    )

    def boot():
        ctx = Context.build(settings, clock=clock)

        async def go():
            await ctx.start()
            loaded = ctx.matcher
            await ctx.stop()
            return loaded

        return asyncio.run(go())

    first = boot()
    cached = list((tmp_path / "cache").glob("ad-vectors-*.npy"))
    assert len(cached) == 1 and len(first.catalogue) == 54
    assert first.gazetteer.county_dma[("US-TX", "Travis County")] == "777"
    stamp = cached[0].stat().st_mtime_ns
    second = boot()
    assert cached[0].stat().st_mtime_ns == stamp  # read back, not re-embedded and rewritten
    import numpy as np

    assert np.array_equal(first.index.matrix, second.index.matrix)


def test_a_job_queued_past_its_deadline_is_dropped_not_run(shared_matcher):
    import time as _time

    from matcher import MemoryState
    from matcher.engine import MatchDeadlineExceeded

    async def go():
        return await shared_matcher.match(
            ugc("my pup won't touch his kibble", "p-late"),
            MemoryState(),
            1.79e9,
            {},
            deadline=_time.monotonic() - 1,
        )

    with pytest.raises(MatchDeadlineExceeded):
        asyncio.run(go())


def test_budget_gate_uses_cached_spend(ctx, clock, monkeypatch):
    calls = []

    async def spend(since=None):
        if since is not None:
            return {}  # nothing today
        calls.append(clock())
        return {"cmp-happy-hound": 25_000.0}  # over its 20,000 budget

    monkeypatch.setattr(ctx.store, "spend_by_campaign", spend, raising=False)

    async def go():
        first = await matching.match(ctx, ugc("my pup won't touch his kibble", "p-b1"))
        clock.advance(1)
        second = await matching.match(ctx, ugc("my pup won't touch his kibble", "p-b2"))
        clock.advance(10)
        await matching.match(ctx, ugc("my pup won't touch his kibble", "p-b3"))
        return first, second

    first, second = run(ctx, go)
    for result in (first, second):
        assert "cmp-happy-hound" not in [s.placement.campaign.id for s in result.ads]
    assert len(calls) == 2  # one read for the first two requests, a fresh one after 5 s


def test_a_failed_state_write_still_answers_but_a_failed_read_is_a_502(ctx, monkeypatch):
    from edge.store import StoreUnavailable

    async def broken(*a, **kw):
        raise StoreUnavailable("disk full")

    monkeypatch.setattr(ctx.store, "record_serves", broken)
    result = run(ctx, lambda: matching.match(ctx, ugc("my pup won't touch his kibble", "p-w")))
    assert result.outcome == "matched"

    monkeypatch.setattr(ctx.store, "load_matcher_state", broken)
    with pytest.raises(BadGateway):
        run(ctx, lambda: matching.match(ctx, ugc("my pup won't touch his kibble", "p-w")))


def test_state_writes_run_after_the_answer_and_are_drained_at_shutdown(ctx, tmp_path):
    # The serve is recorded in the background: the answer does not wait for its commit,
    # the next match of the same thread reads it, and shutdown leaves nothing behind.
    gate = asyncio.Event()
    real = ctx.store.record_serves

    async def slow(*args):
        await gate.wait()
        await real(*args)

    async def go():
        ctx.store.record_serves = slow
        result = await matching.match(ctx, ugc("my pup won't touch his kibble", "p-s"))
        pending = len(ctx.state_writes)
        load = asyncio.ensure_future(
            matching.StoreMatchState(ctx.store, ctx.state_writes).load("p-s", None, None, 0.0)
        )
        await asyncio.sleep(0.01)
        waited = not load.done()  # the read of that thread waits for its pending write
        gate.set()
        state = await load
        return result, pending, waited, state

    result, pending, waited, state = run(ctx, go)
    assert result.outcome == "matched" and pending == 1 and waited
    assert state.served == {result.ads[0].placement.ad.id: 1}


def test_shutdown_drains_state_writes_before_the_store_closes(ctx):
    async def go():
        result = await matching.match(ctx, ugc("my pup won't touch his kibble", "p-d"))
        return result, len(ctx.state_writes)

    result, pending = run(ctx, go)  # run() stops the context, which closes the store last
    assert pending == 1

    async def read():
        await ctx.store.open()
        try:
            return await ctx.store.load_matcher_state("p-d", None, 0.0)
        finally:
            await ctx.store.close()

    assert asyncio.run(read()).served == {result.ads[0].placement.ad.id: 1}


def test_state_writes_settle_by_key_and_a_cancelled_reader_cancels_no_write():
    async def go():
        writes = matching.StateWrites()
        gates = {"a": asyncio.Event(), "b": asyncio.Event()}
        done: list[str] = []

        async def write(name):
            await gates[name].wait()
            done.append(name)

        writes.spawn("a", ("thread:a",), write("a"))
        writes.spawn("b", ("post:b",), write("b"))
        gates["a"].set()
        await writes.settled(("thread:a", "thread:none"))  # does not wait for b
        assert done == ["a"] and len(writes) == 1
        waiter = asyncio.ensure_future(writes.settled(("post:b",)))
        await asyncio.sleep(0)
        waiter.cancel()
        gates["b"].set()
        await writes.drain()
        return done, len(writes)

    assert asyncio.run(go()) == (["a", "b"], 0)


def test_the_batch_setting_reaches_the_loaded_matcher_and_batched_matches_answer(tmp_path, clock):
    settings = Settings(db=tmp_path / "edge.db", cache_dir=tmp_path / "cache", match_batch=4)
    ctx = Context.build(settings, clock=clock)
    posts = ["my pup won't touch his kibble", "best trail shoes for a rocky 50k", "hello"] * 3

    async def go():
        await ctx.start()
        try:
            assert ctx.matcher is not None and ctx.matcher.config.batch_texts == 4
            return await asyncio.gather(
                *(matching.match(ctx, ugc(t, f"p-{i}")) for i, t in enumerate(posts))
            )
        finally:
            await ctx.stop()

    results = asyncio.run(go())
    assert [r.outcome for r in results[:3]] == [r.outcome for r in results[3:6]]
    assert results[0].outcome == "matched"
