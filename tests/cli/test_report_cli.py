"""``edge report``: counters per ad and per publisher from the store, text and JSON."""

import asyncio

import orjson
import pytest

from edge import ledger
from edge.cli import main
from edge.cli.report import build, render_text
from edge.ivt import INVALID_COUNTERS
from edge.reports import daily
from edge.store import Click, Conversion, Hover, Impression, SQLiteStore

# A revoked partner's events count for its ad and campaign, never on a key or publisher row.
KEY_REVOKED = ("invalid_key_revoked", "invalid_clicks_key_revoked")
KEY_ROW_INVALID = [c for c in INVALID_COUNTERS if c not in KEY_REVOKED]
PUBLISHER_ROW_INVALID = [c for c in KEY_ROW_INVALID if c != "invalid_not_served"]


def _fill(path):
    store = SQLiteStore(path)
    store.open_blocking()

    async def work():
        await store.add_counts(
            [
                ("publisher", "pub-1", "requests", 3),
                ("publisher", "pub-1", "matches", 2),
                ("publisher", "pub-1", "no_matches", 1),
                ("ad", "ad-1", "matches", 2),
                ("key", "key_x", "requests", 7),
            ]
        )
        for i, kind in enumerate(["url", "ugc", "ai-render", "ai-view"]):
            await ledger.record_impression(store, Impression(
                kind=kind, dedupe_keys=(f"k{i}",), env="production", ad_id="ad-1",
                campaign_id="cmp-1", at=1.0, publisher_id="pub-1" if i < 2 else None,
                cpm_usd=5.0 if kind != "ai-render" else None,
            ))  # fmt: skip
        await ledger.record_hover(store, Hover("t1", "ad-1", 1.0, 900, "pub-1"))
        await ledger.record_impression(store, Impression(
            kind="url", dedupe_keys=("bot",), env="production", ad_id="ad-1",
            campaign_id="cmp-1", at=1.0, publisher_id="pub-1",
            invalid_reason="bot_user_agent",
        ))  # fmt: skip

    asyncio.run(work())
    store.close_blocking()


