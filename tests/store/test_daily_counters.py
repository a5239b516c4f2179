"""Day buckets of the report counters on both backends: written with their events, in the
same batched upserts as the totals, read back by UTC day range."""

import asyncio
import sqlite3
from importlib import resources

import pytest

from edge import ledger
from edge.counters import Counters, utc_day, with_days
from edge.store import Hover, Impression, PlacementFailure
from edge.store.events import CountingConnection, _save_impression, flush_counts
from tests.store.conftest import sql

DAY1 = 1_790_000_000.0  # 2026-09-21 (UTC)
DAY2 = DAY1 + 86_400


def imp(key: str, at: float, **kw) -> Impression:
    base = dict(
        kind="url", env="production", ad_id="ad-1", campaign_id="cmp-1", at=at,
        publisher_id="pub-1", cpm_usd=2.0,
    )  # fmt: skip
    return Impression(dedupe_keys=(key,), **{**base, **kw})


def buckets(rows) -> dict:
    return {(d, s, i, c): a for d, s, i, c, a in rows}


def test_utc_day_is_the_utc_calendar_day():
    assert utc_day(DAY1) == "2026-09-21"
    assert utc_day(DAY1 - DAY1 % 86_400 - 0.001) == "2026-09-20"  # a millisecond before
    assert utc_day(DAY1 - DAY1 % 86_400) == "2026-09-21"  # UTC midnight starts the day


def test_with_days_adds_a_day_row_only_for_daily_counters_of_daily_scopes():
    rows = [
        ("ad", "ad-1", "impressions", 1),
        ("ad", "ad-1", "hovers", 1),  # not kept per day
        ("key", "k", "requests", 1),  # a partner's key family: kept per day too
        ("key", "k", "empties", 1),  # not kept per day
        ("publisher", "p", "requests", 3),
        ("other", "o", "impressions", 1),  # not a daily scope
    ]
    out = with_days(rows, DAY1)
    assert out[:6] == rows
    assert out[6:] == [
        ("2026-09-21", "ad", "ad-1", "impressions", 1),
        ("2026-09-21", "key", "k", "requests", 1),
        ("2026-09-21", "publisher", "p", "requests", 3),
    ]


def test_impressions_fill_the_bucket_of_their_own_day(store, run):
    for i, at in enumerate([DAY1, DAY1 + 10, DAY2]):
        assert run(ledger.record_impression(store, imp(f"tok:{i}", at))) is True
    assert run(ledger.record_impression(store, imp("tok:0", DAY2))) is False  # replay
    run(ledger.record_hover(store, Hover("tok:0", "ad-1", DAY1, 900, "pub-1")))
    run(ledger.record_failure(store, PlacementFailure("pub-1", "s", "render", DAY1)))
    got = buckets(run(store.daily_counts("2026-09-21", "2026-09-22")))
    for scope, sid in (("ad", "ad-1"), ("campaign", "cmp-1"), ("publisher", "pub-1")):
        assert got[("2026-09-21", scope, sid, "impressions")] == 2
        assert got[("2026-09-21", scope, sid, "viewable_impressions")] == 2
        assert got[("2026-09-21", scope, sid, "billable_usd")] == pytest.approx(0.004)
        assert got[("2026-09-22", scope, sid, "impressions")] == 1
    assert not [k for k in got if k[3] in ("hovers", "failures", "billable_usd_cpm")]
    # The totals are what they always were.
    totals = {(s, i, c): a for s, i, c, a in run(store.counts())}
    assert totals[("ad", "ad-1", "impressions")] == 3
    assert totals[("ad", "ad-1", "hovers")] == 1


def test_an_invalid_impression_fills_no_bucket(store, run):
    bot = imp("tok:bot", DAY1, invalid_reason="bot_user_agent")
    assert run(ledger.record_impression(store, bot)) is True
    assert run(store.daily_counts("2026-01-01", "2026-12-31")) == []


def test_daily_counts_reads_an_inclusive_day_range_of_some_scopes(store, run):
    run(
        store.add_counts(
            [
                ("2026-09-20", "publisher", "p", "requests", 1),
                ("2026-09-21", "publisher", "p", "requests", 2),
                ("2026-09-21", "ad", "a", "matches", 5),
                ("2026-09-22", "publisher", "p", "requests", 4),
                ("publisher", "p", "requests", 7),  # a total, beside them
            ]
        )
    )
    run(store.add_counts([("2026-09-21", "publisher", "p", "requests", 10)]))
    assert run(store.daily_counts("2026-09-21", "2026-09-22")) == [
        ("2026-09-21", "ad", "a", "matches", 5.0),
        ("2026-09-21", "publisher", "p", "requests", 12.0),
        ("2026-09-22", "publisher", "p", "requests", 4.0),
    ]
    assert run(store.daily_counts("2026-09-21", "2026-09-21", ["ad"])) == [
        ("2026-09-21", "ad", "a", "matches", 5.0)
    ]
    assert run(store.daily_counts("2026-09-21", "2026-09-21", [])) == []
    assert run(store.daily_counts("2026-09-23", "2026-09-30")) == []
    assert run(store.counts()) == [("publisher", "p", "requests", 7.0)]


