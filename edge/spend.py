"""What each campaign has spent, kept in memory for the pacing gate and the billing decision.

The ledger is read from the store at start-up, before the first request (``start``), and
again whenever it is older than ``SPEND_REFRESH_SECONDS``: by the match that finds it stale,
and by a background task in a process that only takes beacons and conversions, so other
edge processes' billing shows up within that time (twice it at most). Every billing row
this process commits is added at once (``add``, called after the commit).
Spend only grows, so a refresh keeps the larger of the stored and the in-memory figure per
campaign: a billing commit that lands while the store is being read is never lost.

A charge this process has decided but not yet committed is held (``bill``): from the
moment of the decision, with no await between the headroom it read and the hold, every
later decision's ``headroom`` counts it, so events decided at once (a group-commit batch,
conversions in flight together) cannot together bill past a budget or today's cap. The
hold becomes spend when its row commits and is dropped when the write counts nothing (a
replay) or fails.

A billing row changes one campaign's figure in place (``add`` costs the same with ten
campaigns or ten thousand). The billing decision on the event loop reads those live maps
(``current``); a decision handed to the matcher's thread gets a copy that no later commit
changes (``snapshot``), made at most once per change.

The figures are per campaign in total and in the current UTC day (the daily caps); the
store answers today's from the campaigns' day buckets, bumped in each billing commit.

Copies of one click or conversion (a partner refiring a click URL, the tag resending a
click, an advertiser resending a conversion) that this process takes at once are decided in turn
(``turns``): without that, every copy in flight holds the charge it would bill, only one of
them counts, and until they commit every other event of the campaign sees that much less
headroom, so a genuine one near the budget bills less than it should, for good (a replay
never bills). A copy of one that counted here a moment ago is a replay without a hold or a
write. Impressions are not taken in turn: their copies hold a CPM bid, a cent or less, and
the beacon path must stay cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

from edge.counters import utc_day
from edge.store import Store
from matcher.pacing import Spend, day_start, headroom
from matcher.types import Campaign

SPEND_REFRESH_SECONDS = 5.0
# How many counted events ``Turns`` remembers (its copies come within moments of the first).
REMEMBERED_EVENTS = 4096

log = logging.getLogger("edge.spend")


class SpendLedger:
    """USD billed per campaign, in total and today; refreshed from the store, added to live."""

    def __init__(self, clock: Callable[[], float], ttl: float = SPEND_REFRESH_SECONDS) -> None:
        self.clock = clock
        self.ttl = ttl
        self._total: dict[str, float] = {}
        self._today: dict[str, float] = {}
        # ``current()``'s answer: a view of the two live maps, remade only when a refresh or
        # a new day replaces one of them.
        self._spend = Spend(total=self._total, today=self._today)
        self._changes = 0  # bumped by every change to a figure
        self._frozen: tuple[int, Spend] | None = None  # ``snapshot()``'s copy, at a change
        self._day = day_start(clock())
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        # Charges decided and not yet committed, per campaign: (USD, how many). Counted by
        # ``headroom`` only (the pacing gate reads committed spend).
        self._held: dict[str, tuple[float, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self.turns = Turns()

    async def start(self, store: Store) -> None:
        """Read the spend before the first request (a restarted process must not bill
        against an empty ledger), then keep it fresh in the background."""
        now = self.clock()
        async with self._lock:
            await self.refresh(store, now)
        self._task = asyncio.create_task(self._keep_fresh(store), name="edge-spend-refresh")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _keep_fresh(self, store: Store) -> None:
        """Refresh a ledger no match has refreshed for ``ttl`` (a process that only takes
        beacons and conversions still sees the others' billing); a failed read is retried
        at the next tick, the ledger kept as it was."""
        while True:
            await asyncio.sleep(self.ttl)
            now = self.clock()
            if self._fresh(now):
                continue
            try:
                async with self._lock:
                    if not self._fresh(now):
                        await self.refresh(store, now)
            except Exception as exc:
                log.warning("spend not refreshed from the store: %s", exc)

    async def snapshot(self, store: Store) -> Spend:
        """The spend now, re-read from the store first when the last read is stale: a copy
        that later commits leave as it is (a decision reads it on another thread), the same
        copy until a figure changes."""
        now = self.clock()
        self._roll(now)
        if not self._fresh(now):
            async with self._lock:  # one query refreshes it for everyone waiting
                if not self._fresh(now):
                    await self.refresh(store, now)
        frozen = self._frozen
        if frozen is None or frozen[0] != self._changes:
            frozen = self._frozen = (
                self._changes,
                Spend(total=dict(self._total), today=dict(self._today)),
            )
        return frozen[1]

    async def refresh(self, store: Store, now: float) -> None:
        day = day_start(now)
        total = await store.spend_by_campaign()
        today = await store.spend_on_day(utc_day(day))
        self._roll(now)
        self._total = _larger(self._total, total)
        self._today = _larger(self._today, today) if day == self._day else dict(today)
        self._changes += 1
        self._fetched_at = now

    def add(self, campaign_id: str | None, amount: float, at: float) -> None:
        """Count a billing row this process has just committed."""
        if not campaign_id or amount <= 0:
            return
        self._roll(at)
        self._total[campaign_id] = self._total.get(campaign_id, 0.0) + amount
        if day_start(at) == self._day:
            self._today[campaign_id] = self._today.get(campaign_id, 0.0) + amount
        self._changes += 1

    async def bill(
        self, campaign_id: str | None, amount: float | None, at: float, write: Awaitable[bool]
    ) -> bool:
        """Await ``write``, the commit of an event (True: counted) that bills ``amount``
        (None: nothing) to the campaign, with the amount held against its headroom until
        then; counted, it becomes the campaign's spend, otherwise the hold is dropped.

        The hold is taken before the first await, so a caller that decided ``amount`` from
        ``headroom`` and calls this with no await between has the two as one step: no other
        decision can read the headroom in between."""
        if not campaign_id or amount is None or amount <= 0:
            return await write
        usd, n = self._held.get(campaign_id, (0.0, 0))
        self._held[campaign_id] = (usd + amount, n + 1)
        counted = False
        try:
            counted = await write
        finally:
            usd, n = self._held[campaign_id]
            if n == 1:  # the last one: dropped exactly, no float dust left behind
                del self._held[campaign_id]
            else:
                self._held[campaign_id] = (usd - amount, n - 1)
            if counted:
                self.add(campaign_id, amount, at)
        return counted

    def current(self) -> Spend:
        """What is known now, without a store read (the billing decision's input): a view of
        the live figures, for use at once on the event loop (later commits change it)."""
        self._roll(self.clock())
        return self._current()

    def _current(self) -> Spend:
        spend = self._spend
        if spend.total is not self._total or spend.today is not self._today:
            spend = self._spend = Spend(total=self._total, today=self._today)
        return spend

    def headroom(self, campaign: Campaign | None) -> float | None:
        """USD the campaign may still be billed (``ledger.clamp`` bills at most that), None
        without a budget or a cap: what is left of both after its committed spend and the
        charges this process holds for it (``bill``). Another process's billing shows up
        at the next refresh.

        Nothing (0) for a campaign not in the live catalogue (None): the edge has no budget
        or cap to check its late events against, so they are counted and bill nothing."""
        if campaign is None:
            return 0.0
        left = headroom(campaign, self.current())
        held = self._held.get(campaign.id)
        return left if left is None or held is None else left - held[0]

    def invalidate(self) -> None:
        self._fetched_at = None

    def _roll(self, now: float) -> None:
        day = day_start(now)
        if day > self._day:
            self._day, self._today = day, {}
            self._changes += 1

    def _fresh(self, now: float) -> bool:
        at = self._fetched_at
        return at is not None and at <= now < at + self.ttl


class Turns:
    """One billable event's copies in turn: ``async with turns.turn(key)`` admits one copy of
    ``key`` at a time, the next once the one before has committed (its charge held and then
    spent or dropped); ``counted`` says whether a copy of an event counted in this process
    lately (``remember``), so that a later copy answers "replay" at once."""

    def __init__(self, remembered: int = REMEMBERED_EVENTS) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # key -> (lock, copies in)
        self._counted: OrderedDict[str, None] = OrderedDict()
        self._remembered = remembered

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        lock, n = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, n + 1)
        try:
            async with lock:
                yield
        finally:
            lock, n = self._locks[key]
            if n == 1:  # the last copy in: nothing left to order
                del self._locks[key]
            else:
                self._locks[key] = (lock, n - 1)

    def counted(self, event: str) -> bool:
        return event in self._counted

    def remember(self, event: str) -> None:
        self._counted[event] = None
        self._counted.move_to_end(event)
        if len(self._counted) > self._remembered:
            self._counted.popitem(last=False)


def _larger(mine: dict[str, float], stored: dict[str, float]) -> dict[str, float]:
    out = dict(stored)
    for cid, amount in mine.items():
        if amount > out.get(cid, 0.0):
            out[cid] = amount
    return out
