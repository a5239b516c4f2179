"""Advertiser eligibility: campaign status, flight dates, product (budgets: ``pacing``).

Static gates (product, status, flight) are turned into boolean row masks over the ad
matrix, so the hot path removes ineligible ads with a few vectorised comparisons instead of
a Python loop over 100k placements; and a mask is built once per product between two flight
starts or ends, not per request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from matcher.catalogue import parse_timestamp
from matcher.types import Campaign, Placement


def flight_gate(campaign: Campaign, now: float) -> str | None:
    """None when the campaign is inside its flight; otherwise the gate's name."""
    start = parse_timestamp(campaign.start_at) if campaign.start_at else None
    end = parse_timestamp(campaign.end_at) if campaign.end_at else None
    if start is not None and now < start:
        return "not_started"
    if end is not None and now >= end:
        return "expired"
    return None


def status_gate(campaign: Campaign) -> str | None:
    return None if campaign.status == "active" else f"status_{campaign.status}"


def static_gate(p: Placement, product: str, now: float) -> str | None:
    """The first gate that removes this placement for every request of ``product`` now."""
    if product not in p.ad_set.products:
        return f"product_not_{product}"
    return status_gate(p.campaign) or flight_gate(p.campaign, now)


class EligibilityMasks:
    """Per-product row masks of the static gates, as vectorised comparisons.

    Flight bounds are epoch arrays per row (missing = open-ended), so a mask at any instant
    is a handful of numpy operations over the rows, with no per-campaign Python loop even
    at 100k ads.
    """

    def __init__(self, placements: Sequence[Placement]) -> None:
        self._products = {
            prod: np.array([prod in p.ad_set.products for p in placements], dtype=bool)
            for prod in ("ugc", "ai")
        }
        self._campaigns = {p.campaign.id: p.campaign for p in placements}
        bounds = {cid: _bounds(c) for cid, c in self._campaigns.items()}
        self._start = np.array([bounds[p.campaign.id][0] for p in placements], dtype=np.float64)
        self._end = np.array([bounds[p.campaign.id][1] for p in placements], dtype=np.float64)
        self._active = np.array([p.campaign.status == "active" for p in placements], dtype=bool)
        self._ids = list(self._campaigns)
        self._c_start = np.array([bounds[c][0] for c in self._ids], dtype=np.float64)
        self._c_end = np.array([bounds[c][1] for c in self._ids], dtype=np.float64)
        self._c_active = np.array(
            [self._campaigns[c].status == "active" for c in self._ids], dtype=bool
        )
        self._none = np.zeros(len(placements), dtype=bool)
        # Every instant a flight starts or ends: between two of them every mask is the same.
        edges = np.concatenate([self._start, self._end])
        self._edges = np.unique(edges[np.isfinite(edges)])
        # product -> (from, until, mask): the last mask built, valid while from <= now < until.
        self._last: dict[str, tuple[float, float, np.ndarray]] = {}
        # The same for the ids of the live campaigns.
        self._live: tuple[float, float, tuple[str, ...]] | None = None

    def mask(self, product: str, now: float) -> np.ndarray:
        """Rows live for ``product`` at ``now`` (read-only: the same array is handed to every
        request until a flight starts or ends)."""
        last = self._last.get(product)
        if last is not None and last[0] <= now < last[1]:
            return last[2]
        by_product = self._products.get(product, self._none)
        live: np.ndarray = by_product & self._active & (self._start <= now) & (now < self._end)
        live.flags.writeable = False
        self._last[product] = (*self._interval(now), live)
        return live

    def campaign(self, cid: str) -> Campaign:
        return self._campaigns[cid]

    def live_campaigns(self, now: float) -> tuple[str, ...]:
        """Ids of campaigns active and in flight now, sorted (a part of the demand version):
        the same tuple, built once, until a flight starts or ends."""
        last = self._live
        if last is not None and last[0] <= now < last[1]:
            return last[2]
        live = self._c_active & (self._c_start <= now) & (now < self._c_end)
        ids = tuple(sorted(self._ids[i] for i in np.flatnonzero(live)))
        self._live = (*self._interval(now), ids)
        return ids

    def _interval(self, now: float) -> tuple[float, float]:
        """The flight starts or ends just before and after ``now``: every mask holds between."""
        i = int(np.searchsorted(self._edges, now, side="right"))
        since = float(self._edges[i - 1]) if i > 0 else -math.inf
        until = float(self._edges[i]) if i < len(self._edges) else math.inf
        return since, until


def _bounds(c: Campaign) -> tuple[float, float]:
    start = parse_timestamp(c.start_at) if c.start_at else None
    end = parse_timestamp(c.end_at) if c.end_at else None
    return (-np.inf if start is None else start, np.inf if end is None else end)
