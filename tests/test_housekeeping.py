"""Expired no-match windows and old serves are pruned, so keyless traffic cannot grow the
store without bound; live ones are kept."""

from __future__ import annotations

import asyncio

from edge import housekeeping
from edge.context import Context
from edge.housekeeping import BACKOFF_MEMORY_SECONDS
from edge.settings import Settings
from matcher.state import FREQUENCY_WINDOW_SECONDS, Backoff
from tests.conftest import FakeClock


def _count(conn, table: str) -> int:
    return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_prune_drops_expired_windows_and_old_serves_only(tmp_path, monkeypatch):
    monkeypatch.setattr(housekeeping, "PRUNE_BATCH", 7)  # several batches
    clock = FakeClock()
    ctx = Context.build(Settings(db=tmp_path / "edge.db"), clock=clock)
    now = clock()

    async def main() -> tuple[int, int, int]:
        await ctx.store.open()
        try:
            for i in range(20):  # windows that ended long ago: gone
                old = Backoff(
                    misses=1, until=now - BACKOFF_MEMORY_SECONDS - 10, demand="d", reason="r"
                )
                await ctx.store.put_backoff(f"old-{i}", old, now - BACKOFF_MEMORY_SECONDS - 400)
            live = Backoff(misses=3, until=now + 60, demand="d", reason="r")
            await ctx.store.put_backoff("live", live, now)
            recent = Backoff(misses=2, until=now - 60, demand="d", reason="r")  # ended, remembered
            await ctx.store.put_backoff("recent", recent, now - 400)
            for i in range(10):
                await ctx.store.record_serves(
                    f"t-{i}", "u", ["ad-1"], now - FREQUENCY_WINDOW_SECONDS - 1
                )
            await ctx.store.record_serves("t-new", "u", ["ad-1"], now - 10)
            gone = await ctx.housekeeping.prune_once(ctx)
            kept_live = await ctx.store.load_matcher_state(None, "live", now)
            kept_recent = await ctx.store.load_matcher_state(None, "recent", now)
            dropped = await ctx.store.load_matcher_state(None, "old-3", now)
            serves = await ctx.store.load_matcher_state("t-new", None, now)
            assert kept_live.backoff is not None and kept_recent.backoff is not None
            assert dropped.backoff is None and serves.served == {"ad-1": 1}
            backoffs = await ctx.store.read(_count, "post_backoff")
            serves_left = await ctx.store.read(_count, "thread_serves")
            return gone, backoffs, serves_left
        finally:
            await ctx.store.close()

    gone, backoffs, serves = asyncio.run(main())
    assert gone == 30
    assert backoffs == 2 and serves == 1
