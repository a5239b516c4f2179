"""Eligibility masks: one mask per product between flight starts and ends, always the same
rows a fresh comparison gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from matcher.catalogue import parse_catalogue, parse_timestamp
from matcher.eligibility import EligibilityMasks, static_gate

FLIGHTS = [  # (start_at, end_at, status, products) per campaign
    ("2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z", "active", ["ugc"]),
    ("2026-10-10T00:00:00Z", None, "active", ["ugc", "ai"]),
    (None, "2026-10-20T12:00:00Z", "active", ["ai"]),
    (None, None, "paused", ["ugc"]),
    ("2026-10-10T00:00:00Z", "2026-10-10T00:00:01Z", "active", ["ugc"]),
]


def catalogue():
    campaigns = []
    for c, (start, end, status, products) in enumerate(FLIGHTS):
        ads = [
            {
                "id": f"ad-{c}-{a}",
                "title": "T",
                "cta": "Go",
                "description": "D",
                "click_through_url": "https://example.com/",
                "ttl_seconds": 60,
            }
            for a in range(2)
        ]
        campaigns.append(
            {
                "id": f"c-{c}",
                "advertiser_name": "Acme",
                "status": status,
                "start_at": start,
                "end_at": end,
                "ad_sets": [
                    {
                        "id": f"as-{c}",
                        "products": products,
                        "pricing_model": {"type": "cpm", "bid_amount": 1},
                        "ads": ads,
                    }
                ],
            }
        )
    return parse_catalogue(json.dumps({"campaigns": campaigns}))


def test_a_mask_kept_between_flight_edges_is_the_mask_of_that_instant():
    placements = catalogue().placements
    masks = EligibilityMasks(placements)
    edges = sorted(
        parse_timestamp(t) for start, end, _, _ in FLIGHTS for t in (start, end) if t is not None
    )
    # Each edge, just before and just after it, between edges, and the clock going back.
    instants = [t + d for t in edges for d in (-1.0, -1e-3, 0.0, 1e-3, 0.5, 3600.0)]
    instants += [*instants[::-1], edges[0] - 1e9, edges[-1] + 1e9]
    for now in instants:
        for product in ("ugc", "ai", "other"):
            want = [static_gate(p, product, now) is None for p in placements]
            got = masks.mask(product, now)
            assert got.tolist() == want, (product, now)
            assert not got.flags.writeable  # shared by every request until the next edge


def test_the_same_mask_is_handed_out_until_a_flight_starts_or_ends():
    masks = EligibilityMasks(catalogue().placements)
    start = parse_timestamp("2026-10-10T00:00:00Z")
    first = masks.mask("ugc", start - 100)
    assert masks.mask("ugc", start - 1) is first
    assert masks.mask("ugc", start) is not first
    with pytest.raises(ValueError):
        first[0] = not first[0]
    assert np.array_equal(masks.mask("ugc", start - 100), first)
