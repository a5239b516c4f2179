"""Calibrated relevance and the order of the ads shown (SPEC 4.2: ordered by relevance).

``relevancy_score`` maps the MiniLM cosine to 0..1 with a logistic curve fitted on the
labelled relevance set (``tests/data/relevance_cases.json``): cosine ``CAL_MID`` is 0.5 and
every ``CAL_SCALE`` above it multiplies the odds by e. The relevance floor is a relevancy
(0.5 by default), so it reads the same whatever the model.

The order is by ``rank_score = relevancy + BID_WEIGHT * bid_share``, where ``bid_share =
ecpm / (ecpm + median_ecpm)`` is in (0, 1) and 0.5 for a median bid. With ``BID_WEIGHT``
0.03 the bid moves an ad past another only when their relevancies are within 0.03: the bid
breaks near-ties and never buys its way past a clearly more relevant ad. eCPM puts the three
pricing models on one scale with fixed, documented rates (CPC x 1% CTR, CPA x 0.1%
conversion), since the edge has no per-ad history at cold start.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matcher.types import Placement, ScoredAd

CAL_MID = 0.27
CAL_SCALE = 0.045
BID_WEIGHT = 0.03
ASSUMED_CTR = 0.01
ASSUMED_CVR = 0.001


def calibrate(cosine: float) -> float:
    """The 0..1 ``relevancy_score`` of a cosine."""
    return 1.0 / (1.0 + math.exp(-(cosine - CAL_MID) / CAL_SCALE))


def cosine_for(relevancy: float) -> float:
    """The inverse of ``calibrate``: the cosine with this relevancy."""
    relevancy = min(max(relevancy, 1e-9), 1 - 1e-9)
    return CAL_MID + CAL_SCALE * math.log(relevancy / (1 - relevancy))


def ecpm(p: Placement) -> float:
    pm = p.ad_set.pricing_model
    if pm.type == "cpm":
        return pm.bid_amount
    rate = ASSUMED_CTR if pm.type == "cpc" else ASSUMED_CVR
    return pm.bid_amount * 1000 * rate


class Ranker:
    def __init__(self, placements: Sequence[Placement], floor: float) -> None:
        self.floor = floor
        self.cosine_floor = cosine_for(floor)
        bids = sorted(ecpm(p) for p in placements)
        self.median_ecpm = bids[len(bids) // 2] if bids else 1.0

    def relevancy(self, cosine: float) -> float:
        return calibrate(cosine)

    def bid_share(self, p: Placement) -> float:
        e = ecpm(p)
        return e / (e + self.median_ecpm) if e > 0 else 0.0

    def rank_score(self, relevancy: float, p: Placement) -> float:
        return relevancy + BID_WEIGHT * self.bid_share(p)

    def order(self, ads: list[ScoredAd], one_per_campaign: bool) -> list[ScoredAd]:
        ads = sorted(ads, key=lambda s: (-s.rank_score, s.placement.ad.id))
        if not one_per_campaign:
            return ads
        seen: set[str] = set()
        out = []
        for s in ads:
            if s.placement.campaign.id not in seen:
                seen.add(s.placement.campaign.id)
                out.append(s)
        return out