def test_a_burst_sums_its_day_bumps_and_a_failed_job_drops_its_own(store, run, db_target):
    from tests.store.test_events import _failing_job

    async def burst():
        return await asyncio.gather(
            *(ledger.record_impression(store, imp(f"tok:{i}", DAY1)) for i in range(30)),
            store.write(_failing_job(store)),
            return_exceptions=True,
        )

    results = run(burst())
    assert results.count(True) == 30 and isinstance(results[30], ValueError)
    got = buckets(run(store.daily_counts("2026-09-21", "2026-09-21")))
    assert got[("2026-09-21", "ad", "ad-1", "impressions")] == 30
    assert got[("2026-09-21", "campaign", "cmp-1", "billable_usd")] == pytest.approx(0.06)
    assert sql(db_target, "SELECT count(*) FROM daily_counters") == [(9,)]


def test_one_upsert_per_day_bucket_per_batch():
    """A batch of 40 impressions of one ad runs one upsert per (day, scope, id, counter)."""
    conn = sqlite3.connect(":memory:", factory=CountingConnection)
    folder = resources.files("edge.store.migrations")
    for name in (
        "0004_events.sql",
        "0232_invalid_events.sql",
        "0260_daily_counters.sql",
        "0360_billing_in_impressions.sql",
    ):
        conn.executescript(folder.joinpath(name).read_text())
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    for i in range(40):
        event = imp(f"tok:{i}", DAY1 + i)
        billed = ledger.billing_usd(event)
        _save_impression(
            conn, event, billed, with_days(ledger.impression_counts(event, billed), event.at)
        )
    flush_counts(conn)
    upserts = [s for s in statements if s.startswith("INSERT INTO daily_counters")]
    assert len(upserts) == 9  # 3 scopes x (impressions, viewable_impressions, billable_usd)
    rows = conn.execute("SELECT amount FROM daily_counters WHERE counter = 'impressions'")
    assert [r[0] for r in rows] == [40, 40, 40]


def test_buffered_counters_get_the_day_of_their_flush_once_even_when_retried(store, run):
    class Down:
        async def add_counts(self, rows):
            raise OSError("the store is down")

    counters = Counters()
    counters.add("publisher", "pub-1", "requests", 3)
    counters.add("key", "k", "requests")
    run(counters.flush(Down(), now=DAY1))  # fails: kept, with its day rows, for a retry
    counters.add("publisher", "pub-1", "requests", 1)
    run(counters.flush(store, now=DAY2))
    assert run(store.daily_counts("2026-09-01", "2026-09-30")) == [
        ("2026-09-21", "key", "k", "requests", 1.0),
        ("2026-09-21", "publisher", "pub-1", "requests", 3.0),
        ("2026-09-22", "publisher", "pub-1", "requests", 1.0),
    ]
    totals = {(s, i, c): a for s, i, c, a in run(store.counts())}
    assert totals == {("publisher", "pub-1", "requests"): 4, ("key", "k", "requests"): 1}


def test_clicks_and_their_charges_fill_the_bucket_of_their_day(store, run):
    from edge.store import Click, Conversion

    valid = Click(click_id="c1", impression_key="tok:a", kind="url", env="production",
                  ad_id="ad-1", campaign_id="cmp-1", at=DAY1, publisher_id="pub-1",
                  charge_usd=0.5)  # fmt: skip
    invalid = Click(click_id="c2", impression_key="tok:b", kind="url", env="production",
                    ad_id="ad-1", campaign_id="cmp-1", at=DAY2, publisher_id="pub-1",
                    invalid_reason="bot_user_agent")  # fmt: skip
    assert run(ledger.record_click(store, valid)) is True
    assert run(ledger.record_click(store, invalid)) is True
    (stored,) = run(store.clicks_by_id("c1", "production", 1))
    conversion = Conversion(stored, DAY2, None, 2.0)
    assert run(ledger.record_conversion(store, conversion)) is True
    got = buckets(run(store.daily_counts("2026-09-21", "2026-09-22")))
    for scope, sid in (("ad", "ad-1"), ("campaign", "cmp-1"), ("publisher", "pub-1")):
        assert got[("2026-09-21", scope, sid, "clicks")] == 1
        assert got[("2026-09-21", scope, sid, "billable_usd")] == pytest.approx(0.5)
        assert ("2026-09-22", scope, sid, "clicks") not in got  # the invalid one: none
    assert got[("2026-09-22", "campaign", "cmp-1", "billable_usd")] == pytest.approx(2.0)
