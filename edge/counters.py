"""Report counters (requests, matches, no-matches, hovers, ...): the one buffer of counts,
and what each route counts.

Routes call ``ctx.counters.add(...)`` (or the ``count_*`` helpers below) on the hot path: a
list append, no I/O. A background task flushes the sums to the store every
``FLUSH_SECONDS`` and at shutdown, so many requests share one write. These are operational
counters for ``edge report``; billing-grade events (impressions) are never buffered here,
they are committed before their 2xx. The store's writer keeps the bumps of one transaction
in the same kind of buffer (``CountBuffer``) until its COMMIT.

Besides the totals, some counters are also kept per UTC day (``DAILY_COUNTERS`` of
``DAILY_SCOPES``, for ``edge report --by day`` and the /reports page): ``with_days`` adds a
day row beside each such bump, dated by the event (or, for the buffered counters, by the
flush, at most ``FLUSH_SECONDS`` later). Day rows ride the same buffers, sums and
transactions as the totals, so a batch costs one more upsert per (day, counter), not one
per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge.store import Store
    from matcher.types import MatchResult

log = logging.getLogger("edge.counters")
FLUSH_SECONDS = 1.0

TotalRow = tuple[str, str, str, float]  # (scope: "ad", "publisher", ...; its id; counter; amount)
DayRow = tuple[str, str, str, str, float]  # (UTC day "YYYY-MM-DD", scope, its id, counter, amount)
CountRow = TotalRow | DayRow  # a bump of a total, or of one day's bucket

# What is kept per UTC day: delivery (requests, matches, impressions, viewable), clicks and
# spend, per ad, campaign, publisher and key (a partner's key family). A request concerns a
# page, a post or a partner's call, so only a publisher and a key have one; the other
# counters exist for every scope they are counted for.
DAILY_SCOPES = frozenset({"ad", "campaign", "publisher", "key"})
# What the advertiser says its conversions were worth (their value_usd, summed): reported
# per ad, campaign and key, never billed.
CONVERSION_VALUE = "conversion_value_usd"
DAILY_COUNTERS = (
    "requests",
    "matches",
    "impressions",
    "viewable_impressions",
    "clicks",
    "billable_usd",
)
_DAILY = frozenset(DAILY_COUNTERS)


_last_day: tuple[int, str] = (-1, "")  # (days since the epoch, its text): one day at a time


def utc_day(at: float) -> str:
    """The UTC day of an instant (epoch seconds), as ``YYYY-MM-DD``."""
    global _last_day
    number = int(at // 86_400)
    if number != _last_day[0]:  # formatting is most of the cost; events come day by day
        _last_day = (number, time.strftime("%Y-%m-%d", time.gmtime(at)))
    return _last_day[1]


def with_days(rows: Iterable[CountRow], at: float) -> list[CountRow]:
    """``rows`` and, for each bump of a daily counter, the same bump of ``at``'s day."""
    return with_day(rows, utc_day(at))


def with_day(rows: Iterable[CountRow], day: str) -> list[CountRow]:
    """``rows`` and, for each bump of a daily counter, the same bump of ``day``."""
    rows = list(rows)
    days: list[CountRow] = [
        (day, r[0], r[1], r[2], r[3])
        for r in rows
        if len(r) == 4 and r[0] in DAILY_SCOPES and r[2] in _DAILY
    ]
    return rows + days


def times_rows(rows: Sequence[CountRow], times: int) -> Sequence[CountRow]:
    """``rows`` as one bump each of ``times`` times its amount (what ``times`` copies of
    ``rows`` add up to, as ``CountBuffer.take`` sums them)."""
    if times == 1:
        return rows
    return [_row(row[:-1], row[-1] * times) for row in rows]


