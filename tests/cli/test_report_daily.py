"""``edge report --by day``: day buckets as a table, JSON or CSV, on either backend; one-line
errors for bad days and ranges."""

import asyncio
import csv
import datetime as dt
import io

import orjson
import pytest

from edge import ledger
from edge.cli import main
from edge.counters import utc_day
from edge.reports import daily
from edge.reports.daily import DayRange, RangeError
from edge.settings import Settings
from edge.store import Impression, open_store

DAY1 = 1_790_000_000.0  # 2026-09-21 (UTC)
DAY3 = DAY1 + 2 * 86_400


def _fill(target) -> None:
    async def work():
        store = open_store(Settings(db=target))
        await store.open()
        try:
            for i, at in enumerate([DAY1, DAY1 + 5, DAY3]):
                await ledger.record_impression(store, Impression(
                    kind="url", dedupe_keys=(f"tok:{i}",), env="production", ad_id="ad-1",
                    campaign_id="cmp-1", at=at, publisher_id="pub-1", cpm_usd=3.0,
                ))  # fmt: skip
            await store.add_counts(
                [
                    ("2026-09-21", "publisher", "pub-1", "requests", 4),
                    ("2026-09-21", "publisher", "pub-1", "matches", 3),
                    ("2026-09-21", "ad", "ad-1", "matches", 3),
                    ("2026-09-21", "campaign", "cmp-1", "matches", 3),
                    ("2026-09-21", "ad", "ad-1", "clicks", 1),
                    ("2026-09-25", "ad", "ad-1", "matches", 9),  # outside the range asked
                ]
            )
        finally:
            await store.close()

    asyncio.run(work())


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path) -> str:
    if request.param == "sqlite":
        target = tmp_path / "edge.db"
        _fill(target)
        return str(target)
    url = request.getfixturevalue("postgres").new_database()
    _fill(url)
    return url


RANGE = ["--since", "2026-09-21", "--until", "2026-09-23"]


def test_json_rows_per_day_scope_and_id(db, capsys):
    assert main(["report", "--by", "day", *RANGE, "--format", "json", "--db", db]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert (report["by"], report["since"], report["until"]) == ("day", "2026-09-21", "2026-09-23")
    rows = {(r["day"], r["scope"], r["id"]): r for r in report["rows"]}
    assert list(rows) == [
        ("2026-09-21", "campaign", "cmp-1"),
        ("2026-09-21", "ad", "ad-1"),
        ("2026-09-21", "publisher", "pub-1"),
        ("2026-09-23", "campaign", "cmp-1"),
        ("2026-09-23", "ad", "ad-1"),
        ("2026-09-23", "publisher", "pub-1"),
    ]
    ad = rows[("2026-09-21", "ad", "ad-1")]
    assert ad == {
        "day": "2026-09-21", "scope": "ad", "id": "ad-1", "matches": 3, "impressions": 2,
        "viewable_impressions": 2, "clicks": 1, "billable_usd": 0.006,
    }  # fmt: skip
    pub = rows[("2026-09-21", "publisher", "pub-1")]
    assert (pub["requests"], pub["matches"], pub["impressions"]) == (4, 3, 2)
    assert rows[("2026-09-23", "campaign", "cmp-1")]["impressions"] == 1


def test_csv_has_one_header_and_a_line_per_row(db, capsys):
    assert main(["report", *RANGE, "--format", "csv", "--db", db]) == 0  # --by day implied
    lines = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert lines[0] == [
        "day", "scope", "id", "requests", "matches", "impressions", "viewable_impressions",
        "clicks", "billable_usd",
    ]  # fmt: skip
    assert lines[1] == ["2026-09-21", "campaign", "cmp-1", "", "3", "2", "2", "0", "0.006"]
    assert lines[3] == ["2026-09-21", "publisher", "pub-1", "4", "3", "2", "2", "0", "0.006"]
    assert len(lines) == 7


def test_table_names_the_range_and_each_scope(db, capsys):
    assert main(["report", "--by", "day", *RANGE, "--db", db]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Days 2026-09-21 to 2026-09-23 (UTC)\n")
    assert "Campaigns (1)" in out and "Ads (1)" in out and "Publishers (1)" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("2026-09-21  ad-1"))
    assert line.split() == ["2026-09-21", "ad-1", "3", "2", "2", "1", "0.006000"]


def test_table_money_is_the_figure_json_and_csv_give():
    # Two CPM impressions at $1.99 CPM: 0.00398, kept to the micro-dollar; the table
    # must not print 0.0040 where JSON and CSV say 0.00398.
    days = DayRange.parse("2026-09-21", "2026-09-21", DAY1)
    report = daily.build(
        [("2026-09-21", "campaign", "cmp-1", "billable_usd", 2 * 1.99 / 1000)], days
    )
    assert report["rows"][0]["billable_usd"] == 0.00398
    assert daily.render_csv(report).splitlines()[1].endswith(",0.00398")
    line = next(x for x in daily.render_table(report).splitlines() if "cmp-1" in x)
    assert line.split()[-1] == "0.003980"


@pytest.mark.parametrize(("amount", "cell"), [(0.00005, "0.00005"), (1500.0, "1500"), (0.0, "0")])
def test_csv_money_is_plain_decimals(amount, cell):
    # A $0.05 CPM impression bills $0.00005: Python's str() would write 5e-05.
    days = DayRange.parse("2026-09-21", "2026-09-21", DAY1)
    report = daily.build([("2026-09-21", "campaign", "cmp-1", "billable_usd", amount)], days)
    assert daily.render_csv(report).splitlines()[1].split(",")[-1] == cell


def test_default_range_is_the_30_days_that_end_today(tmp_path, capsys):
    db = tmp_path / "edge.db"
    _fill(db)
    today = utc_day(dt.datetime.now(dt.UTC).timestamp())
    assert main(["report", "--by", "day", "--format", "json", "--db", str(db)]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["until"] == today
    since = dt.date.fromisoformat(today) - dt.timedelta(days=29)
    assert report["since"] == since.isoformat()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "yesterday"], "--since takes a UTC day as YYYY-MM-DD, got 'yesterday'"),
        (["--until", "2026-02-30"], "--until: '2026-02-30' is not a day of the calendar"),
        (["--since", "2026-9-1"], "--since takes a UTC day as YYYY-MM-DD, got '2026-9-1'"),
        (
            ["--since", "2026-09-23", "--until", "2026-09-21"],
            "--since 2026-09-23 is after --until 2026-09-21",
        ),
        (["--format", "csv"], "--format csv lists day buckets: add --by day"),
    ],
)
def test_bad_days_are_one_line_errors(tmp_path, capsys, argv, message):
    db = tmp_path / "edge.db"
    _fill(db)
    assert main(["report", *argv, "--db", str(db)]) == 2
    out = capsys.readouterr()
    assert out.err == f"edge report: {message}\n" and out.out == ""


