"""The event store on both backends: billing-grade impressions, replays, billing, counters,
publishers; with the edge's rules (``edge.ledger``) deciding what bills and counts."""

import asyncio

import pytest

from edge import ledger
from edge.settings import Settings
from edge.store import (
    Hover,
    Impression,
    PlacementFailure,
    PostgresStore,
    StoredImpression,
    open_store,
)
from tests.store.conftest import sql


def imp(keys=("tok:a",), **kw) -> Impression:
    base = dict(
        kind="url", env="production", ad_id="ad-1", campaign_id="cmp-1", at=10.0,
        publisher_id="pub-1",
    )  # fmt: skip
    return Impression(dedupe_keys=tuple(keys), **{**base, **kw})


@pytest.fixture
def counts(run):
    def read(store) -> dict:
        return {(s, i, c): a for s, i, c, a in run(store.counts())}

    return read


def test_impression_counts_once_per_any_shared_key(store, run, counts):
    assert run(ledger.record_impression(store, imp(("tok:a", "iid:1")))) is True
    assert run(ledger.record_impression(store, imp(("tok:a", "iid:2")))) is False  # same token
    assert (
        run(ledger.record_impression(store, imp(("tok:b", "iid:1")))) is False
    )  # same impression id
    # The replay taught the store iid:2, so a third beacon sharing only that is a replay too.
    assert run(ledger.record_impression(store, imp(("tok:c", "iid:2")))) is False
    assert run(ledger.record_impression(store, imp(("tok:d", "iid:3")))) is True
    assert run(store.impression_count()) == 2
    assert counts(store)[("ad", "ad-1", "impressions")] == 2
    assert counts(store)[("publisher", "pub-1", "viewable_impressions")] == 2


def test_concurrent_replays_of_one_token_count_once(store, run, counts):
    async def burst():
        return await asyncio.gather(
            *(ledger.record_impression(store, imp(("tok:z",))) for _ in range(50))
        )

    assert sum(run(burst())) == 1
    assert run(store.impression_count("url")) == 1


def test_production_cpm_impression_is_billed_and_feeds_spend(store, run, counts):
    run(ledger.record_impression(store, imp(("a",), cpm_usd=4.0)))
    run(ledger.record_impression(store, imp(("b",), cpm_usd=4.0)))
    run(ledger.record_impression(store, imp(("c",), cpm_usd=2.0, campaign_id="cmp-2")))
    assert run(store.spend_by_campaign()) == pytest.approx({"cmp-1": 0.008, "cmp-2": 0.002})
    assert counts(store)[("ad", "ad-1", "billable_usd")] == pytest.approx(0.010)


@pytest.mark.parametrize(
    "kw", [{"env": "sandbox", "cpm_usd": 4.0}, {"cpm_usd": None}, {"cpm_usd": 0.0}]
)
def test_no_billing_for_sandbox_or_non_cpm(store, kw, run, counts, db_target):
    assert run(ledger.record_impression(store, imp(**kw))) is True
    assert run(store.spend_by_campaign()) == {}
    assert sql(db_target, "SELECT count(*) FROM billing_events") == [(0,)]


def test_replay_is_not_billed_twice(store, run, counts):
    run(ledger.record_impression(store, imp(("a",), cpm_usd=4.0)))
    run(ledger.record_impression(store, imp(("a",), cpm_usd=4.0)))
    assert run(store.spend_by_campaign()) == pytest.approx({"cmp-1": 0.004})


def test_ai_render_and_view_feed_different_counters(store, run, counts):
    run(ledger.record_impression(store, imp(("r",), kind="ai-render", publisher_id=None)))
    run(ledger.record_impression(store, imp(("v",), kind="ai-view", publisher_id=None)))
    c = counts(store)
    assert c[("ad", "ad-1", "impressions")] == 1
    assert c[("ad", "ad-1", "viewable_impressions")] == 1


def test_impression_needs_a_dedupe_key(store, run, counts):
    with pytest.raises(ValueError):
        run(ledger.record_impression(store, imp(())))


def test_hover_once_per_token_and_failures_counted(store, run, counts):
    h = Hover(token_id="t1", ad_id="ad-1", at=1.0, hover_ms=700, publisher_id="pub-1")
    assert run(ledger.record_hover(store, h)) is True
    assert run(ledger.record_hover(store, h)) is False
    f = PlacementFailure(publisher_id="pub-1", slot_id="side", reason="timeout", at=2.0)
    run(ledger.record_failure(store, f))
    run(ledger.record_failure(store, f))
    c = counts(store)
    assert c[("ad", "ad-1", "hovers")] == 1
    assert c[("publisher", "pub-1", "failures")] == 2