def split_rows(rows: Iterable[CountRow]) -> tuple[list[TotalRow], list[DayRow]]:
    """Bumps of totals and bumps of day buckets (each goes to its own table)."""
    totals: list[TotalRow] = []
    days: list[DayRow] = []
    for row in rows:
        if len(row) == 4:
            totals.append(row)
        else:
            days.append(row)
    return totals, days


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
        """The pending sums, one row per counter, leaving the buffer empty.

        Equal bumps are counted first (in C, by ``Counter``), then each is added times its
        count: a batch of events of one ad repeats the same few bumps, so this walks the
        distinct ones instead of every row (about half the time for a batch of 32)."""
        rows, self._rows = self._rows, []
        totals: dict[tuple[str, ...], float] = {}
        for row, times in Counter(rows).items():
            key = row[:-1]
            totals[key] = totals.get(key, 0) + row[-1] * times
        return [_row(key, amount) for key, amount in totals.items()]


def _row(key: tuple[str, ...], amount: float) -> CountRow:
    if len(key) == 3:
        return (key[0], key[1], key[2], amount)
    return (key[0], key[1], key[2], key[3], amount)


class Counters(CountBuffer):
    """The process's report counters and the task that flushes them to the store."""

    def __init__(self) -> None:
        super().__init__()
        self._task: asyncio.Task[None] | None = None
        # Rows of failed flushes, day rows already added: retried as they are, so a count
        # keeps the day it was flushed on and never gets a second day row.
        self._retry = CountBuffer()

    async def flush(self, store: Store, now: float | None = None) -> None:
        fresh = self.take()
        pending = CountBuffer()
        pending.extend(self._retry.take())
        if fresh:
            pending.extend(with_days(fresh, time.time() if now is None else now))
        rows = pending.take()
        if not rows:
            return
        try:
            await store.add_counts(rows)
        except Exception:
            # Keep them for the next flush; never lose a count to a busy store.
            self._retry.extend(rows)
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


def count_outcome(counters: Counters, key_family: str, result: MatchResult) -> None:
    """One partner match: per key (its rotation family, ``KeyRecord.family``: the row its
    serves' impressions, clicks and money count for too), and per ad served."""
    counter = {"matched": "matches", "empty": "empties", "no_match": "no_matches"}[result.outcome]
    counters.add("key", key_family, counter)
    for scored in result.ads:
        counters.add("ad", scored.placement.ad.id, "matches")
        counters.add("campaign", scored.placement.campaign.id, "matches")


def count_placements(
    counters: Counters,
    pid: str,
    placements: list[dict[str, Any]],
    campaign_of: Callable[[str], str | None] = lambda ad_id: None,
) -> None:
    """One /dea match answer: slots asked for, filled and left empty, per publisher and ad
    (and per campaign, the one ``campaign_of`` names for an ad id)."""
    filled = [p for p in placements if p["ad"] is not None]
    counters.add("publisher", pid, "requests", len(placements))
    if filled:
        counters.add("publisher", pid, "matches", len(filled))
    if len(filled) < len(placements):
        counters.add("publisher", pid, "no_matches", len(placements) - len(filled))
    for p in filled:
        ad_id = p["ad"]["ad_id"]
        counters.add("ad", ad_id, "matches")
        campaign_id = campaign_of(ad_id)
        if campaign_id:
            counters.add("campaign", campaign_id, "matches")


def billed_counts(
    ad_id: str,
    campaign_id: str | None,
    publisher_id: str | None,
    pricing: str,
    amount: float,
    key_family: str | None = None,
) -> list[TotalRow]:
    """Counter bumps of one billed amount: in total and by pricing model, for the ad, its
    campaign, the publisher and the partner's key family that served it (when known)."""
    rows: list[TotalRow] = []
    scopes = (
        ("ad", ad_id),
        ("campaign", campaign_id),
        ("publisher", publisher_id),
        ("key", key_family),
    )
    for scope, scope_id in scopes:
        if scope_id:
            rows.append((scope, scope_id, "billable_usd", amount))
            rows.append((scope, scope_id, f"billable_usd_{pricing}", amount))
    return rows
