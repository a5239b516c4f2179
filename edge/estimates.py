"""The matcher's click-through estimates, rebuilt from the durable counters in the background.

Ranking reads the estimates from memory only. A background task reads the per-ad counters
(viewable impressions, valid clicks, conversions) every ``EDGE_ESTIMATES_REFRESH_SECONDS``,
builds a new ``CtrModel`` on a worker thread and swaps it into the matcher. So an estimate
is at most one interval (plus the rebuild, well under a second at 10k ads) behind the
store. The first build happens during start-up, so a restart does not forget what was
learned. A failed refresh is logged and the previous estimates stay in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from edge.store import Store
from matcher import Matcher
from matcher.ctr import CtrModel, stats_from_counters

log = logging.getLogger("edge.estimates")


class EstimatesRefresher:
    """Owns the refresh task; ``refresh()`` runs one rebuild now (tests, start-up)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.refreshed_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    async def refresh(self, store: Store, matcher: Matcher, now: float) -> CtrModel:
        rows = await store.counts(["ad"])
        stats = stats_from_counters(rows)
        placements = matcher.catalogue.placements
        model = await asyncio.to_thread(CtrModel, placements, stats, as_of=now)
        matcher.set_estimates(model)
        self.refreshed_at = now
        return model

    def start(
        self, store: Store, matcher: Callable[[], Matcher | None], clock: Callable[[], float]
    ) -> None:
        """Refresh ``matcher()`` (the one being served now: a catalogue swap replaces it)."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.interval)
                current = matcher()
                if current is None:
                    continue
                try:
                    await self.refresh(store, current, clock())
                except Exception as exc:  # keep the last estimates; try again next time
                    log.warning("click-through estimates not refreshed: %s", exc)

        self._task = asyncio.create_task(loop(), name="edge-estimates-refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
