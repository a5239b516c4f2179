"""Report counters (requests, matches, no-matches, hovers, ...) buffered in memory.

Routes call ``ctx.counters.add(...)`` on the hot path: a dict update, no I/O. A background
task flushes the sums to the store every ``FLUSH_SECONDS`` and at shutdown, so many
requests share one write. These are operational counters for ``edge report``; billing-grade
events (impressions) are never buffered here, they are committed before their 2xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edge.context import Context

log = logging.getLogger("edge.counters")
FLUSH_SECONDS = 1.0

CountKey = tuple[str, str, str]  # (scope: "ad" | "publisher" | "key", scope_id, counter)


class Counters:
    def __init__(self) -> None:
        self._pending: defaultdict[CountKey, float] = defaultdict(float)

    def add(self, scope: str, scope_id: str, counter: str, amount: float = 1) -> None:
        self._pending[(scope, scope_id, counter)] += amount

    def take(self) -> list[tuple[str, str, str, float]]:
        """The pending sums as rows, leaving the buffer empty."""
        pending, self._pending = self._pending, defaultdict(float)
        return [(*key, amount) for key, amount in pending.items()]

    async def flush(self, ctx: Context) -> None:
        rows = self.take()
        if not rows:
            return
        try:
            await ctx.store.add_counts(rows)
        except Exception:
            # Put them back so the next flush retries; never lose a count to a busy store.
            for scope, scope_id, counter, amount in rows:
                self.add(scope, scope_id, counter, amount)
            log.warning("could not flush %d report counters; will retry", len(rows))


async def startup(ctx: Context) -> None:
    counters = ctx.counters

    async def loop() -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await counters.flush(ctx)

    ctx.extras["counters_task"] = asyncio.create_task(loop(), name="edge-counters-flush")


async def shutdown(ctx: Context) -> None:
    task = ctx.extras.pop("counters_task", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await ctx.counters.flush(ctx)
