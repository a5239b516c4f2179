"""Advertiser eligibility: campaign status, flight dates, remaining budget, product.

Static gates (product, status, flight) are turned into boolean row masks over the ad
matrix, so the hot path removes ineligible ads with one vectorised ``where`` instead of a
Python loop over 100k placements. Flight masks depend on the clock, so they are rebuilt at
most once a second.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

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


def budget_gate(campaign: Campaign, spend: Mapping[str, float]) -> str | None:
    if campaign.budget_usd is None:
        return None
    return "budget_exhausted" if spend.get(campaign.id, 0.0) >= campaign.budget_usd else None


def static_gate(p: Placement, product: str, now: float) -> str | None:
    """The first gate that removes this placement for every request of ``product`` now."""
    if product not in p.ad_set.products:
        return f"product_not_{product}"
    return status_gate(p.campaign) or flight_gate(p.campaign, now)


class EligibilityMasks:
    """Per-product row masks of the static gates, cached for one second of clock time."""

    def __init__(self, placements: Sequence[Placement]) -> None:
        self._placements = placements
        self._products = {
            prod: np.array([prod in p.ad_set.products for p in placements], dtype=bool)
            for prod in ("ugc", "ai")
        }
        self._active = np.array([p.campaign.status == "active" for p in placements], dtype=bool)
        campaigns = {p.campaign.id: p.campaign for p in placements}
        self._campaign_rows: dict[str, np.ndarray] = {}
        ids = np.array([p.campaign.id for p in placements], dtype=object)
        for cid in campaigns:
            self._campaign_rows[cid] = np.flatnonzero(ids == cid)
        self._campaigns = campaigns
        self._lock = threading.Lock()
        self._cached_second: int | None = None
        self._cached: dict[str, np.ndarray] = {}
        self._live_second: int | None = None
        self._live: list[str] = []

    def mask(self, product: str, now: float) -> np.ndarray:
        second = int(now)
        with self._lock:
            if self._cached_second != second:
                in_flight = np.ones(len(self._placements), dtype=bool)
                for cid, camp in self._campaigns.items():
                    if flight_gate(camp, now) is not None:
                        in_flight[self._campaign_rows[cid]] = False
                live = in_flight & self._active
                self._cached = {prod: live & m for prod, m in self._products.items()}
                self._cached_second = second
            return self._cached.get(product, np.zeros(len(self._placements), dtype=bool))

    def campaign(self, cid: str) -> Campaign:
        return self._campaigns[cid]

    def live_campaigns(self, now: float) -> list[str]:
        """Ids of campaigns active and in flight now (a part of the demand version)."""
        second = int(now)
        with self._lock:
            if self._live_second != second:
                self._live = sorted(
                    cid
                    for cid, c in self._campaigns.items()
                    if status_gate(c) is None and flight_gate(c, now) is None
                )
                self._live_second = second
            return self._live
