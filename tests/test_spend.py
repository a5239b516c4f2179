"""The spend ledger: refreshed from the store, added to on every billing commit, per day."""

from __future__ import annotations

import asyncio

import pytest

from edge.counters import utc_day
from edge.spend import SpendLedger
from edge.store import StoreUnavailable
from matcher.pacing import DAY_SECONDS, day_start
from matcher.types import Campaign


class FakeStore:
    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.today: dict[str, float] = {}
        self.reads = 0
        self.days: list[str] = []

    async def spend_by_campaign(self):
        self.reads += 1
        return dict(self.total)

    async def spend_on_day(self, day):
        self.days.append(day)
        return dict(self.today)


def test_commits_show_at_once_and_a_refresh_never_lowers_a_figure(clock):
    ledger = SpendLedger(clock, ttl=5)
    store = FakeStore()
    store.total = {"c": 10.0}
    spend = asyncio.run(ledger.snapshot(store))
    assert spend.total == {"c": 10.0} and store.reads == 1
    ledger.add("c", 2.5, clock())
    assert ledger.current().total == {"c": 12.5} and ledger.current().today == {"c": 2.5}
    clock.advance(6)  # stale: re-read; the store has not seen the 2.5 yet, keep the larger
    spend = asyncio.run(ledger.snapshot(store))
    assert store.reads == 2 and spend.total == {"c": 12.5}
    store.total = {"c": 20.0}  # another process billed more
    clock.advance(6)
    assert asyncio.run(ledger.snapshot(store)).total == {"c": 20.0}


def test_today_starts_from_zero_at_utc_midnight(clock):
    clock.now = day_start(clock.now) + DAY_SECONDS - 1
    ledger = SpendLedger(clock)
    ledger.add("c", 3.0, clock())
    assert ledger.current().today == {"c": 3.0}
    clock.advance(2)
    assert ledger.current().today == {} and ledger.current().total == {"c": 3.0}


def test_todays_spend_is_read_from_the_current_utc_days_buckets(clock):
    clock.now = day_start(clock.now) + DAY_SECONDS - 1  # the day's last second
    ledger = SpendLedger(clock, ttl=5)
    store = FakeStore()
    store.today = {"c": 4.0}
    assert asyncio.run(ledger.snapshot(store)).today == {"c": 4.0}
    assert store.days == [utc_day(clock.now)]
    clock.advance(6)  # past midnight: the next day's buckets
    store.today = {}
    assert asyncio.run(ledger.snapshot(store)).today == {}
    assert store.days[-1] == utc_day(clock.now) != store.days[0]


def test_current_reads_the_live_figures_and_a_commit_copies_nothing(clock):
    """The billing decision reads ``current()`` on every beacon: one view of the live
    figures, which a commit changes in place (no copy of every campaign's figure per
    billing row); a refresh or a new day gives a new one."""
    ledger = SpendLedger(clock, ttl=5)
    for i in range(1000):
        ledger.add(f"other-{i}", 1.0, clock())
    first = ledger.current()
    total, today = first.total, first.today
    ledger.add("c", 2.5, clock())
    assert ledger.current() is first and first.total is total and first.today is today
    assert first.total["c"] == 2.5 and first.today["c"] == 2.5 and len(first.total) == 1001
    store = FakeStore()
    store.total = {"c": 9.0}
    asyncio.run(ledger.snapshot(store))
    refreshed = ledger.current()
    assert refreshed is not first and refreshed.total["c"] == 9.0
    clock.advance(DAY_SECONDS)  # a new UTC day: today is empty again
    assert ledger.current().today == {} and ledger.current().total["c"] == 9.0