def test_add_counts_adds_and_never_resets(store, run, counts):
    run(store.add_counts([("ad", "ad-1", "matches", 2), ("publisher", "p", "requests", 1)]))
    run(store.add_counts([("ad", "ad-1", "matches", 3)]))
    run(store.add_counts([]))
    assert counts(store)[("ad", "ad-1", "matches")] == 5
    assert run(store.counts(["publisher"])) == [("publisher", "p", "requests", 1.0)]


def test_counts_survive_reopen(db_target, run):
    s = open_store(Settings(db=db_target))
    run(s.open())
    run(ledger.record_impression(s, imp(cpm_usd=1.0)))
    run(s.close())
    run(s.open())
    assert run(s.impression_count()) == 1
    assert run(s.spend_by_campaign()) == pytest.approx({"cmp-1": 0.001})
    run(s.close())


def test_publishers_upsert_merges_normalised_origins(store, run, counts):
    run(store.upsert_publisher("pub-1", ["https://News.Example:443/"], 1.0))
    run(store.upsert_publisher("pub-1", ["http://localhost:8080", "https://news.example"], 2.0))
    run(store.upsert_publisher("pub-0", [], 3.0))
    pubs = run(store.list_publishers())
    assert [p.publisher_id for p in pubs] == ["pub-0", "pub-1"]
    assert pubs[1].origins == ("https://news.example", "http://localhost:8080")
    assert (pubs[1].created_at, pubs[1].updated_at) == (1.0, 2.0)
    assert run(store.remove_publisher("pub-0")) is True
    assert run(store.remove_publisher("pub-0")) is False


@pytest.mark.parametrize("bad_id", ["", "has space", "x" * 65, "-lead"])
def test_publisher_id_is_checked(store, bad_id, run):
    with pytest.raises(ValueError):
        run(store.upsert_publisher(bad_id, [], 1.0))


def _failing_job(store):
    """A write job that queues a counter bump and then fails, in the backend's job form."""
    if isinstance(store, PostgresStore):

        async def pg_job(w):
            w.counts.extend([("ad", "ad-1", "impressions", 100)])
            raise ValueError("this job fails after queueing a bump")

        return pg_job

    from edge.store.events import _bump

    def sqlite_job(conn):
        _bump(conn, [("ad", "ad-1", "impressions", 100)])
        raise ValueError("this job fails after queueing a bump")

    return sqlite_job


def test_a_batch_applies_its_counter_bumps_summed_and_a_failed_job_drops_its_own(
    store, run, counts, db_target
):
    async def burst():
        return await asyncio.gather(
            *(ledger.record_impression(store, imp((f"tok:{i}",), cpm_usd=2.0)) for i in range(40)),
            store.write(_failing_job(store)),
            *(ledger.record_impression(store, imp((f"tok:x{i}",))) for i in range(10)),
            return_exceptions=True,
        )

    results = run(burst())
    assert results.count(True) == 50 and isinstance(results[40], ValueError)
    batches, _ = store.group_commit_stats
    assert batches < 51  # the burst shared commits, so bumps were summed across jobs
    c = counts(store)
    assert c[("ad", "ad-1", "impressions")] == 50  # not 150: the failed job's bump is gone
    assert c[("publisher", "pub-1", "viewable_impressions")] == 50
    assert c[("campaign", "cmp-1", "billable_usd")] == pytest.approx(0.080)
    assert sql(db_target, "SELECT count(*) FROM billing_events") == [(40,)]


def test_an_invalid_impression_is_stored_with_its_reason_and_never_billed(
    store, run, counts, db_target
):
    bot = imp(("tok:bot", "iid:bot"), cpm_usd=4.0, invalid_reason="bot_user_agent")
    assert run(ledger.record_impression(store, bot)) is True
    assert sql(db_target, "SELECT invalid_reason FROM impressions") == [("bot_user_agent",)]
    assert sql(db_target, "SELECT count(*) FROM billing_events") == [(0,)]
    c = counts(store)
    assert c[("ad", "ad-1", "invalid_bot_user_agent")] == 1
    assert c[("publisher", "pub-1", "invalid_bot_user_agent")] == 1
    assert c[("campaign", "cmp-1", "invalid_bot_user_agent")] == 1
    assert ("ad", "ad-1", "impressions") not in c and run(store.spend_by_campaign()) == {}
    # Its keys are spent: the same token fired again is a replay, valid or not.
    assert run(ledger.record_impression(store, imp(("tok:bot",), cpm_usd=4.0))) is False
    assert run(store.spend_by_campaign()) == {}