def test_a_missing_database_is_refused(tmp_path, capsys):
    assert main(["report", "--by", "day", "--db", str(tmp_path / "nope.db")]) == 2
    assert "EDGE_DB (--db): no database at" in capsys.readouterr().err
    assert not (tmp_path / "nope.db").exists()


def test_range_parsing_defaults():
    now = DAY3  # 2026-09-23
    assert DayRange.parse(None, None, now).days[0] == "2026-08-25"
    assert DayRange.parse(None, None, now).days[-1] == "2026-09-23"
    assert DayRange.parse(None, "2026-09-01", now).since == dt.date(2026, 8, 3)
    assert DayRange.parse("2026-09-22", None, now).days == ["2026-09-22", "2026-09-23"]
    with pytest.raises(RangeError):
        DayRange.parse("2026-09-24", None, now)  # after today, the default end
    # The calendar's first days: the default start stops at its first day.
    assert DayRange.parse(None, "0001-01-05", now).days[0] == "0001-01-01"
    assert len(DayRange.parse(None, "0001-01-30", now).days) == 30


def test_the_help_gives_the_default_range_as_the_code_computes_it():
    # "--since ... (30 days ago)" was one day off: the range starts 29 days before --until.
    from edge.cli import build_parser
    from edge.reports.daily import DEFAULT_DAYS
    from tests.test_docs import commands

    text = " ".join(dict(commands(build_parser()))["edge report"].format_help().split())
    assert f"(default: {DEFAULT_DAYS - 1} days before --until, " in text, text
    assert "(default: today)" in text, text
    days = DayRange.parse(None, "2026-11-30", DAY1)
    assert (days.until - days.since).days == DEFAULT_DAYS - 1


def test_key_rows_have_day_buckets(tmp_path, capsys):
    # A partner's requests and what its serves earned, per UTC day, in the key's row.
    target = tmp_path / "edge.db"

    async def work():
        store = open_store(Settings(db=target))
        await store.open()
        try:
            await ledger.record_impression(store, Impression(
                kind="ai-view", dedupe_keys=("ai:1",), env="production", ad_id="ad-1",
                campaign_id="cmp-1", at=DAY1, cpm_usd=3.0, key_family="key_p",
            ))  # fmt: skip
            await store.add_counts([("2026-09-21", "key", "key_p", "requests", 2)])
        finally:
            await store.close()

    asyncio.run(work())
    assert main(["report", *RANGE, "--format", "json", "--db", str(target)]) == 0
    rows = orjson.loads(capsys.readouterr().out)["rows"]
    (key,) = [r for r in rows if r["scope"] == "key"]
    assert key == {
        "day": "2026-09-21", "scope": "key", "id": "key_p", "requests": 2, "matches": 0,
        "impressions": 0, "viewable_impressions": 1, "clicks": 0, "billable_usd": 0.003,
    }  # fmt: skip
    assert rows[-1] is key  # after the campaigns, ads and publishers of its day
    assert main(["report", *RANGE, "--db", str(target)]) == 0
    out = capsys.readouterr().out
    assert "API keys (1)" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("2026-09-21  key_p"))
    assert line.split() == ["2026-09-21", "key_p", "2", "0", "0", "1", "0", "0.003000"]
