"""Day buckets as a report: a range of UTC days, one row per (day, scope, id), and its
table, JSON and CSV forms (``edge report --by day``; the /reports page reads the same rows).

A range is inclusive at both ends. Only (day, scope, id) that have a bucket get a row: a
day where nothing happened to an ad is left out rather than printed as zeros.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from edge.counters import DAILY_COUNTERS, DayRow

DEFAULT_DAYS = 30  # the default range: the 30 UTC days that end today
SCOPES = ("campaign", "ad", "publisher", "key")
TITLES = {"campaign": "Campaigns", "ad": "Ads", "publisher": "Publishers", "key": "API keys"}
# A request concerns a page, a post or a partner's call, never one ad: only publishers and
# keys (a partner: its key's rotation family) have it.
COLUMNS = {
    "publisher": DAILY_COUNTERS,
    "key": DAILY_COUNTERS,
    "ad": tuple(c for c in DAILY_COUNTERS if c != "requests"),
    "campaign": tuple(c for c in DAILY_COUNTERS if c != "requests"),
}
MONEY = "billable_usd"
# Money is kept to the micro-dollar (a $1.99 CPM impression bills $0.00199): every form of
# a report gives it to 6 decimals, and none rounds it further.
MONEY_DECIMALS = 6
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class RangeError(ValueError):
    """A date that is not a UTC day ``YYYY-MM-DD``, or a range that ends before it starts."""


@dataclass(frozen=True, slots=True)
class DayRange:
    since: dt.date
    until: dt.date

    @property
    def days(self) -> list[str]:
        n = (self.until - self.since).days + 1
        return [(self.since + dt.timedelta(days=i)).isoformat() for i in range(n)]

    @classmethod
    def last(cls, days: int, now: float) -> DayRange:
        """The ``days`` UTC days that end with the day of ``now``."""
        until = dt.datetime.fromtimestamp(now, dt.UTC).date()
        return cls(until - dt.timedelta(days=days - 1), until)

    @classmethod
    def parse(cls, since: str | None, until: str | None, now: float) -> DayRange:
        """The range the user named; a missing end defaults: ``until`` to today (UTC),
        ``since`` to ``DEFAULT_DAYS`` - 1 days before ``until``."""
        end = _day("--until", until) if until is not None else cls.last(1, now).until
        start = (
            _day("--since", since)
            if since is not None
            # (never before the calendar's first day: "--until 0001-01-05" is a short range)
            else dt.date.fromordinal(max(1, end.toordinal() - (DEFAULT_DAYS - 1)))
        )
        if start > end:
            raise RangeError(f"--since {start} is after --until {end}")
        return cls(start, end)


def _day(flag: str, text: str) -> dt.date:
    if not _DATE.fullmatch(text):
        raise RangeError(f"{flag} takes a UTC day as YYYY-MM-DD, got {text!r}")
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise RangeError(f"{flag}: {text!r} is not a day of the calendar") from None


def build(rows: Iterable[DayRow], days: DayRange) -> dict[str, Any]:
    """The report document: the range and one row per (day, scope, id) with a bucket, each
    with every counter of its scope (0 when that one did not move)."""
    grouped: dict[tuple[str, str, str], dict[str, float]] = {}
    for day, scope, scope_id, counter, amount in rows:
        if scope in COLUMNS and counter in COLUMNS[scope]:
            grouped.setdefault((day, scope, scope_id), {})[counter] = amount
    out = []
    order = {s: i for i, s in enumerate(SCOPES)}
    for day, scope, scope_id in sorted(grouped, key=lambda k: (k[0], order[k[1]], k[2])):
        amounts = grouped[(day, scope, scope_id)]
        entry: dict[str, Any] = {"day": day, "scope": scope, "id": scope_id}
        entry |= {c: _number(c, amounts.get(c, 0)) for c in COLUMNS[scope]}
        out.append(entry)
    return {
        "by": "day",
        "since": days.since.isoformat(),
        "until": days.until.isoformat(),
        "rows": out,
    }


def _number(counter: str, amount: float) -> float | int:
    if counter == MONEY:
        return round(amount, MONEY_DECIMALS)
    return int(amount) if float(amount).is_integer() else amount


def plain_money(value: float) -> str:
    """A USD amount to ``MONEY_DECIMALS`` decimals, trailing zeros dropped, never in
    exponent form (``0.000004``, not ``4e-06``)."""
    return f"{value:.{MONEY_DECIMALS}f}".rstrip("0").rstrip(".")


def is_money(key: str) -> bool:
    """A report field that holds USD: ``billable_usd`` and its ``_cpm``, ``_cpc``, ``_cpa``
    parts, and the pacing's ``*_usd`` figures."""
    return "_usd" in key


def _plain(value: Any, money: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v, is_money(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if money and isinstance(value, float):
        return orjson.Fragment(plain_money(value).encode())
    return value


def render_json(report: dict[str, Any]) -> str:
    """The report as indented JSON, its money in plain decimals as CSV and the docs give it
    (a JSON number either way: ``0.000004`` where the encoder would write ``4e-06``)."""
    return orjson.dumps(_plain(report), option=orjson.OPT_INDENT_2).decode()


def render_csv(report: dict[str, Any]) -> str:
    """One line per row; a counter a scope does not have (an ad's requests) is empty. Money
    is written in plain decimals, as JSON gives it (never ``5e-05``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["day", "scope", "id", *DAILY_COUNTERS])
    for row in report["rows"]:
        cells = (_csv_cell(c, row[c]) if c in row else "" for c in DAILY_COUNTERS)
        writer.writerow([row["day"], row["scope"], row["id"], *cells])
    return buffer.getvalue()


def _csv_cell(counter: str, value: float | int) -> str:
    return plain_money(value) if counter == MONEY else str(value)


def render_table(report: dict[str, Any]) -> str:
    lines = [f"Days {report['since']} to {report['until']} (UTC)", ""]
    for scope in SCOPES:
        rows = [r for r in report["rows"] if r["scope"] == scope]
        lines.append(f"{TITLES[scope]} ({len({r['id'] for r in rows})})")
        if not rows:
            lines += ["  (nothing in these days)", ""]
            continue
        cols = COLUMNS[scope]
        header = ["day", scope, *cols]
        table = [[r["day"], r["id"], *(_cell(c, r[c]) for c in cols)] for r in rows]
        widths = [max(len(str(t[i])) for t in [header, *table]) for i in range(len(header))]
        for t in [header, *table]:
            left = [str(v).ljust(w) for v, w in zip(t[:2], widths[:2], strict=True)]
            right = [str(v).rjust(w) for v, w in zip(t[2:], widths[2:], strict=True)]
            lines.append("  " + "  ".join(left + right))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def money_cell(value: float) -> str:
    """A USD amount in a table: all ``MONEY_DECIMALS`` decimals, so it is the figure JSON
    and CSV give (0.003980 beside their 0.00398) and the decimal points line up."""
    return f"{value:.{MONEY_DECIMALS}f}"


def _cell(counter: str, value: float) -> str:
    return money_cell(value) if counter == MONEY else str(value)