def test_spend_on_a_day_is_that_utc_days_billing(store, run):
    day = 86_400.0
    run(ledger.record_impression(store, imp(("a",), cpm_usd=4.0, at=day - 1)))
    run(ledger.record_impression(store, imp(("b",), cpm_usd=2.0, at=day)))
    run(ledger.record_impression(store, imp(("c",), cpm_usd=1.0, at=day + 5, campaign_id="cmp-2")))
    run(ledger.record_impression(store, imp(("d",), cpm_usd=8.0, at=day + 9,
                                            invalid_reason="bot_user_agent")))  # fmt: skip
    assert run(store.spend_by_campaign()) == pytest.approx({"cmp-1": 0.006, "cmp-2": 0.001})
    assert run(store.spend_on_day("1970-01-01")) == pytest.approx({"cmp-1": 0.004})
    assert run(store.spend_on_day("1970-01-02")) == pytest.approx({"cmp-1": 0.002, "cmp-2": 0.001})
    assert run(store.spend_on_day("1970-01-03")) == {}


def test_impressions_by_the_tags_impression_id(store, run):
    run(ledger.record_impression(store, imp(("tok:1", "iid:a"), slot_id="s1")))
    run(ledger.record_impression(store, imp(("tok:2", "iid:b"), invalid_reason="bot_user_agent")))
    found = run(store.impressions_by_tag_id(["a", "b", "missing"]))
    assert set(found) == {"a", "b"}
    assert found["a"]["slot_id"] == "s1" and found["a"]["invalid_reason"] is None
    assert found["b"]["invalid_reason"] == "bot_user_agent"
    assert run(store.impressions_by_tag_id([])) == {}


def test_the_impression_a_dedupe_key_points_to(store, run):
    # Every key of an impression, a replay's new ones included, names its post and ad.
    run(ledger.record_impression(store, imp(("k:1", "k:2"), post_id="p-1", ad_id="ad-7")))
    run(ledger.record_impression(store, imp(("k:2", "k:3"), post_id="p-2", ad_id="ad-8")))
    run(ledger.record_impression(store, imp(("k:4",))))
    run(ledger.record_impression(store, imp(("k:6",), invalid_reason="bot_user_agent")))
    for key in ("k:1", "k:2", "k:3"):
        assert run(store.stored_impression(key)) == StoredImpression("p-1", "ad-7", None)
    assert run(store.stored_impression("k:4")) == StoredImpression(None, "ad-1", None)
    assert run(store.stored_impression("k:5")) is None
    assert run(store.stored_impression("k:6")).invalid_reason == "bot_user_agent"


def test_clicks_and_conversions_once_each_with_their_charges(store, run, counts, db_target):
    from edge.store import Click, ClickConflict, Conversion

    click = Click(click_id="c1", impression_key="tok:a", kind="url", env="production",
                  ad_id="ad-1", campaign_id="cmp-1", at=5.0, publisher_id="pub-1",
                  charge_usd=0.5)  # fmt: skip
    assert run(ledger.record_click(store, click)) is True
    assert run(ledger.record_click(store, click)) is False  # a replay of its click id
    with pytest.raises(ClickConflict):  # a second valid click of the same impression
        run(ledger.record_click(store, Click(**{**_fields(click), "click_id": "c2"})))
    (stored,) = run(store.clicks_by_id("c1", "production", 5))
    assert stored.impression_key == "tok:a"
    assert run(store.valid_click_stored("tok:a")) and not run(store.valid_click_stored("tok:b"))
    assert run(store.click_stored("c1", "tok:a"))  # a replay is known before it is judged
    assert not run(store.click_stored("c1", "tok:b")) and not run(store.click_stored("c2", "tok:a"))
    conversion = Conversion(click=stored, at=9.0, value_usd=20.0, charge_usd=2.0)
    assert run(ledger.record_conversion(store, conversion)) is True
    assert run(ledger.record_conversion(store, conversion)) is False
    c = counts(store)
    assert c[("ad", "ad-1", "clicks")] == 1 and c[("ad", "ad-1", "conversions")] == 1
    assert c[("campaign", "cmp-1", "billable_usd_cpc")] == pytest.approx(0.5)
    assert c[("campaign", "cmp-1", "billable_usd_cpa")] == pytest.approx(2.0)
    assert run(store.spend_on_day("1970-01-01")) == pytest.approx({"cmp-1": 2.5})
    assert run(store.click_count()) == 1 and run(store.click_count(valid=False)) == 0
    assert sql(db_target, "SELECT count(*) FROM charges") == [(2,)]


