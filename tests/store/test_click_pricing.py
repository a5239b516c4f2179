"""Migration 0390: a click keeps the pricing model and bid its ad was served under, so its
conversion bills under them whatever the live catalogue says later. Rows from before have
none (their conversions are priced from the live catalogue, as they were). Both backends."""

from __future__ import annotations

from edge import ledger
from edge.store import Click
from matcher.types import PricingModel
from tests.store.conftest import opened_after

_OLD_CLICK = (
    "INSERT INTO clicks (click_id, impression_key, kind, env, ad_id, campaign_id,"
    " publisher_id, slot_id, invalid_reason, at) VALUES"
    " ('clk-old', 'tok:old', 'url', 'production', 'ad-1', 'cmp-1', 'pub-1', 's1', NULL, 5.0)"
)


def _click(click_id: str, pricing: PricingModel | None, **kw: object) -> Click:
    fields: dict = dict(
        click_id=click_id, impression_key=f"tok:{click_id}", kind="url", env="production",
        ad_id="ad-1", campaign_id="cmp-1", at=10.0, publisher_id="pub-1", slot_id="s1",
        pricing=pricing,
    )  # fmt: skip
    return Click(**{**fields, **kw})


def test_a_click_is_stored_with_the_pricing_it_was_judged_under(store, run):
    served = {
        "clk-cpa": PricingModel("cpa", 18.0),
        "clk-cpc": PricingModel("cpc", 1.4),
        "clk-none": None,  # an ad unknown to the edge that judged it
    }
    for click_id, pricing in served.items():
        assert run(ledger.record_click(store, _click(click_id, pricing))) is True
    for click_id, pricing in served.items():
        (found,) = run(store.clicks_by_id(click_id, "production", 2))
        assert found.pricing == pricing
    # An invalid click keeps it too (it was judged under it), still never billed.
    invalid = _click("clk-dup", PricingModel("cpa", 2.5), invalid_reason="duplicate")
    assert run(ledger.record_click(store, invalid)) is True
    (found,) = run(store.clicks_by_id("clk-dup", "production", 2))
    assert (found.pricing, found.invalid_reason) == (PricingModel("cpa", 2.5), "duplicate")


def test_clicks_stored_before_have_no_pricing(db_target, run, monkeypatch):
    new = opened_after(monkeypatch, run, db_target, "0390", _OLD_CLICK)
    try:
        (found,) = run(new.clicks_by_id("clk-old", "production", 2))
        assert (found.row, found.ad_id, found.pricing) == (1, "ad-1", None)
        assert run(ledger.record_click(new, _click("clk-new", PricingModel("cpc", 1.4))))
        (found,) = run(new.clicks_by_id("clk-new", "production", 2))
        assert found.pricing == PricingModel("cpc", 1.4)
    finally:
        run(new.close())


def test_the_pricing_of_an_impressions_valid_click(store, run):
    # What an AI view asks before it bills as CPM: the pricing its valid click was judged
    # under (an invalid click is not the view's price; no click: None).
    run(ledger.record_click(store, _click("clk-a", PricingModel("cpc", 1.4))))
    run(
        ledger.record_click(
            store, _click("clk-b", PricingModel("cpa", 3.0), invalid_reason="duplicate")
        )
    )
    assert run(store.valid_click_pricing("tok:clk-a")) == "cpc"
    assert run(store.valid_click_pricing("tok:clk-b")) is None
    assert run(store.valid_click_pricing("tok:none")) is None