def test_a_snapshot_is_a_copy_that_later_commits_leave_alone(clock):
    """A decision reads its snapshot on the matcher's thread: commits after it do not change
    it, and the same copy serves every decision until a figure changes."""
    ledger = SpendLedger(clock, ttl=5)
    store = FakeStore()
    store.total = {"c": 1.0}
    first = asyncio.run(ledger.snapshot(store))
    assert asyncio.run(ledger.snapshot(store)) is first
    ledger.add("c", 2.0, clock())
    assert first.total == {"c": 1.0}
    after = asyncio.run(ledger.snapshot(store))
    assert after is not first and after.total == {"c": 3.0} and after.today == {"c": 2.0}
    clock.advance(DAY_SECONDS)  # a new day empties today: a new copy
    assert asyncio.run(ledger.snapshot(store)).today == {}
    assert after.today == {"c": 2.0}


def campaign(budget: float | None = None, daily_cap: float | None = None) -> Campaign:
    return Campaign(
        id="c", advertiser_name="A", status="active", start_at=None, end_at=None,
        budget_usd=budget, ad_sets=(), daily_cap_usd=daily_cap,
    )  # fmt: skip


def test_a_charge_is_held_from_its_decision_until_its_write_is_done(clock):
    """Charges being written count against the headroom at once; the committed one then
    counts as spend, and the holds of a replay and of a failed write are dropped."""
    ledger = SpendLedger(clock)
    budget, capped = campaign(budget=10.0), campaign(daily_cap=6.0)

    async def run() -> list[object]:
        loop = asyncio.get_running_loop()
        writes = [loop.create_future() for _ in range(3)]
        bills = [
            asyncio.ensure_future(ledger.bill("c", usd, clock(), w))
            for usd, w in zip((4.0, 4.0, 2.0), writes, strict=True)
        ]
        await asyncio.sleep(0)  # each runs to its write: all three held, none committed
        assert ledger.headroom(budget) == pytest.approx(0.0)
        assert ledger.headroom(capped) == pytest.approx(-4.0)  # a cap counts holds too
        assert ledger.current().total == {}  # the pacing gate reads committed spend
        writes[0].set_result(True)  # committed
        writes[1].set_result(False)  # a replay: counted nothing
        writes[2].set_exception(StoreUnavailable("disk full"))
        return await asyncio.gather(*bills, return_exceptions=True)

    first, replay, failed = asyncio.run(run())
    assert first is True and replay is False and isinstance(failed, StoreUnavailable)
    assert ledger.current().total == {"c": 4.0} and ledger.current().today == {"c": 4.0}
    assert ledger.headroom(budget) == 6.0 and ledger.headroom(capped) == 2.0  # no hold left
    assert ledger.headroom(campaign()) is None  # no budget, no cap: no limit


def test_an_event_that_bills_nothing_holds_nothing(clock):
    ledger = SpendLedger(clock)

    async def write() -> bool:
        assert ledger.headroom(campaign(budget=1.0)) == 1.0
        return True

    for amount in (None, 0.0):
        assert asyncio.run(ledger.bill("c", amount, clock(), write())) is True
    assert asyncio.run(ledger.bill(None, 1.0, clock(), write())) is True
    assert ledger.current().total == {}


def test_a_campaign_not_in_the_live_catalogue_has_no_headroom(clock):
    """The billing paths look the event's campaign up in the live catalogue; one it no
    longer has (None) has no budget or cap to check, so nothing is left to bill."""
    ledger = SpendLedger(clock)
    assert ledger.headroom(None) == 0.0
    assert ledger.headroom(campaign()) is None  # in the catalogue, without limits


def test_started_it_has_read_the_store_and_keeps_fresh_without_a_match():
    # A restarted process's first billing decision must see what was spent before it; one
    # that only takes beacons (no match refreshes it) still sees the others' billing.
    import time

    async def run() -> None:
        store = FakeStore()
        store.total = {"c": 10.0}
        ledger = SpendLedger(time.time, ttl=0.05)
        await ledger.start(store)
        try:
            assert ledger.current().total == {"c": 10.0} and store.reads == 1
            store.total = {"c": 30.0}  # another process billed
            deadline = time.monotonic() + 2
            while ledger.current().total != {"c": 30.0} and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert ledger.current().total == {"c": 30.0}
        finally:
            await ledger.stop()
        reads = store.reads
        await asyncio.sleep(0.15)
        assert store.reads == reads  # stopped: no more reads

    asyncio.run(run())
