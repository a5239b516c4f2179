"""Periodic pruning of state that only matters for a while, so keyless traffic (the tag's
match routes create a no-match window per post) cannot grow the store without bound.

The retention rules live here, not in a backend: a no-match window is forgotten
``BACKOFF_MEMORY_SECONDS`` after it ended (a post seen again later starts the schedule
afresh), a serve once it is older than the frequency-cap window (it no longer counts), and
a shared rate bucket (PostgreSQL) once it has been full again for an hour.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from matcher.state import FREQUENCY_WINDOW_SECONDS

if TYPE_CHECKING:
    from edge.context import Context

log = logging.getLogger("edge.housekeeping")

BACKOFF_MEMORY_SECONDS = 7 * 24 * 3600
PRUNE_EVERY_SECONDS = 600.0
PRUNE_BATCH = 5_000
RATE_BUCKET_IDLE_SECONDS = 3600.0


class Housekeeping:
    """The pruning loop of one process, started and stopped with the app."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    async def prune_once(self, ctx: Context) -> int:
        """Prune until a batch comes back short; how many rows went."""
        now = ctx.clock()
        # A shared rate bucket whose TAT is an hour past is full again: forgetting it
        # changes no decision (every limit's window is far shorter).
        total = await ctx.store.prune_rate_buckets(now - RATE_BUCKET_IDLE_SECONDS)
        while True:
            gone = await ctx.store.prune_matcher_state(
                now - BACKOFF_MEMORY_SECONDS, now - FREQUENCY_WINDOW_SECONDS, PRUNE_BATCH
            )
            total += gone
            if gone < PRUNE_BATCH:
                return total
            await asyncio.sleep(0)  # let beacons' writes in between batches

    def start(self, ctx: Context) -> None:
        async def loop() -> None:
            while True:
                try:
                    gone = await self.prune_once(ctx)
                    if gone:
                        log.info("pruned %d expired matcher-state rows", gone)
                except Exception as exc:  # pruning is best-effort; try again next round
                    log.warning("could not prune matcher state: %s", exc)
                await asyncio.sleep(PRUNE_EVERY_SECONDS)

        self._task = asyncio.create_task(loop(), name="edge-housekeeping")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
