"""A partner's events count for its key's report row on both backends, in the commit of the
event: an impression, a click and the conversion of that click (migration 0391: a click
keeps its partner's key family, so its conversion counts for the same row). A click row
stored before has none: its conversion counts for no key, as it did."""

from __future__ import annotations

from edge import ledger
from edge.store import Click, Conversion, Impression
from matcher.types import PricingModel
from tests.store.conftest import opened_after
from tests.store.test_click_pricing import _OLD_CLICK

FAMILY = "key_0123456789ab"


def _click(click_id: str, **kw: object) -> Click:
    fields: dict = dict(
        click_id=click_id, impression_key=f"tok:{click_id}", kind="ugc", env="production",
        ad_id="ad-1", campaign_id="cmp-1", at=10.0, pricing=PricingModel("cpa", 18.0),
    )  # fmt: skip
    return Click(**{**fields, **kw})


def _key_row(run, store, family: str = FAMILY) -> dict[str, float]:
    return {c: a for s, i, c, a in run(store.counts()) if (s, i) == ("key", family)}


def test_an_impression_click_and_conversion_move_the_key_row(store, run):
    imp = Impression(
        kind="ugc", dedupe_keys=("tok:a",), env="production", ad_id="ad-1",
        campaign_id="cmp-1", at=10.0, cpm_usd=12.5, key_family=FAMILY,
    )  # fmt: skip
    assert run(ledger.record_impression(store, imp)) is True
    assert run(ledger.record_click(store, _click("clk-1", key_family=FAMILY, charge_usd=1.5)))
    (stored,) = run(store.clicks_by_id("clk-1", "production", 2))
    assert stored.key_family == FAMILY
    assert run(ledger.record_conversion(store, Conversion(stored, 20.0, charge_usd=18.0)))
    row = _key_row(run, store)
    assert row == {
        "impressions": 1, "viewable_impressions": 1, "clicks": 1, "conversions": 1,
        "billable_usd": 0.0125 + 1.5 + 18.0, "billable_usd_cpm": 0.0125,
        "billable_usd_cpc": 1.5, "billable_usd_cpa": 18.0,
    }  # fmt: skip
    # Kept per UTC day too (1970-01-01: the events' day).
    days = run(store.daily_counts("1970-01-01", "1970-01-01"))
    daily = {c: a for d, s, i, c, a in days if (s, i) == ("key", FAMILY)}
    assert daily == {
        "impressions": 1, "viewable_impressions": 1, "clicks": 1, "billable_usd": 19.5125,
    }  # fmt: skip


def test_an_invalid_click_counts_as_invalid_for_the_key(store, run):
    click = _click("clk-2", key_family=FAMILY, invalid_reason="click_before_impression")
    assert run(ledger.record_click(store, click))
    assert _key_row(run, store) == {"invalid_clicks_click_before_impression": 1}


def test_a_click_stored_before_clicks_kept_a_key_converts_for_no_key(db_target, run, monkeypatch):
    new = opened_after(monkeypatch, run, db_target, "0391", _OLD_CLICK)
    try:
        (found,) = run(new.clicks_by_id("clk-old", "production", 2))
        assert found.key_family is None
        assert run(ledger.record_conversion(new, Conversion(found, 20.0, charge_usd=3.0)))
        rows = run(new.counts())
        assert not [r for r in rows if r[0] == "key"]
        assert ("campaign", "cmp-1", "conversions", 1) in rows
    finally:
        run(new.close())
