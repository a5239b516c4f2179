"""``edge report [--json]``: the durable counters per ad and per publisher.

Counters are only ever added to (never reset). Impressions, viewable impressions, hovers,
failures and billable amounts are written with their events; requests, matches and
no-matches are buffered by the running edge and flushed every second, so a report taken
while it runs may lag by that much.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from edge.cli._common import Subcommands, settings_from, with_context
from edge.context import Context
from edge.settings import add_arguments
from edge.store.events import REPORT_COUNTERS

# Sections in print order; scopes the edge adds later appear after these.
SCOPES = ("ad", "publisher", "campaign", "key")
TITLES = {"ad": "Ads", "publisher": "Publishers", "campaign": "Campaigns", "key": "API keys"}
MONEY = "billable_usd"
# A request and a no-match concern a post or a page, never one ad: those two are counted
# per publisher and per key, so ad rows leave them out rather than show a column of zeros.
PER_AD_COUNTERS = tuple(c for c in REPORT_COUNTERS if c not in ("requests", "no_matches"))
COLUMNS = {"ad": PER_AD_COUNTERS, "publisher": REPORT_COUNTERS}


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "report",
        help="counters per ad and per publisher: requests, matches, impressions, billing",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    add_arguments(p, ["db"])
    p.set_defaults(func=run)


def build(rows: list[tuple[str, str, str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """{scope: {id: {counter: amount}}}; ad and publisher rows list every counter of theirs."""
    out: dict[str, dict[str, dict[str, float]]] = {"ad": {}, "publisher": {}}
    for scope, scope_id, counter, amount in rows:
        entry = out.setdefault(scope, {}).setdefault(scope_id, {})
        entry[counter] = amount
    for scope, columns in COLUMNS.items():
        for scope_id, entry in out[scope].items():
            out[scope][scope_id] = {c: entry.get(c, 0) for c in columns} | entry
    return {
        scope: {i: {c: _number(c, a) for c, a in entries[i].items()} for i in sorted(entries)}
        for scope, entries in sorted(out.items(), key=lambda kv: _order(kv[0]))
    }


def _order(scope: str) -> tuple[int, str]:
    return (SCOPES.index(scope) if scope in SCOPES else len(SCOPES), scope)


def _number(counter: str, amount: float) -> float | int:
    if counter == MONEY:
        return round(amount, 6)
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
        extra = sorted({c for e in entries.values() for c in e} - set(known))
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


def _cell(counter: str, value: float) -> str:
    return f"{value:.4f}" if counter == MONEY else str(value)


def run(args: argparse.Namespace) -> int:
    async def work(ctx: Context) -> dict[str, Any]:
        return build(await ctx.store.counts())

    report = with_context(settings_from(args), work)
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_text(report), end="")
    return 0
