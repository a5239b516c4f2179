"""The /reports page's parts: spend to date against the even line, rates with gaps where a
day has no denominator, and charts that draw only what the numbers say."""

from __future__ import annotations

import re

import pytest

from edge.reports.charts import Series, line_chart, nice_ceiling, percent, usd
from edge.reports.daily import DayRange
from edge.reports.page import CampaignDays, render, spent_to_date
from matcher.types import Campaign

NOW = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC
DAYS = DayRange.last(3, NOW)  # 2026-09-19 .. 2026-09-21


def campaign(**kw) -> Campaign:
    base = dict(
        id="cmp-1", advertiser_name="Acme", status="active", start_at="2026-09-01T00:00:00Z",
        end_at="2026-10-01T00:00:00Z", budget_usd=3000.0, ad_sets=(),
    )  # fmt: skip
    return Campaign(**{**base, **kw})


def test_spend_to_date_is_the_total_less_what_later_days_billed():
    entry = CampaignDays("cmp-1", "", {"2026-09-19": {"billable_usd": 2.0},
                                       "2026-09-21": {"billable_usd": 1.0}})  # fmt: skip
    assert spent_to_date(entry, DAYS.days, 10.0) == [9.0, 9.0, 10.0]
    # Spend from before the buckets existed stays in the total: never below zero.
    assert spent_to_date(entry, DAYS.days, 2.5) == [1.5, 1.5, 2.5]


def test_pacing_chart_puts_the_even_line_beside_spend():
    rows = [("2026-09-20", "campaign", "cmp-1", "billable_usd", 5.0),
            ("2026-09-20", "campaign", "cmp-1", "matches", 10.0)]  # fmt: skip
    html = render(DAYS, rows, [campaign()], {"cmp-1": 1500.0}, NOW, "production")
    figure = html.split('<figure data-campaign="cmp-1">')[1].split("</figure>")[0]
    # 3,000 USD over 30 days of September: 100 USD a day; at the end of 09-19, 19 days.
    assert "even line (plan), 2026-09-19: $1,900.00</title>" in figure
    assert "even line (plan), 2026-09-20: $2,000.00</title>" in figure
    # Today is not over: the plan is where the line is now (20 days and 14:13:20).
    assert "even line (plan), 2026-09-21: $2,059.259259</title>" in figure
    assert "spent, 2026-09-19: $1,495.00</title>" in figure
    assert "spent, 2026-09-21: $1,500.00</title>" in figure
    assert 'class="line plan"' in figure and "No even line" not in figure


def test_sub_cent_spend_is_shown_to_the_micro_dollar_it_is_kept_to():
    # Two CPM impressions at $1.99: $0.00398, not "$0.004"; a cent's fraction on top of
    # whole dollars is not dropped either.
    rows = [("2026-09-20", "campaign", "cmp-1", "billable_usd", 0.00398)]
    html = render(DAYS, rows, [campaign()], {"cmp-1": 1.00398}, NOW, "production")
    figure = html.split('<figure data-campaign="cmp-1">')[1].split("</figure>")[0]
    assert "spent, 2026-09-19: $1.00</title>" in figure
    assert "spent, 2026-09-20: $1.00398</title>" in figure
    assert '<td data-counter="billable_usd">0.00398</td>' in html
    assert (usd(0), usd(0.00398), usd(0.5), usd(1234.5)) == (
        "$0.00",
        "$0.00398",
        "$0.50",
        "$1,234.50",
    )
    assert usd(0.000001) == "$0.000001" and usd(2.0000004) == "$2.00"


def test_a_campaign_with_neither_spend_nor_plan_gets_no_chart():
    html = render(DAYS, [], [campaign(end_at=None)], {}, NOW, "production")
    assert "<figure" not in html and "Nothing counted for any campaign" in html


def test_a_campaign_not_delivering_at_all_is_charted_when_nothing_was_counted():
    # No bucket in these days for any campaign: the rates have nothing to show, but the
    # campaign's even line against nothing spent is what pacing is there to show.
    html = render(DAYS, [], [campaign()], {}, NOW, "production")
    assert "Nothing counted for any campaign" in html
    figure = html.split('<figure data-campaign="cmp-1">')[1].split("</figure>")[0]
    assert "even line (plan), 2026-09-20: $2,000.00</title>" in figure
    assert "spent, 2026-09-20: $0.00</title>" in figure


def test_a_campaign_gone_from_the_catalogue_says_so_instead_of_a_plan():
    rows = [("2026-09-20", "campaign", "cmp-gone", "billable_usd", 5.0)]
    html = render(DAYS, rows, [campaign()], {"cmp-gone": 5.0}, NOW, "production")
    figure = html.split('<figure data-campaign="cmp-gone">')[1].split("</figure>")[0]
    assert "not in the catalogue served now" in figure and "budget and a flight end" not in figure


def test_rates_leave_a_gap_where_a_day_has_no_denominator():
    rows = [("2026-09-19", "campaign", "c", "matches", 4.0),
            ("2026-09-19", "campaign", "c", "impressions", 2.0),
            ("2026-09-21", "campaign", "c", "matches", 2.0),
            ("2026-09-21", "campaign", "c", "impressions", 2.0)]  # fmt: skip
    html = render(DAYS, rows, [], {}, NOW, "sandbox")
    delivery = html.split('<section id="delivery">')[1].split("</section>")[0]
    assert "c, 2026-09-19: 50%</title>" in delivery and "c, 2026-09-21: 100%</title>" in delivery
    assert "2026-09-20" not in delivery  # no point, and the line is broken there
    assert "<polyline" not in delivery  # two lone points: no segment joins them


def test_line_chart_scales_to_a_round_top_and_escapes_labels():
    svg = line_chart(
        "t", ["2026-09-19", "2026-09-20"], [Series("<x>", "series-0", [0.5, 1.5])],
        y_max=1.5, y_label=percent,
    )  # fmt: skip
    assert ">200%</text>" in svg and ">100%</text>" in svg  # top rounded up from 150%
    assert "&lt;x&gt;" in svg and "<x>" not in svg
    ys = [float(y) for y in re.findall(r'cy="([\d.]+)"', svg)]
    assert ys[0] > ys[1]  # the higher value is higher on the page (smaller y)


@pytest.mark.parametrize(
    ("value", "top"),
    [(0, 1.0), (0.003, 0.004), (0.01, 0.01), (1.0, 1.0), (1.3, 2.0), (31.0, 40.0), (450, 500)],
)
def test_nice_ceiling(value, top):
    assert nice_ceiling(value) == pytest.approx(top)
