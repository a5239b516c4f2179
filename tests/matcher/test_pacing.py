"""Budget pacing with an injectable clock: even spreads a flight, asap and daily caps stop."""

from __future__ import annotations

import json

import pytest

from matcher.catalogue import parse_catalogue, parse_timestamp
from matcher.pacing import DAY_SECONDS, Pacer, Spend

START = "2026-10-01T00:00:00Z"
END = "2026-10-31T00:00:00Z"  # a 30-day flight


def campaign(**extra):
    doc = {
        "campaigns": [
            {
                "id": "c-1",
                "advertiser_name": "Acme",
                "status": "active",
                "start_at": START,
                "end_at": END,
                **extra,
                "ad_sets": [
                    {
                        "id": "as-1",
                        "products": ["ugc"],
                        "pricing_model": {"type": "cpm", "bid_amount": 100},
                        "ads": [
                            {
                                "id": "ad-1",
                                "title": "T",
                                "cta": "Go",
                                "description": "D",
                                "click_through_url": "https://example.com/",
                                "ttl_seconds": 60,
                            }
                        ],
                    }
                ],
            }
        ]
    }
    return parse_catalogue(json.dumps(doc)).campaigns[0]


def simulate(c, *, days=30, per_slot=10, slot=600.0, cost=0.1):
    """Requests every ``slot`` seconds, ``per_slot`` at a time; each served one bills ``cost``.

    Spend is seen at once (the edge's ledger is updated on every billing commit). Returns
    the USD spent in each UTC day of the flight.
    """
    pacer = Pacer([c])
    now = parse_timestamp(START)
    total, today, day = 0.0, 0.0, 0
    per_day = [0.0] * days
    while now < parse_timestamp(START) + days * DAY_SECONDS:
        d = int((now - parse_timestamp(START)) // DAY_SECONDS)
        if d != day:
            day, today = d, 0.0
        for _ in range(per_slot):
            if pacer.gate(c, Spend({c.id: total}, {c.id: today}), now) is None:
                total += cost
                today += cost
                per_day[d] += cost
        now += slot
    return per_day


def test_even_pacing_spreads_a_30_day_flight():
    # Demand could spend $4,320 in the flight; the budget is $3,000, so $100 a day.
    per_day = simulate(campaign(budget_usd=3000))
    assert sum(per_day) == pytest.approx(3000, abs=0.1 + 1e-6)
    for d, spent in enumerate(per_day):
        assert 90 <= spent <= 110, (d, spent)  # within 10% of the line every day


def test_asap_spends_as_fast_as_demand_allows_then_stops_at_the_budget():
    per_day = simulate(campaign(budget_usd=3000, pacing="asap"))
    assert per_day[0] == pytest.approx(144)  # every request of the first day served
    assert sum(per_day) <= 3000 + 0.1 + 1e-6  # at most the one impression that crossed it
    assert sum(per_day) >= 3000 - 1e-6
    assert per_day[-1] == 0 and per_day[-9] == 0  # budget gone after ~21 days


def test_a_daily_cap_stops_the_campaign_at_its_cap_and_it_resumes_the_next_day():
    per_day = simulate(campaign(daily_cap_usd=50, pacing="asap"), days=3)
    assert per_day == pytest.approx([50, 50, 50], abs=0.1)
    assert all(spent <= 50 + 1e-6 for spent in per_day)


def test_even_pacing_with_a_daily_cap_spreads_the_day():
    c = campaign(daily_cap_usd=48)
    pacer = Pacer([c])
    midnight = parse_timestamp(START)
    # Half past noon with $26 spent today: past the line 1 hour ahead (13.5 h = $27)? No.
    assert pacer.gate(c, Spend({}, {"c-1": 26}), midnight + 12.5 * 3600) is None
    assert pacer.gate(c, Spend({}, {"c-1": 27}), midnight + 12.5 * 3600) == "pacing_ahead"
    assert pacer.gate(c, Spend({}, {"c-1": 48}), midnight + 23.9 * 3600) == "daily_cap_reached"


def test_the_last_hour_of_a_day_reads_todays_line_not_tomorrows():
    """From 23:00 UTC the line one hour ahead is past midnight, where it reads today's whole
    cap (it never looks into tomorrow): a campaign under its cap is still served."""
    c = campaign(daily_cap_usd=48)
    pacer = Pacer([c])
    late = parse_timestamp(START) + 23.5 * 3600
    assert pacer.planned_today(c, late + 3600) == pytest.approx(1.0)  # tomorrow's line
    assert pacer.gate(c, Spend({}, {}), late) is None
    assert pacer.gate(c, Spend({}, {"c-1": 47}), late) is None
    assert pacer.gate(c, Spend({}, {"c-1": 48}), late) == "daily_cap_reached"


def test_gates_name_what_stopped_the_campaign():
    c = campaign(budget_usd=100, daily_cap_usd=10)
    pacer = Pacer([c])
    mid_flight = parse_timestamp(START) + 15 * DAY_SECONDS
    assert pacer.gate(c, Spend({"c-1": 100}, {}), mid_flight) == "budget_exhausted"
    assert pacer.gate(c, Spend({"c-1": 20}, {"c-1": 10}), mid_flight) == "daily_cap_reached"
    assert pacer.gate(c, Spend({"c-1": 60}, {}), mid_flight) == "pacing_ahead"
    assert pacer.gate(c, Spend({"c-1": 40}, {}), mid_flight) is None
    assert pacer.planned(c, mid_flight) == pytest.approx(50)


def test_no_flight_end_means_no_flight_line():
    c = campaign(budget_usd=100, end_at=None)
    pacer = Pacer([c])
    assert pacer.planned(c, parse_timestamp(START) + 60) is None
    assert pacer.gate(c, Spend({"c-1": 99}, {}), parse_timestamp(START) + 60) is None


def test_a_budget_or_cap_billed_to_its_last_cents_stops_the_campaign():
    # Each event bills at most what is left, so spend lands on the budget itself, give or
    # take the float dust of summed charges: that is nothing left, not a sliver to serve.
    from matcher.pacing import hard_stop, headroom

    c = campaign(budget_usd=7.0, daily_cap_usd=5.0)
    dust = Spend(total={"c-1": 0.1 + 0.2 + 6.7 - 1e-9}, today={})
    assert hard_stop(c, dust) == "budget_exhausted"
    assert hard_stop(c, Spend(total={"c-1": 4.0}, today={"c-1": 5.0 - 1e-9})) == (
        "daily_cap_reached"
    )
    assert hard_stop(c, Spend(total={"c-1": 4.0}, today={"c-1": 4.5})) is None
    assert headroom(c, Spend(total={"c-1": 4.0}, today={"c-1": 4.5})) == pytest.approx(0.5)
    assert headroom(campaign(), Spend()) is None
