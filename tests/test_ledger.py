"""The edge's rules for clicks and conversions (``edge.ledger``): what bills and which
counters move, decided without a store."""

import pytest

from edge import ledger
from edge.counters import with_days
from edge.store import Click, Conversion, Impression
from edge.store.events import StoredClick
from matcher.types import PricingModel

CPC = PricingModel("cpc", 1.25)
CPA = PricingModel("cpa", 4.0)
CPM = PricingModel("cpm", 2.0)


def click(**kw) -> Click:
    base = dict(click_id="c1", impression_key="tok:a", kind="url", env="production",
                ad_id="ad-1", campaign_id="cmp-1", at=1.0, publisher_id="pub-1")  # fmt: skip
    return Click(**{**base, **kw})


def test_only_a_valid_production_cpc_click_within_budget_bills_its_bid():
    assert ledger.click_charge(click(), CPC, headroom=None) == 1.25
    assert ledger.click_charge(click(), CPC, headroom=100.0) == 1.25
    assert ledger.click_charge(click(invalid_reason="duplicate"), CPC, None) is None
    assert ledger.click_charge(click(env="sandbox"), CPC, None) is None
    assert ledger.click_charge(click(), CPM, None) is None
    assert ledger.click_charge(click(), CPA, None) is None
    assert ledger.click_charge(click(), None, None) is None  # not in the live catalogue
    assert ledger.click_charge(click(), CPC, headroom=0.0) is None


def test_only_a_cpa_conversion_within_budget_bills_its_bid():
    assert ledger.conversion_charge(CPA, headroom=None) == 4.0
    assert ledger.conversion_charge(CPA, headroom=0.0) is None
    assert ledger.conversion_charge(CPC, headroom=None) is None
    assert ledger.conversion_charge(None, headroom=None) is None


def test_the_last_event_before_a_budget_bills_only_what_is_left():
    # A budget is a hard stop on what is billed: an event priced over what is left bills
    # the rest, and one after it nothing (float dust of summed charges is nothing).
    assert ledger.clamp(3.0, headroom=1.0) == 1.0
    assert ledger.clamp(3.0, headroom=-0.5) is None
    assert ledger.clamp(3.0, headroom=1e-9) is None
    assert ledger.conversion_charge(CPA, headroom=2.5) == 2.5
    assert ledger.click_charge(click(), CPC, headroom=0.25) == 0.25
    assert ledger.cpm_within(4.0, headroom=0.001) == pytest.approx(1.0)  # $0.001 each
    assert ledger.cpm_within(4.0, headroom=None) == 4.0


def test_a_valid_click_counts_as_a_click_and_its_charge_by_pricing_model():
    rows = ledger.click_counts(click(charge_usd=1.25))
    assert ("ad", "ad-1", "clicks", 1) in rows
    assert ("campaign", "cmp-1", "clicks", 1) in rows
    assert ("publisher", "pub-1", "clicks", 1) in rows
    assert ("campaign", "cmp-1", "billable_usd", 1.25) in rows
    assert ("ad", "ad-1", "billable_usd_cpc", 1.25) in rows
    assert len(rows) == 9


def test_an_invalid_click_counts_only_under_its_reason():
    rows = ledger.click_counts(click(invalid_reason="bot_user_agent", publisher_id=None))
    assert rows == [
        ("ad", "ad-1", "invalid_clicks_bot_user_agent", 1),
        ("campaign", "cmp-1", "invalid_clicks_bot_user_agent", 1),
    ]


@pytest.mark.parametrize("charge", [None, 4.0])
def test_a_conversion_counts_for_its_ad_and_campaign(charge):
    stored = StoredClick(7, "c1", "tok:a", "url", "production", "ad-1", "cmp-1", "pub-1",
                         None, 1.0)  # fmt: skip
    rows = ledger.conversion_counts(Conversion(stored, at=2.0, charge_usd=charge))
    assert rows[:2] == [("ad", "ad-1", "conversions", 1), ("campaign", "cmp-1", "conversions", 1)]
    billed = [r for r in rows if r[2] == "billable_usd_cpa"]
    assert billed == ([] if charge is None else [(s, i, "billable_usd_cpa", 4.0) for s, i in
                      (("ad", "ad-1"), ("campaign", "cmp-1"), ("publisher", "pub-1"))])  # fmt: skip


def _imp(**kw) -> Impression:
    base = dict(kind="url", dedupe_keys=("tok:a",), env="production", ad_id="ad-1",
                campaign_id="cmp-1", at=86_400.0 * 20_000 + 5, publisher_id="pub-1",
                cpm_usd=2.0)  # fmt: skip
    return Impression(**{**base, **kw})


@pytest.mark.parametrize(
    "kw",
    [{}, {"kind": "ugc"}, {"kind": "ai-render"}, {"kind": "ai-view"}, {"publisher_id": None},
     {"campaign_id": None}, {"cpm_usd": None}, {"env": "sandbox"}, {"ad_id": "ad-2"},
     {"invalid_reason": "rate_limited"}, {"invalid_reason": "bot_user_agent"}],
)  # fmt: skip
def test_remembered_impression_counts_are_the_rules_own_across_days(kw):
    # The bumps are remembered per inputs; every impression still gets exactly what the
    # rules give it, its own day's buckets included, whatever was remembered before.
    for at in (86_400.0 * 20_000 + 5, 86_400.0 * 20_000 + 86_399, 86_400.0 * 20_001 + 1):
        for _ in range(2):
            imp = _imp(**kw, at=at)
            billed = ledger.billing_usd(imp)
            expected = with_days(ledger.impression_counts(imp, billed), at)
            assert list(ledger.impression_counts_of_day(imp, billed)) == expected


def test_remembered_impression_counts_stay_bounded():
    for n in range(ledger._COUNTS_CACHE_SIZE + 10):
        ledger.impression_counts_of_day(_imp(ad_id=f"ad-{n}"), 0.002)
    assert len(ledger._counts_cache) <= ledger._COUNTS_CACHE_SIZE
