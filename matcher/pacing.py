"""Budget pacing: whether a campaign may be served now, given what it has spent.

Three limits, checked in this order:

- ``budget_usd``: a hard stop once the campaign's total spend reaches it;
- ``daily_cap_usd``: a hard stop once its spend in the current UTC day reaches it;
- ``pacing: "even"`` (the default): spend follows a straight line. Over the flight, the
  plan at instant t is ``budget_usd * (t - start_at) / (end_at - start_at)``; within a UTC
  day with a daily cap, ``daily_cap_usd * (seconds since midnight) / 86400``. A campaign
  is held back ("pacing_ahead") while its spend is at or past the plan one
  ``PACING_SLACK_SECONDS`` (1 hour) ahead, so it is served again as soon as the plan
  catches up: spend stays within one hour's worth of the line. A flight with no
  ``end_at`` or no ``start_at``, or no budget, has no flight line (only the daily one).
  ``pacing: "asap"`` serves as fast as demand allows, up to the hard stops.

The spend the matcher sees is a snapshot the edge refreshes (``Spend``); the edge also
refuses to bill past the hard stops, so overspend is bounded there, not here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from matcher.catalogue_schema import parse_timestamp
from matcher.types import Campaign

DAY_SECONDS = 86400
PACING_SLACK_SECONDS = 3600.0
# Less than this left of a budget or cap (the float dust of summed charges, each event
# billing at most what is left) is nothing left: the campaign stops and bills no more.
MIN_CHARGE_USD = 1e-6


@dataclass(frozen=True, slots=True)
class Spend:
    """Billed USD per campaign id: in total, and in the current UTC day."""

    total: Mapping[str, float] = field(default_factory=dict)
    today: Mapping[str, float] = field(default_factory=dict)


def day_start(now: float) -> float:
    """Epoch seconds of the UTC midnight that began the day of ``now``."""
    return now - now % DAY_SECONDS


def _fraction(now: float, start: float, length: float) -> float:
    return min(max((now - start) / length, 0.0), 1.0)


class Pacer:
    """Pacing decisions for the campaigns of one catalogue (flight bounds parsed once)."""

    def __init__(self, campaigns: Iterable[Campaign], slack: float = PACING_SLACK_SECONDS) -> None:
        self.slack = slack
        self._flight: dict[str, tuple[float, float] | None] = {}
        for c in campaigns:
            start = parse_timestamp(c.start_at) if c.start_at else None
            end = parse_timestamp(c.end_at) if c.end_at else None
            line = (start, end) if start is not None and end is not None else None
            self._flight[c.id] = line if line is not None and line[1] > line[0] else None

    def planned(self, c: Campaign, now: float) -> float | None:
        """USD the even line has spent by ``now`` over the flight (None: no flight line)."""
        flight = self._flight.get(c.id)
        if c.budget_usd is None or flight is None:
            return None
        start, end = flight
        return c.budget_usd * _fraction(now, start, end - start)

    def holds_unspent(self, c: Campaign) -> bool:
        """Whether ``gate`` may hold ``c`` back while it has spent nothing, at some instant
        of its flight. Only a budget or daily cap of (next to) nothing can, or a line with
        no slack: with spend at zero, a positive budget's even line one ``slack`` past the
        start of the flight (or of the day) is already above zero."""
        if (c.budget_usd is not None and c.budget_usd < MIN_CHARGE_USD) or (
            c.daily_cap_usd is not None and c.daily_cap_usd < MIN_CHARGE_USD
        ):
            return True
        lines = self._flight.get(c.id) is not None or c.daily_cap_usd is not None
        return c.pacing != "asap" and lines and self.slack <= 0

    def planned_today(self, c: Campaign, now: float, day: float | None = None) -> float | None:
        """USD the daily line has spent by ``now`` in the UTC day that began at ``day``
        (default: the day of ``now``). Given today's start, the next midnight reads the
        whole cap."""
        if c.daily_cap_usd is None:
            return None
        begin = day_start(now) if day is None else day
        return c.daily_cap_usd * _fraction(now, begin, DAY_SECONDS)

    def gate(self, c: Campaign, spend: Spend, now: float) -> str | None:
        """None when the campaign may be served now; otherwise the gate's name."""
        stop = hard_stop(c, spend)
        if stop is not None:
            return stop
        total = spend.total.get(c.id, 0.0)
        today = spend.today.get(c.id, 0.0)
        if c.pacing == "asap":
            return None
        ahead = now + self.slack
        plan = self.planned(c, ahead)
        if plan is not None and total >= plan:
            return "pacing_ahead"
        # The daily line never looks past midnight: tomorrow's share is not today's. In the
        # last hour of a day it reads today's line at midnight (the whole cap), not
        # tomorrow's at its start (nothing, which held every capped campaign back).
        today_began = day_start(now)
        plan_today = self.planned_today(c, min(ahead, today_began + DAY_SECONDS), today_began)
        if plan_today is not None and today >= plan_today:
            return "pacing_ahead"
        return None


def hard_stop(c: Campaign, spend: Spend) -> str | None:
    """ "budget_exhausted" or "daily_cap_reached" once spend has reached either; else None."""
    if c.budget_usd is not None and spend.total.get(c.id, 0.0) > c.budget_usd - MIN_CHARGE_USD:
        return "budget_exhausted"
    if c.daily_cap_usd is not None and (
        spend.today.get(c.id, 0.0) > c.daily_cap_usd - MIN_CHARGE_USD
    ):
        return "daily_cap_reached"
    return None


def headroom(c: Campaign, spend: Spend) -> float | None:
    """USD the campaign may still be billed: what is left of its budget and of today's cap,
    the smaller; None when it has neither (no limit)."""
    left: float | None = None
    if c.budget_usd is not None:
        left = c.budget_usd - spend.total.get(c.id, 0.0)
    if c.daily_cap_usd is not None:
        today = c.daily_cap_usd - spend.today.get(c.id, 0.0)
        left = today if left is None else min(left, today)
    return left


def as_spend(spend: Spend | Mapping[str, float] | None) -> Spend:
    """A ``Spend`` from either form; a bare mapping is the total (nothing known of today)."""
    if spend is None:
        return Spend()
    if isinstance(spend, Spend):
        return spend
    return Spend(total=spend)
