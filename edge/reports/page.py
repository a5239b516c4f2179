"""The HTML of the /reports operator page: the last 30 UTC days per campaign, as charts and
as the numbers they are drawn from.

- Delivery rate: impressions / matches (of the ads served, the share counted: for the tag, seen).
- Viewability rate: viewable impressions / impressions.
- Spend against pacing: spend to date at the end of each day (the campaign's total less
  what later days billed) beside the even line's plan for that instant (``Pacer.planned``;
  campaigns without a budget and a flight end have no such line).

A rate on a day with no denominator is left out (a gap in its line, "-" in the table),
never drawn as 0. Everything is escaped; the page has no script and no inline style.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

from edge.counters import DayRow
from edge.reports.charts import Series, legend, line_chart, percent, series_class, usd
from edge.reports.daily import DayRange, plain_money
from matcher.pacing import Pacer
from matcher.types import Campaign

STYLESHEET = "/reports/reports.css"
LOGOUT = "/reports/logout"
LOGIN = "/reports/login"
RATES = (
    (
        "Delivery rate by campaign",
        "delivery",
        "impressions / matches: of the ads served, the share that rendered",
    ),
    ("Viewability rate by campaign", "viewability", "viewable impressions / impressions"),
)
COUNTERS = ("matches", "impressions", "viewable_impressions", "clicks", "billable_usd")


@dataclass
class CampaignDays:
    campaign_id: str
    name: str
    by_day: dict[str, dict[str, float]] = field(default_factory=dict)

    def get(self, day: str, counter: str) -> float:
        return self.by_day.get(day, {}).get(counter, 0.0)

    def delivery(self, day: str) -> float | None:
        return _ratio(self.get(day, "impressions"), self.get(day, "matches"))

    def viewability(self, day: str) -> float | None:
        return _ratio(self.get(day, "viewable_impressions"), self.get(day, "impressions"))


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def campaign_days(rows: Sequence[DayRow], campaigns: Sequence[Campaign]) -> list[CampaignDays]:
    """Campaign buckets by day: the catalogue's campaigns first, then any other id found."""
    out = {c.id: CampaignDays(c.id, c.advertiser_name) for c in campaigns}
    for day, scope, scope_id, counter, amount in rows:
        if scope != "campaign":
            continue
        entry = out.setdefault(scope_id, CampaignDays(scope_id, ""))
        entry.by_day.setdefault(day, {})[counter] = amount
    return list(out.values())


def render(
    days: DayRange,
    rows: Sequence[DayRow],
    campaigns: Sequence[Campaign],
    spent_total: Mapping[str, float],
    now: float,
    env: str,
) -> str:
    names = days.days
    everyone = campaign_days(rows, campaigns)
    entries = [e for e in everyone if e.by_day]  # the campaigns that moved in these days
    order = entries + [e for e in everyone if not e.by_day]
    colours = {e.campaign_id: series_class(i) for i, e in enumerate(order)}  # one per campaign
    body = [
        '<header><h1>Reports</h1><p class="range">UTC days '
        f"<time>{names[0]}</time> to <time>{names[-1]}</time>, {escape(env)}</p>"
        f'<form method="post" action="{LOGOUT}"><button type="submit">Sign out</button></form>'
        "</header><main>",
    ]
    if not entries:
        body.append('<p class="empty">Nothing counted for any campaign in these days.</p>')
    else:
        for title, kind, note in RATES:
            body.append(_rate_section(title, kind, names, entries, colours, note))
    # Pacing even when nothing was counted: a campaign that is not delivering at all is the
    # one pacing is there to show.
    body.append(_pacing_section(names, everyone, colours, campaigns, spent_total, now))
    if entries:
        body.append(_numbers(names, entries))
    body.append("</main>")
    return _document("Reports", "\n".join(body))


def _rate_section(
    title: str,
    kind: str,
    days: list[str],
    entries: list[CampaignDays],
    colours: Mapping[str, str],
    note: str,
) -> str:
    series = [
        Series(_label(e), colours[e.campaign_id], [getattr(e, kind)(d) for d in days])
        for e in entries
    ]
    top = max([1.0, *(v for s in series for v in s.values if v is not None)])
    chart = line_chart(title, days, series, y_max=top, y_label=percent)
    return (
        f'<section id="{kind}"><h2>{escape(title)}</h2><p class="note">{escape(note)}</p>'
        f"{legend(series)}{chart}</section>"
    )