def test_a_click_id_is_unique_within_its_impression_only(store, run, counts, db_target):
    """The same click id on two impressions is two clicks (each stored, with its own
    bumps); with the same impression it is a replay. Lookup by id finds every impression's
    click of that id in its environment, valid ones first, at most ``limit``."""
    from edge.store import Click

    squat = Click(click_id="shared-1", impression_key="ai:1:m-1", kind="ai", env="production",
                  ad_id="ad-1", campaign_id="cmp-1", at=5.0,
                  invalid_reason="duplicate")  # fmt: skip
    genuine = Click(**{**_fields(squat), "impression_key": "ai:2:m-9", "ad_id": "ad-2",
                       "invalid_reason": None, "at": 6.0})  # fmt: skip
    assert run(store.save_click(squat, [("ad", "ad-1", "invalid_clicks_duplicate", 1)])) is True
    assert run(store.save_click(genuine, [("ad", "ad-2", "clicks", 1)])) is True
    assert run(store.save_click(genuine, [("ad", "ad-2", "clicks", 1)])) is False  # a replay
    assert counts(store) == {("ad", "ad-1", "invalid_clicks_duplicate"): 1,
                             ("ad", "ad-2", "clicks"): 1}  # fmt: skip
    found = run(store.clicks_by_id("shared-1", "production", 5))
    assert [(c.impression_key, c.invalid_reason) for c in found] == [
        ("ai:2:m-9", None), ("ai:1:m-1", "duplicate")]  # fmt: skip
    assert [c.impression_key for c in run(store.clicks_by_id("shared-1", "production", 1))] == [
        "ai:2:m-9"
    ]
    assert run(store.clicks_by_id("shared-1", "sandbox", 5)) == []
    assert run(store.clicks_by_id("missing-1", "production", 5)) == []
    assert sql(db_target, "SELECT count(*) FROM clicks WHERE click_id = 'shared-1'") == [(2,)]


def _fields(obj) -> dict:
    return {f: getattr(obj, f) for f in obj.__dataclass_fields__}


def test_a_backend_stores_the_click_decision_it_is_handed(store, run, counts, db_target):
    """The counters and charge of a click come from the edge: a backend handed an invalid
    click with a charge and made-up bumps stores exactly those, deciding nothing itself."""
    from edge.store import Click

    click = Click(click_id="c9", impression_key="tok:q", kind="ugc", env="production",
                  ad_id="ad-1", campaign_id="cmp-1", at=5.0, publisher_id="pub-1",
                  invalid_reason="bot_user_agent", charge_usd=0.25)  # fmt: skip
    assert run(store.save_click(click, [("ad", "ad-1", "handed", 3)])) is True
    assert run(store.save_click(click, [("ad", "ad-1", "handed", 5)])) is False  # a replay
    assert counts(store) == {("ad", "ad-1", "handed"): 3}
    assert sql(db_target, "SELECT pricing, amount_usd FROM charges") == [("cpc", 0.25)]
    assert run(store.click_count(valid=False)) == 1


def test_a_backend_stores_the_conversion_decision_it_is_handed(store, run, counts, db_target):
    from edge.store import Click, Conversion

    click = Click(click_id="c8", impression_key="tok:r", kind="url", env="production",
                  ad_id="ad-1", campaign_id="cmp-1", at=5.0)  # fmt: skip
    assert run(store.save_click(click, [])) is True
    (stored,) = run(store.clicks_by_id("c8", "production", 5))
    unbilled = Conversion(click=stored, at=6.0, value_usd=9.0)
    assert run(store.save_conversion(unbilled, [])) is True  # no bumps handed: none made
    assert run(store.save_conversion(unbilled, [("ad", "ad-1", "x", 1)])) is False
    assert counts(store) == {}
    assert sql(db_target, "SELECT count(*) FROM conversions") == [(1,)]
    assert sql(db_target, "SELECT count(*) FROM charges") == [(0,)]
