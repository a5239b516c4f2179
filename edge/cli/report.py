"""``edge report [--json]``: the durable counters per ad, publisher, campaign and key.
``edge report --by day [--since DAY] [--until DAY] [--format table|json|csv]``: the same
counters' buckets per UTC day (requests, matches, impressions, viewable impressions, clicks,
billable USD, per ad, campaign, publisher and key), over the 30 days that end today unless
``--since``/``--until`` (inclusive, ``YYYY-MM-DD``) say otherwise.

Counters are only ever added to (never reset). Impressions, viewable impressions, clicks,
conversions, hovers, failures and billable amounts are written with their events;
requests, matches and no-matches are buffered by the running edge and flushed every
second, so a report taken while it runs may lag by that much.

A key row is a partner: its key's rotation family (the id of its first key, the same after
a rotation), with its calls and what the ads its calls served earned (impressions, clicks,
conversions and billable USD of the UGC pixel, AI beacons, the earlier API's
``POST /ugc/impression`` and their clicks and conversions), the figures a revenue share is
paid on; an Ad Manager key's row holds only its calls.

Ad, publisher, campaign and key rows get ``billable_usd`` by pricing model
(``billable_usd_cpm``, ``_cpc``, ``_cpa``) and every ``invalid_*`` counter (publisher rows
all but ``invalid_not_served``, publisher and key rows none of ``key_revoked``); ads,
campaigns and keys also get ``ctr`` (valid clicks per
viewable impression; null before the first one), and
campaigns ``pacing``: spent against the even line (``planned_usd``) of the catalogue a
production edge on this database serves: the live version stored by ``edge catalogue load``
when there is one (it wins over the file, as in the edge), else the file named by
``--catalogue`` / ``EDGE_CATALOGUE``, else the bundled one.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from typing import Any

from edge.cli._common import (
    EXISTING_DB_HELP,
    Subcommands,
    exit_statuses,
    settings_from,
    with_context,
)
from edge.context import Context
from edge.counters import CONVERSION_VALUE
from edge.ivt import INVALID_COUNTERS, KEY_REVOKED
from edge.preflight import check_catalogue
from edge.reports import daily
from edge.settings import add_arguments
from edge.store.events import REPORT_COUNTERS
from matcher.catalogue import Catalogue, CatalogueError, load_catalogue, parse_catalogue
from matcher.pacing import Pacer
from matcher.types import Campaign

HELP = """\
words:
  requests, matches, no_matches, empties
                        per publisher: slots asked for, filled, left empty; per key: partner
                        calls and their outcomes (empties: answered with ads: []); per ad and
                        campaign: matches only
  key                   a partner: its API key's rotation family (the id of its first key;
                        a rotated key keeps its row). Besides its calls, the impressions,
                        clicks, conversions and billable_usd of the ads it served (UGC pixel,
                        AI beacons, the earlier API's impression, and their clicks and
                        conversions): its revenue
  impressions           ads rendered: a tag beacon (sent once the ad is viewable), a UGC
                        pixel (fired when the ad is on screen) or an AI render beacon
  viewable_impressions  ads viewable by the MRC rule (50% of pixels for 1 continuous s): a
                        tag beacon, a UGC pixel or an AI view beacon. An AI partner may
                        fire the view beacon without the render one, so this can exceed
                        impressions.
  clicks                valid clicks: after a stored impression, at most one per impression
  ctr                   clicks / viewable_impressions (null while viewable_impressions is 0).
                        An AI click is valid after the render beacon alone, so an AI ad
                        whose view beacons are not fired can show a ctr above 1 (or null).
  conversions           conversions reported for valid clicks (POST /v1/ad-manager/conversions)
  conversion_value_usd  the sum of those conversions' value_usd (what the advertiser says they
                        were worth; reported, never billed)
  billable_usd          USD billed: CPM per 1,000 viewable impressions, CPC per valid click,
                        CPA per conversion (by model: billable_usd_cpm, _cpc, _cpa); not
                        past a campaign's budget or daily cap (bar the batch in flight)
  invalid_*             events stored but never billed, by reason: invalid_<reason> for
                        impressions, invalid_clicks_<reason> for clicks (click_before_impression:
                        no stored impression; impression_invalid: its impression was
                        stored invalid; duplicate: a second click on one impression;
                        bot_user_agent, client_mismatch, rate_limited, publisher_removed;
                        not_viewable: a tag beacon reporting under 30% in view or 1 s;
                        not_served: an earlier-API impression of an ad no match of its
                        post by that partner served; key_revoked: a UGC pixel, AI beacon
                        or their click of a partner whose key family has no valid key
                        left, counted per ad and campaign, never on the key's row)
  pacing                per campaign: spent_usd, planned_usd (the even line now; null without
                        a flight end or budget), budget_usd, daily_cap_usd, pacing; null for a
                        campaign not in the catalogue read; the table shows
                        spent/planned/budget, - where there is none
"""
# What clicks and conversions move: ad, campaign and key rows list them all, publishers the
# clicks and the money (a conversion and its value are counted per ad, campaign and key).
BILLED_BY_MODEL = ("billable_usd_cpm", "billable_usd_cpc", "billable_usd_cpa")
MONEY_COUNTERS = ("clicks", "conversions", CONVERSION_VALUE, *BILLED_BY_MODEL)

# Sections in print order; scopes the edge adds later appear after these.
SCOPES = ("ad", "publisher", "campaign", "key")
TITLES = {"ad": "Ads", "publisher": "Publishers", "campaign": "Campaigns", "key": "API keys"}
MONEY = "billable_usd"
# A request and a no-match concern a post or a page, never one ad: those two are counted
# per publisher and per key, so ad rows leave them out rather than show a column of zeros.
PER_AD_COUNTERS = tuple(c for c in REPORT_COUNTERS if c not in ("requests", "no_matches"))
# Every row of a scope lists each counter that scope can move (0 when it has not moved), so
# a JSON reader never meets a missing key; counters a scope never moves are left out. That
# includes the invalid_<reason> counters of every reason the invalid-traffic rules know; one
# the store holds that they no longer name is added to every row of its scope (``build``).
# The table leaves out invalid counters that are 0 in every row (``render_text``).
# A revoked partner's events count on no key row (``edge.ledger``) and have no publisher.
_KEY_REVOKED = (f"invalid_{KEY_REVOKED}", f"invalid_clicks_{KEY_REVOKED}")
COLUMNS = {
    "ad": (*PER_AD_COUNTERS, *MONEY_COUNTERS, *INVALID_COUNTERS),
    # The earlier API's impressions have no publisher: never not_served here.
    "publisher": (
        *REPORT_COUNTERS,
        "clicks",
        *BILLED_BY_MODEL,
        *(c for c in INVALID_COUNTERS if c != "invalid_not_served" and c not in _KEY_REVOKED),
    ),
    "campaign": (
        "matches",
        "impressions",
        "viewable_impressions",
        MONEY,
        *MONEY_COUNTERS,
        *INVALID_COUNTERS,
    ),
    # A partner: its calls, then what the ads they served earned (as a publisher's row).
    "key": (
        "requests",
        "matches",
        "empties",
        "no_matches",
        "impressions",
        "viewable_impressions",
        MONEY,
        *MONEY_COUNTERS,
        *(c for c in INVALID_COUNTERS if c not in _KEY_REVOKED),
    ),
}
# Scopes whose rows also get ``ctr`` (clicks per viewable impression).
CTR_SCOPES = ("ad", "campaign", "key")


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "report",
        help="counters per ad, publisher, campaign and key: impressions, clicks, billing",
        description=__doc__,
        epilog=HELP
        + "\n"
        + textwrap.fill(
            exit_statuses(
                two=" (a bad day or range, --format csv without --by day, --json with "
                "another --format, or a --catalogue file that is missing or not valid, "
                "included)"
            ),
            width=88,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--by",
        choices=["day"],
        help="day buckets instead of totals (implied by --since and --until)",
    )
    p.add_argument(
        "--since",
        metavar="DAY",
        help=f"first UTC day, YYYY-MM-DD (default: {daily.DEFAULT_DAYS - 1} days before "
        f"--until, {daily.DEFAULT_DAYS} days in all)",
    )
    p.add_argument("--until", metavar="DAY", help="last UTC day, YYYY-MM-DD (default: today)")
    p.add_argument(
        "--format",
        choices=["table", "json", "csv"],
        help="table (default), json (as --json; any other format with --json is refused), "
        "or csv (day buckets only)",
    )
    add_arguments(p, ["db", "catalogue"], EXISTING_DB_HELP)
    p.set_defaults(func=run, report_parser=p)


def build(
    rows: list[tuple[str, str, str, float]],
    campaigns: tuple[Campaign, ...] = (),
    now: float | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """{scope: {id: {counter: amount}}}; every row lists each counter of its scope (``COLUMNS``
    and any other counter a row of that scope moved, 0 when it has not moved), ad and
    campaign and key rows ``ctr``, campaigns of ``campaigns`` their pacing."""
    out: dict[str, dict[str, dict[str, Any]]] = {"ad": {}, "publisher": {}}
    for scope, scope_id, counter, amount in rows:
        entry = out.setdefault(scope, {}).setdefault(scope_id, {})
        entry[counter] = amount
    for c in campaigns:
        out.setdefault("campaign", {}).setdefault(c.id, {})
    for scope, entries in out.items():
        # A counter named by what happened (invalid_<reason>) is stored only for the rows it
        # happened to; the other rows of the scope list it as 0 as well.
        moved = {c for entry in entries.values() for c in entry}
        known = COLUMNS.get(scope, ())
        columns = (*known, *sorted(moved - set(known)))
        for scope_id, entry in entries.items():
            entries[scope_id] = {c: entry.get(c, 0) for c in columns} | entry
    for scope in CTR_SCOPES:
        for entry in out.get(scope, {}).values():
            views = entry["viewable_impressions"]
            entry["ctr"] = round(entry["clicks"] / views, 6) if views else None
    pacer = Pacer(campaigns)
    at = time.time() if now is None else now
    for c in campaigns:
        entry = out["campaign"][c.id]
        planned = pacer.planned(c, at)
        entry["pacing"] = {
            "pacing": c.pacing,
            "spent_usd": round(entry.get("billable_usd", 0), 6),
            "planned_usd": None if planned is None else round(planned, 6),
            "budget_usd": c.budget_usd,
            "daily_cap_usd": c.daily_cap_usd,
        }
    for entry in out.get("campaign", {}).values():
        entry.setdefault("pacing", None)  # counted, but not in the catalogue read
    return {
        scope: {i: {c: _number(c, a) for c, a in entries[i].items()} for i in sorted(entries)}
        for scope, entries in sorted(out.items(), key=lambda kv: _order(kv[0]))
    }


def _order(scope: str) -> tuple[int, str]:
    return (SCOPES.index(scope) if scope in SCOPES else len(SCOPES), scope)


def _number(counter: str, amount: Any) -> Any:
    if not isinstance(amount, int | float):
        return amount  # ctr before any view (None), the pacing object
    if counter.startswith(MONEY):
        return round(amount, daily.MONEY_DECIMALS)
    if counter == "ctr":
        return amount
    return int(amount) if float(amount).is_integer() else amount


def render_text(report: dict[str, dict[str, dict[str, float]]]) -> str:
    lines: list[str] = []
    for scope, entries in report.items():
        lines.append(f"{TITLES.get(scope, scope)} ({len(entries)})")
        if not entries:
            lines.append("  (none yet)")
            lines.append("")
            continue
        known = [c for c in REPORT_COUNTERS if any(c in e for e in entries.values())]
        extra = sorted(
            c
            for c in {c for e in entries.values() for c in e} - set(known)
            if not c.startswith("invalid") or any(e.get(c) for e in entries.values())
        )
        cols = known + extra
        table = [
            [scope_id, *(_cell(c, e.get(c, 0)) for c in cols)] for scope_id, e in entries.items()
        ]
        header = [scope, *cols]
        widths = [max(len(str(r[i])) for r in [header, *table]) for i in range(len(header))]
        for row in [header, *table]:
            first = str(row[0]).ljust(widths[0])
            rest = (str(v).rjust(w) for v, w in zip(row[1:], widths[1:], strict=True))
            lines.append("  " + "  ".join([first, *rest]))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _cell(counter: str, value: Any) -> str:
    if counter == "pacing" and isinstance(value, dict):
        # spent/planned/budget: a budget without a flight end has no even line, and its
        # overspend shows only beside the budget.
        figures = (value["spent_usd"], value["planned_usd"], value.get("budget_usd"))
        return "/".join("-" if v is None else daily.money_cell(v) for v in figures)
    if value is None:
        return "-"
    if daily.is_money(counter):
        return daily.money_cell(value)  # to the micro-dollar, as JSON gives it
    return f"{value:.4f}" if counter == "ctr" else str(value)


def run(args: argparse.Namespace) -> int:
    if args.json and args.format not in (None, "json"):
        # Two flags asking for two forms: refused rather than one silently winning.
        args.report_parser.error(
            f"argument --format: --format {args.format} conflicts with --json "
            "(which means --format json); give one of them"
        )
    fmt = args.format or ("json" if args.json else "table")
    if args.by or args.since is not None or args.until is not None:
        return run_daily(args, fmt)
    if fmt == "csv":
        print("edge report: --format csv lists day buckets: add --by day", file=sys.stderr)
        return 2
    settings = settings_from(args)
    # Checked before the database, as `edge serve` checks it: a catalogue setting that
    # cannot be used is exit 2 with one line, not a report without pacing.
    from_file = check_catalogue(settings.catalogue)

    async def work(ctx: Context) -> dict[str, Any]:
        return build(await ctx.store.counts(), await served_campaigns(ctx, from_file))

    report = with_context(settings, work, must_exist=True)
    if fmt == "json":
        print(daily.render_json(report))
    else:
        print(render_text(report), end="")
    return 0


async def served_campaigns(ctx: Context, from_file: Catalogue | None) -> tuple[Campaign, ...]:
    """The campaigns a production edge on this database serves, for their pacing: the live
    version stored by ``edge catalogue load`` (which wins over the file), else the file
    named by ``EDGE_CATALOGUE`` (``from_file``, checked already), else the bundled one (said
    on stderr for a production database: its campaigns are samples, not what is served).
    Nothing when a stored version cannot be read (said on stderr: the report still prints)."""
    try:
        live = await ctx.store.live_catalogue() if ctx.settings.is_production else None
        body = None if live is None else await ctx.store.catalogue_body(live[0])
        if body is not None:
            return parse_catalogue(body).campaigns
        if from_file is not None:
            return from_file.campaigns
        if ctx.settings.is_production:
            print(
                "edge report: pacing is of the bundled sample catalogue (what `edge demo` "
                "and an edge without --catalogue serve): no catalogue was loaded into this "
                "database; if the edge serves a file, pass it with --catalogue",
                file=sys.stderr,
            )
        return load_catalogue(None).campaigns
    except CatalogueError as exc:
        print(f"edge report: no pacing: {exc}", file=sys.stderr)
        return ()


def run_daily(args: argparse.Namespace, fmt: str) -> int:
    try:
        days = daily.DayRange.parse(args.since, args.until, time.time())
    except daily.RangeError as exc:
        print(f"edge report: {exc}", file=sys.stderr)
        return 2
    settings = settings_from(args)
    # The day buckets read no catalogue, but a catalogue setting that cannot be used is
    # exit 2 for every report, as for `edge serve`: not a rule that depends on the flags.
    check_catalogue(settings.catalogue)

    async def work(ctx: Context) -> list[tuple[str, str, str, str, float]]:
        return await ctx.store.daily_counts(days.since.isoformat(), days.until.isoformat())

    report = daily.build(with_context(settings, work, must_exist=True), days)
    if fmt == "json":
        print(daily.render_json(report))
    elif fmt == "csv":
        print(daily.render_csv(report), end="")
    else:
        print(daily.render_table(report), end="")
    return 0
