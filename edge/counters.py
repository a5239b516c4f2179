"""Report counters (requests, matches, no-matches, hovers, ...): the one buffer of counts,
and what each route counts.

Routes call ``ctx.counters.add(...)`` (or the ``count_*`` helpers below) on the hot path: a
list append, no I/O. A background task flushes the sums to the store every
``FLUSH_SECONDS`` and at shutdown, so many requests share one write. These are operational
counters for ``edge report``; billing-grade events (impressions) are never buffered here,
they are committed before their 2xx. The store's writer keeps the bumps of one transaction
in the same kind of buffer (``CountBuffer``) until its COMMIT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge.store import Store
    from matcher.types import MatchResult

log = logging.getLogger("edge.counters")
FLUSH_SECONDS = 1.0

CountRow = tuple[str, str, str, float]  # (scope: "ad", "publisher", ...; its id; counter; amount)


class CountBuffer:
    """Counter bumps waiting to be written, summed per counter when taken.

    ``mark``/``drop_since`` undo the bumps added after a point (the store writer drops a
    failed job's bumps with its savepoint).
    """

    def __init__(self) -> None:
        self._rows: list[CountRow] = []

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, scope: str, scope_id: str, counter: str, amount: float = 1) -> None:
        self._rows.append((scope, scope_id, counter, amount))

    def extend(self, rows: Iterable[CountRow]) -> None:
        self._rows.extend(rows)

    def mark(self) -> int:
        return len(self._rows)

    def drop_since(self, mark: int) -> None:
        del self._rows[mark:]

    def clear(self) -> None:
        self._rows.clear()

    def take(self) -> list[CountRow]:
        """The pending sums, one row per counter, leaving the buffer empty."""
        rows, self._rows = self._rows, []
        totals: dict[tuple[str, str, str], float] = {}
        for scope, scope_id, counter, amount in rows:
            key = (scope, scope_id, counter)
            totals[key] = totals.get(key, 0) + amount
        return [(*key, amount) for key, amount in totals.items()]


class Counters(CountBuffer):
    """The process's report counters and the task that flushes them to the store."""

    def __init__(self) -> None:
        super().__init__()
        self._task: asyncio.Task[None] | None = None

    async def flush(self, store: Store) -> None:
        rows = self.take()
        if not rows:
            return
        try:
            await store.add_counts(rows)
        except Exception:
            # Put them back so the next flush retries; never lose a count to a busy store.
            self.extend(rows)
            log.warning("could not flush %d report counters; will retry", len(rows))

    def start(self, store: Store) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(FLUSH_SECONDS)
                await self.flush(store)

        self._task = asyncio.create_task(loop(), name="edge-counters-flush")

    async def stop(self, store: Store) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.flush(store)


def count_outcome(counters: Counters, key_id: str, result: MatchResult) -> None:
    """One partner match: per key, and per ad served."""
    counter = {"matched": "matches", "empty": "empties", "no_match": "no_matches"}[result.outcome]
    counters.add("key", key_id, counter)
    for scored in result.ads:
        counters.add("ad", scored.placement.ad.id, "matches")


def count_placements(counters: Counters, pid: str, placements: list[dict[str, Any]]) -> None:
    """One /dea match answer: slots asked for, filled and left empty, per publisher and ad."""
    filled = [p for p in placements if p["ad"] is not None]
    counters.add("publisher", pid, "requests", len(placements))
    if filled:
        counters.add("publisher", pid, "matches", len(filled))
    if len(filled) < len(placements):
        counters.add("publisher", pid, "no_matches", len(placements) - len(filled))
    for p in filled:
        counters.add("ad", p["ad"]["ad_id"], "matches")


def billed_counts(
    ad_id: str, campaign_id: str | None, publisher_id: str | None, pricing: str, amount: float
) -> list[CountRow]:
    """Counter bumps of one billed amount: in total and by pricing model."""
    rows: list[CountRow] = []
    for scope, scope_id in (("ad", ad_id), ("campaign", campaign_id), ("publisher", publisher_id)):
        if scope_id:
            rows.append((scope, scope_id, "billable_usd", amount))
            rows.append((scope, scope_id, f"billable_usd_{pricing}", amount))
    return rows