def _pacing_section(
    days: list[str],
    entries: list[CampaignDays],
    colours: Mapping[str, str],
    campaigns: Sequence[Campaign],
    spent_total: Mapping[str, float],
    now: float,
) -> str:
    by_id = {c.id: c for c in campaigns}
    pacer = Pacer(campaigns)
    figures = []
    for e in entries:
        c = by_id.get(e.campaign_id)
        plan = [_planned(pacer, c, d, now) for d in days]
        has_plan = any(p is not None for p in plan)
        if not e.by_day and not has_plan:
            continue  # nothing spent, nothing planned: no chart to draw
        spent = spent_to_date(e, days, spent_total.get(e.campaign_id, 0.0))
        series = [Series("spent", colours[e.campaign_id], spent)]
        if has_plan:
            series.append(Series("even line (plan)", "plan", plan))
            note = ""
        elif c is None:  # counted before, removed from the catalogue since
            note = '<p class="note">No even line: not in the catalogue served now.</p>'
        else:
            note = '<p class="note">No even line: it needs a budget and a flight end.</p>'
        top = max([0.0, *(v for s in series for v in s.values if v is not None)])
        title = f"Spend against pacing: {_label(e)}"
        chart = line_chart(title, days, series, y_max=top, y_label=usd)
        figures.append(
            f'<figure data-campaign="{escape(e.campaign_id)}"><figcaption>{escape(_label(e))}'
            f"</figcaption>{legend(series)}{chart}{note}</figure>"
        )
    if not figures:
        figures.append('<p class="empty">No campaign spent or planned to spend in these days.</p>')
    return (
        '<section id="pacing"><h2>Spend against pacing</h2><p class="note">spend to date at '
        "the end of each day, against the even line's plan for that instant</p>"
        + "".join(figures)
        + "</section>"
    )


def spend_by_day(entry: CampaignDays, days: list[str]) -> list[float]:
    return [entry.get(d, "billable_usd") for d in days]


def spent_to_date(entry: CampaignDays, days: list[str], total_now: float) -> list[float | None]:
    """Spend to date at the end of each day: the total now, less what later days billed."""
    daily = spend_by_day(entry, days)
    out: list[float | None] = []
    later = sum(daily)
    for amount in daily:
        later -= amount
        out.append(max(total_now - later, 0.0))
    return out


def _planned(pacer: Pacer, c: Campaign | None, day: str, now: float) -> float | None:
    if c is None:
        return None
    end = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp() + 86_400
    return pacer.planned(c, min(end, now))


def _numbers(days: list[str], entries: list[CampaignDays]) -> str:
    head = "".join(f"<th>{h}</th>" for h in (
        "campaign", "day", "matches", "impressions", "viewable", "clicks", "spend",
        "delivery", "viewability",
    ))  # fmt: skip
    lines = []
    for e in entries:
        for d in days:
            if d not in e.by_day:
                continue
            cells = "".join(
                f'<td data-counter="{c}">{_cell(c, e.get(d, c))}</td>' for c in COUNTERS
            )
            rates = "".join(
                f'<td data-rate="{k}">{_rate(v)}</td>'
                for k, v in (("delivery", e.delivery(d)), ("viewability", e.viewability(d)))
            )
            lines.append(
                f'<tr data-campaign="{escape(e.campaign_id)}" data-day="{d}">'
                f"<th>{escape(_label(e))}</th><td>{d}</td>{cells}{rates}</tr>"
            )
    if not lines:
        lines.append('<tr><td colspan="9">Nothing counted in these days.</td></tr>')
    return (
        '<section id="numbers"><h2>The numbers</h2><p class="note">the day buckets the charts '
        "are drawn from (days with any)</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table></section>"
    )


def _cell(counter: str, value: float) -> str:
    if counter == "billable_usd":
        return plain_money(value)
    return str(int(value)) if float(value).is_integer() else str(value)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _label(e: CampaignDays) -> str:
    return f"{e.campaign_id} ({e.name})" if e.name else e.campaign_id


def login(message: str = "") -> str:
    note = f'<p class="error" role="alert">{escape(message)}</p>' if message else ""
    form = (
        '<main class="login"><h1>Reports</h1><p>Sign in with an Ad Manager key of this '
        f'edge.</p>{note}<form method="post" action="{LOGIN}">'
        '<label for="key">Ad Manager key</label>'
        '<input id="key" name="key" type="password" autocomplete="off" required>'
        '<button type="submit">Sign in</button></form></main>'
    )
    return _document("Sign in: reports", form)


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        f'<link rel="stylesheet" href="{STYLESHEET}"></head><body>{body}</body></html>'
    )