def test_json_report(tmp_path, capsys):
    db = tmp_path / "edge.db"
    _fill(db)
    assert main(["report", "--json", "--db", str(db)]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert list(report)[:2] == ["ad", "publisher"]
    ad = report["ad"]["ad-1"]
    assert ad["matches"] == 2 and "requests" not in ad and "no_matches" not in ad
    assert ad["impressions"] == 3 and ad["viewable_impressions"] == 3  # url, ugc + ai split
    assert ad["hovers"] == 1 and ad["failures"] == 0
    assert ad["billable_usd"] == 0.015
    pub = report["publisher"]["pub-1"]
    assert (pub["requests"], pub["matches"], pub["no_matches"]) == (3, 2, 1)
    assert pub["impressions"] == 2 and pub["billable_usd"] == 0.01
    assert report["campaign"]["cmp-1"]["billable_usd"] == 0.015
    assert report["key"]["key_x"]["requests"] == 7
    # Invalid events, by reason, under keys that start with "invalid"; never billed.
    assert ad["invalid_bot_user_agent"] == 1 and pub["invalid_bot_user_agent"] == 1


def test_json_money_is_in_plain_decimals_never_exponent_form(capsys):
    # A $0.0004 CPM bills $0.0000004 an impression: ten are $0.000004, which a JSON encoder
    # writes 4e-06. Every JSON form gives plain decimals, as the CSV does.
    tiny = 10 * 0.0004 / 1000
    report = build([("campaign", "cmp-1", "billable_usd", tiny)], (), now=0.0)
    report["campaign"]["cmp-1"]["pacing"] = {"pacing": "even", "spent_usd": tiny,
                                             "planned_usd": 0.00001, "budget_usd": 1.0,
                                             "daily_cap_usd": None}  # fmt: skip
    text = daily.render_json(report)
    assert "e-" not in text and '"billable_usd": 0.000004' in text
    assert '"spent_usd": 0.000004' in text and '"planned_usd": 0.00001' in text
    again = orjson.loads(text)["campaign"]["cmp-1"]
    assert again["billable_usd"] == 0.000004 and again["pacing"]["budget_usd"] == 1
    days = daily.DayRange.parse("2026-01-01", "2026-01-01", 0.0)
    by_day = daily.build([("2026-01-01", "ad", "ad-1", "billable_usd", tiny)], days)
    assert '"billable_usd": 0.000004' in daily.render_json(by_day)


def test_text_report(tmp_path, capsys):
    db = tmp_path / "edge.db"
    _fill(db)
    assert main(["report", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "Ads (1)" in out and "Publishers (1)" in out
    header = next(line for line in out.splitlines() if line.strip().startswith("ad "))
    assert header.split()[1:3] == ["matches", "impressions"]
    pub_header = next(line for line in out.splitlines() if line.strip().startswith("publisher "))
    assert pub_header.split()[1:4] == ["requests", "matches", "no_matches"]
    row = next(line for line in out.splitlines() if line.strip().startswith("ad-1"))
    cells = dict(zip(header.split(), row.split(), strict=True))
    assert cells["billable_usd"] == "0.015000" and cells["invalid_bot_user_agent"] == "1"


def test_text_report_money_is_the_figure_json_gives():
    # $1.99 CPM twice: 0.00398 in JSON; the table neither rounds it to 0.0040 nor the
    # pacing cell to 0.00.
    report = build([("campaign", "cmp-1", "billable_usd", 2 * 1.99 / 1000)], (), now=0.0)
    assert report["campaign"]["cmp-1"]["billable_usd"] == 0.00398
    report["campaign"]["cmp-1"]["pacing"] = {"pacing": "even", "spent_usd": 0.00398,
                                             "planned_usd": 0.0125, "budget_usd": 1.0,
                                             "daily_cap_usd": None}  # fmt: skip
    lines = render_text(report).splitlines()
    header = next(line for line in lines if line.strip().startswith("campaign "))
    row = next(line for line in lines if line.strip().startswith("cmp-1"))
    cells = dict(zip(header.split(), row.split(), strict=True))
    assert cells["billable_usd"] == "0.003980" and cells["billable_usd_cpm"] == "0.000000"
    assert cells["pacing"] == "0.003980/0.012500/1.000000"
    # A budget without a flight end has no even line: its overspend shows beside the budget.
    report["campaign"]["cmp-1"]["pacing"].update(spent_usd=10.0, planned_usd=None, budget_usd=5)
    row = next(ln for ln in render_text(report).splitlines() if ln.strip().startswith("cmp-1"))
    assert dict(zip(header.split(), row.split(), strict=True))["pacing"] == "10.000000/-/5.000000"


def test_empty_store_report(tmp_path, capsys):
    # An existing database with nothing counted yet (a missing one is refused).
    assert main(["publishers", "add", "p", "--origin", "https://a.example",
                 "--db", str(tmp_path / "e.db")]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["report", "--db", str(tmp_path / "e.db")]) == 0
    assert "(none yet)" in capsys.readouterr().out
    assert build([]) == {"ad": {}, "publisher": {}}


def test_clicks_ctr_conversions_money_by_model_invalid_and_pacing(tmp_path, capsys):
    db = tmp_path / "edge.db"
    _fill(db)
    store = SQLiteStore(db)
    store.open_blocking()

    async def work():
        # The bundled catalogue's cmp-happy-hound (CPC 1.40, budget 20,000, no flight end).
        for i in range(4):
            await ledger.record_impression(store, Impression(
                kind="url", dedupe_keys=(f"tok:{i}",), env="production", ad_id="ad-dog-food",
                campaign_id="cmp-happy-hound", at=1.0,
            ))  # fmt: skip
        await ledger.record_click(store, Click("clk-1", "tok:0", "url", "production", "ad-dog-food",
                                       "cmp-happy-hound", 2.0, charge_usd=1.4))  # fmt: skip
        again = Click("clk-2", "tok:0", "url", "production", "ad-dog-food",
                      "cmp-happy-hound", 2.0, invalid_reason="duplicate")  # fmt: skip
        await ledger.record_click(store, again)
        (clicked,) = await store.clicks_by_id("clk-1", "production", 1)
        # Worth $49.90 to the advertiser: reported beside the conversion, never billed.
        await ledger.record_conversion(store, Conversion(clicked, 3.0, value_usd=49.9))

    asyncio.run(work())
    store.close_blocking()
    capsys.readouterr()
    assert main(["report", "--json", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    report = orjson.loads(out)
    # No catalogue loaded or named: the pacing is the bundled samples', and it says so.
    assert "bundled sample catalogue" in err and "--catalogue" in err
    ad = report["ad"]["ad-dog-food"]
    assert (ad["clicks"], ad["conversions"], ad["ctr"]) == (1, 1, 0.25)
    assert ad["invalid_clicks_duplicate"] == 1
    assert ad["billable_usd"] == ad["billable_usd_cpc"] == 1.4 and ad["billable_usd_cpm"] == 0
    assert ad["conversion_value_usd"] == 49.9 and ad["billable_usd_cpa"] == 0
    camp = report["campaign"]["cmp-happy-hound"]
    assert camp["conversion_value_usd"] == 49.9 and camp["billable_usd"] == 1.4
    assert (camp["clicks"], camp["viewable_impressions"], camp["ctr"]) == (1, 4, 0.25)
    assert camp["pacing"] == {"pacing": "even", "spent_usd": 1.4, "planned_usd": None,
                              "budget_usd": 20000.0, "daily_cap_usd": None}  # fmt: skip
    assert report["ad"]["ad-1"]["ctr"] == 0 and report["ad"]["ad-1"]["clicks"] == 0
    assert report["campaign"]["cmp-1"]["billable_usd_cpm"] == 0.015
    assert main(["report", "--db", str(db)]) == 0
    table = capsys.readouterr().out
    assert "pacing" in table and "conversion_value_usd" in table and "49.900000" in table


def test_report_help_defines_its_words(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    words = ("impressions", "viewable_impressions", "clicks", "ctr", "invalid_", "pacing",
             "conversion_value_usd")  # fmt: skip
    for word in words:
        assert f"  {word}" in out, word
    words = " ".join(out.split())
    assert "can exceed impressions" in words and "not_viewable:" in words


def test_every_row_of_a_scope_lists_every_counter_of_that_scope(tmp_path, capsys):
    # A campaign or key that only ever moved one counter still lists the others as 0, so a
    # JSON reader can index any counter of a row without a KeyError.
    db = tmp_path / "edge.db"
    store = SQLiteStore(db)
    store.open_blocking()
    asyncio.run(store.add_counts([
        ("campaign", "cmp-x", "billable_usd", 1.0),
        ("key", "key_a", "requests", 3),
        ("key", "key_b", "empties", 1),
        ("publisher", "pub-a", "requests", 1),
        ("publisher", "pub-b", "clicks", 1),
        ("ad", "ad-a", "hovers", 1),
        # Counters named by what happened (invalid_<reason>) exist only where it happened:
        # the other rows of the scope list them as 0 too.
        ("campaign", "cmp-y", "invalid_bot_user_agent", 1),
        ("ad", "ad-b", "invalid_clicks_duplicate", 2),
        ("publisher", "pub-b", "invalid_not_viewable", 1),
        ("key", "key_b", "some_later_counter", 4),
    ]))  # fmt: skip
    store.close_blocking()
    assert main(["report", "--json", "--db", str(db)]) == 0
    report = orjson.loads(capsys.readouterr().out)
    camp = report["campaign"]["cmp-x"]
    assert (camp["matches"], camp["impressions"], camp["viewable_impressions"]) == (0, 0, 0)
    assert camp["billable_usd"] == 1.0 and camp["ctr"] is None and camp["pacing"] is None
    assert report["key"]["key_a"] == {
        "requests": 3, "matches": 0, "empties": 0, "no_matches": 0, "impressions": 0,
        "viewable_impressions": 0, "billable_usd": 0, "clicks": 0, "conversions": 0,
        "conversion_value_usd": 0,
        "billable_usd_cpm": 0, "billable_usd_cpc": 0, "billable_usd_cpa": 0,
        **dict.fromkeys(KEY_ROW_INVALID, 0), "some_later_counter": 0, "ctr": None,
    }  # fmt: skip
    assert report["key"]["key_b"]["empties"] == 1 and report["key"]["key_b"]["requests"] == 0
    assert report["publisher"]["pub-a"]["clicks"] == 0
    assert (
        camp["invalid_bot_user_agent"] == 0
        and report["ad"]["ad-a"]["invalid_clicks_duplicate"] == 0
    )
    assert report["publisher"]["pub-a"]["invalid_not_viewable"] == 0
    assert report["key"]["key_a"]["some_later_counter"] == 0
    for scope, rows in report.items():
        fields = [set(row) for row in rows.values()]
        assert all(f == fields[0] for f in fields), scope


def test_every_invalid_reason_is_listed_before_it_happens_and_the_table_skips_zeros(
    tmp_path, capsys
):
    # A reader of --json indexes invalid_not_viewable on a day nothing was not viewable; the
    # table shows only the invalid counters that moved.
    from edge.ivt import INVALID_COUNTERS

    db = tmp_path / "edge.db"
    store = SQLiteStore(db)
    store.open_blocking()
    asyncio.run(store.add_counts([
        ("ad", "ad-a", "impressions", 2),
        ("ad", "ad-b", "invalid_bot_user_agent", 1),
        ("publisher", "pub-a", "impressions", 2),
        ("campaign", "cmp-a", "impressions", 2),
    ]))  # fmt: skip
    store.close_blocking()
    assert main(["report", "--json", "--db", str(db)]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert "invalid_not_viewable" in INVALID_COUNTERS
    assert "invalid_clicks_duplicate" in INVALID_COUNTERS
    for scope, row in (("ad", "ad-a"), ("publisher", "pub-a"), ("campaign", "cmp-a")):
        # The earlier API's impressions, the only ones ever not served, have no publisher;
        # nor have a revoked partner's events (UGC pixel, AI beacons).
        names = INVALID_COUNTERS if scope != "publisher" else PUBLISHER_ROW_INVALID
        assert {c: report[scope][row][c] for c in names} == dict.fromkeys(names, 0), scope
    for absent in ("invalid_not_served", *KEY_REVOKED):
        assert absent not in report["publisher"]["pub-a"]
    assert main(["report", "--db", str(db)]) == 0
    table = capsys.readouterr().out
    assert "invalid_bot_user_agent" in table and "invalid_not_viewable" not in table


def test_json_with_another_format_is_refused(tmp_path, capsys):
    import pytest

    db = tmp_path / "edge.db"
    _fill(db)
    for argv in (["--json", "--format", "csv"], ["--by", "day", "--json", "--format", "table"]):
        with pytest.raises(SystemExit) as exit_:
            main(["report", *argv, "--db", str(db)])
        assert exit_.value.code == 2
        out = capsys.readouterr()
        assert out.out == ""
        assert "edge report: error: argument --format:" in out.err
        assert "conflicts with --json" in out.err
    assert main(["report", "--json", "--format", "json", "--db", str(db)]) == 0  # they agree
    orjson.loads(capsys.readouterr().out)


def test_pacing_reads_the_catalogue_loaded_into_the_database(tmp_path, capsys):
    # `edge catalogue load` makes a file the live catalogue of every edge on the database;
    # the report's pacing reads that one too, not the bundled catalogue.
    from tests.test_live_catalogue import bundled, with_new_campaign

    db = tmp_path / "edge.db"
    doc = with_new_campaign(bundled())
    doc["campaigns"][-1]["budget_usd"] = 50.0
    path = tmp_path / "live.json"
    path.write_bytes(orjson.dumps(doc))
    assert main(["catalogue", "load", str(path), "--db", str(db)]) == 0
    store = SQLiteStore(db)
    store.open_blocking()
    asyncio.run(store.add_counts([("campaign", "cmp-hot-reload", "billable_usd", 2.0)]))
    store.close_blocking()
    capsys.readouterr()
    assert main(["report", "--json", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "bundled" not in err
    camp = orjson.loads(out)["campaign"]["cmp-hot-reload"]
    assert camp["pacing"]["spent_usd"] == 2.0 and camp["pacing"]["budget_usd"] == 50.0


@pytest.mark.parametrize("by", [[], ["--by", "day"]], ids=["totals", "by-day"])
@pytest.mark.parametrize("how", ["flag", "variable"])
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no such file"),
        (b'{"campaigns": [{"id": "c"}]}', "3 error(s), the first: "),
    ],
    ids=["missing", "invalid"],
)
def test_a_catalogue_setting_that_cannot_be_used_is_exit_2(
    tmp_path, capsys, monkeypatch, by, how, content, reason
):
    # As `edge serve` refuses it: one line naming the setting, not a report without pacing.
    # The day buckets read no catalogue, but the rule is the same for every report.
    db = tmp_path / "edge.db"
    _fill(db)
    path = tmp_path / "ads.json"
    if content is not None:
        path.write_bytes(content)
    argv = ["report", "--json", "--db", str(db), *by]
    if how == "flag":
        argv += ["--catalogue", str(path)]
    else:
        monkeypatch.setenv("EDGE_CATALOGUE", str(path))
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert line.startswith(f"edge: EDGE_CATALOGUE (--catalogue): {path}: {reason}"), line


def test_key_rows_carry_what_the_partners_serves_earned(tmp_path, capsys):
    # A partner's pixel impression (CPM $5), a CPC click and a CPA conversion of it count
    # for its key's row (its rotation family), beside its request counters.
    db = tmp_path / "edge.db"
    store = SQLiteStore(db)
    store.open_blocking()

    async def work():
        await store.add_counts([("key", "key_p", "requests", 2), ("key", "key_p", "matches", 1)])
        await ledger.record_impression(store, Impression(
            kind="ugc", dedupe_keys=("tok:p",), env="production", ad_id="ad-1",
            campaign_id="cmp-1", at=1.0, cpm_usd=5.0, key_family="key_p",
        ))  # fmt: skip
        click = Click(click_id="clk-p", impression_key="tok:p", kind="ugc", env="production",
                      ad_id="ad-1", campaign_id="cmp-1", at=2.0, charge_usd=1.25,
                      key_family="key_p")  # fmt: skip
        await ledger.record_click(store, click)
        (stored,) = await store.clicks_by_id("clk-p", "production", 1)
        await ledger.record_conversion(store, Conversion(stored, 3.0, charge_usd=18.0))

    asyncio.run(work())
    store.close_blocking()
    assert main(["report", "--json", "--db", str(db)]) == 0
    row = orjson.loads(capsys.readouterr().out)["key"]["key_p"]
    assert {c: v for c, v in row.items() if v} == {
        "requests": 2, "matches": 1, "impressions": 1, "viewable_impressions": 1,
        "clicks": 1, "conversions": 1, "billable_usd": 19.255, "billable_usd_cpm": 0.005,
        "billable_usd_cpc": 1.25, "billable_usd_cpa": 18.0, "ctr": 1.0,
    }  # fmt: skip
    assert main(["report", "--db", str(db)]) == 0
    table = capsys.readouterr().out.split("API keys (1)\n", 1)[1].splitlines()
    header, line = table[0].split(), table[1].split()
    assert header[:2] == ["key", "requests"] and line[0] == "key_p"
    cells = dict(zip(header[1:], line[1:], strict=True))
    assert (cells["impressions"], cells["clicks"], cells["conversions"]) == ("1", "1", "1")
    assert cells["billable_usd"] == "19.255000" and cells["billable_usd_cpa"] == "18.000000"
