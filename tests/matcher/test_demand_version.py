"""The demand version (what a post's no-match window compares between misses) costs the
campaigns that have spent, not the catalogue, and equals the hash over every live campaign."""

from __future__ import annotations

import hashlib
import json
import random
from types import SimpleNamespace

import numpy as np
import pytest

from matcher import Matcher
from matcher.catalogue import parse_catalogue, parse_timestamp
from matcher.eligibility import flight_gate, status_gate
from matcher.pacing import DAY_SECONDS, Pacer, Spend

DAY0 = parse_timestamp("2026-10-01T00:00:00Z")
assert DAY0 is not None


def _iso(t: float) -> str:
    return np.datetime_as_string(np.datetime64(int(t), "s")) + "Z"


def _campaigns(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        c: dict = {
            "id": f"c-{i:03d}",
            "advertiser_name": "Acme",
            "status": rng.choice(["active", "active", "active", "paused"]),
            "pacing": rng.choice(["even", "even", "asap"]),
        }
        if rng.random() < 0.8:
            start = DAY0 + rng.randrange(0, 20) * DAY_SECONDS + rng.randrange(0, DAY_SECONDS)
            c["start_at"] = _iso(start)
            if rng.random() < 0.8:
                c["end_at"] = _iso(start + rng.randrange(1, 30) * DAY_SECONDS)
        if rng.random() < 0.7:
            c["budget_usd"] = rng.choice([0, 5, 50, 500])
        if rng.random() < 0.4:
            c["daily_cap_usd"] = rng.choice([0, 2, 20])
        c["ad_sets"] = [
            {
                "id": f"as-{i}",
                "products": ["ugc"],
                "pricing_model": {"type": "cpm", "bid_amount": 1},
                "ads": [
                    {
                        "id": f"ad-{i}",
                        "title": "T",
                        "cta": "Go",
                        "description": "D",
                        "click_through_url": "https://example.com/",
                        "ttl_seconds": 60,
                    }
                ],
            }
        ]
        out.append(c)
    return out


def _reference(m: Matcher, now: float, spend: Spend) -> str:
    """The version as first written: every live campaign through the pacer, every time."""
    campaigns = {p.campaign.id: p.campaign for p in m.catalogue.placements}
    live = sorted(
        cid for cid, c in campaigns.items() if not status_gate(c) and not flight_gate(c, now)
    )
    spent = [cid for cid in live if m.pacer.gate(campaigns[cid], spend, now)]
    text = "|".join([m.catalogue.content_hash, ",".join(live), ",".join(spent)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("seed", range(6))
def test_the_version_is_the_hash_over_every_live_campaign(seed):
    rng = random.Random(seed)
    catalogue = parse_catalogue(json.dumps({"campaigns": _campaigns(rng, 60)}))
    m = Matcher(catalogue, SimpleNamespace(dim=4), np.eye(60, 4, dtype=np.float32))  # type: ignore[arg-type]
    try:
        ids = [c.id for c in catalogue.campaigns]
        seen = set()
        for _ in range(300):
            # Instants anywhere in the flights, and exactly on a start or an end.
            now = DAY0 + rng.uniform(-DAY_SECONDS, 50 * DAY_SECONDS)
            if rng.random() < 0.2:
                c = rng.choice(catalogue.campaigns)
                edge = rng.choice([c.start_at, c.end_at])
                now = parse_timestamp(edge) if edge else now
            spent = rng.sample(ids, rng.randrange(0, 20))
            spend = Spend(
                total={cid: rng.choice([0.0, 1.0, 4.99, 5.0, 49.0, 500.0]) for cid in spent}
                | {"not-in-the-catalogue": 3.0},
                today={cid: rng.choice([0.0, 1.9, 2.0, 25.0]) for cid in spent[::2]},
            )
            version = m.demand_version(now, spend)
            assert version == _reference(m, now, spend)
            seen.add(version)
        assert len(seen) > 10  # the instants and spends did move the demand
    finally:
        m.close()


@pytest.mark.parametrize("slack", [3600.0, 0.0])
def test_only_a_campaign_that_holds_unspent_is_held_back_with_nothing_spent(slack):
    rng = random.Random(7)
    catalogue = parse_catalogue(json.dumps({"campaigns": _campaigns(rng, 80)}))
    pacer = Pacer(catalogue.campaigns, slack=slack)
    held = 0
    for c in catalogue.campaigns:
        start, end = (parse_timestamp(x) if x else None for x in (c.start_at, c.end_at))
        lo = start if start is not None else DAY0
        hi = end if end is not None else lo + 30 * DAY_SECONDS
        # Instants of the flight, its first one and each midnight in it included.
        instants = [lo, *(rng.uniform(lo, hi) for _ in range(50))]
        instants += [t for t in np.arange(DAY0, hi, DAY_SECONDS) if lo <= t < hi]
        for now in instants:
            if pacer.gate(c, Spend(), float(now)) is not None:
                held += 1
                assert pacer.holds_unspent(c), (c.id, now)
    assert held  # zero budgets and caps are in the sample
