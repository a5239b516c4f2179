"""Calibrated relevance and the order of the ads shown: relevance first, then learned eCPM.

``relevancy_score`` maps the MiniLM cosine to 0..1 with a logistic curve fitted on the
labelled relevance set (``tests/data/relevance_cases.json``): cosine ``CAL_MID`` is 0.5 and
every ``CAL_SCALE`` above it multiplies the odds by e. The relevance floor is a relevancy
(0.5 by default), so it reads the same whatever the model.

The order is relevance-bounded eCPM. The ads within ``RELEVANCE_BAND`` (0.03) of the most
relevant eligible ad's relevancy, and within ``COSINE_BAND`` (0.05) of its cosine, form the
top band; inside it the higher eCPM comes first, and every ad of the band comes before any
ad outside it; outside the band the order is by relevancy. So a clearly more relevant ad is
never beaten by money, and among ads of similar relevance the expected revenue decides.
The cosine bound matters near the top of the scale, where relevancy saturates: without it,
every ad from a 0.43 cosine up would sit in the band of a 0.7-cosine ad (all within 0.03
relevancy of it), and an ad about a thermostat would outbid one about budgeting for a post
about budgeting.

eCPM puts the pricing models on one scale: CPM bid; CPC bid x 1000 x pCTR; CPA bid x 1000
x pCTR x pCVR, with pCTR and pCVR the ad's smoothed estimates (``matcher.ctr``). When
exploring, each request draws pCTR and pCVR from their Beta posteriors (Thompson sampling)
instead of using the means, so an ad with little evidence still wins its share of requests
in proportion to the chance that it is the best.

An ad past the first is given only within ``GIVEN_COSINE`` (0.15) of the most relevant
eligible ad's cosine: the relevance floor alone let any ad just above it fill the second and
third places (cat litter at cosine 0.295 under a puppy-training post whose first ad was at
0.544). The first ad is always in the top band, so it is never cut.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from matcher.ctr import CtrModel
from matcher.types import Placement, ScoredAd

CAL_MID = 0.27
CAL_SCALE = 0.045
RELEVANCE_BAND = 0.03
COSINE_BAND = 0.05
GIVEN_COSINE = 0.15


def calibrate(cosine: float) -> float:
    """The 0..1 ``relevancy_score`` of a cosine."""
    return 1.0 / (1.0 + math.exp(-(cosine - CAL_MID) / CAL_SCALE))


def cosine_for(relevancy: float) -> float:
    """The inverse of ``calibrate``: the cosine with this relevancy."""
    relevancy = min(max(relevancy, 1e-9), 1 - 1e-9)
    return CAL_MID + CAL_SCALE * math.log(relevancy / (1 - relevancy))


def band_floor(top: float) -> float:
    """The lowest relevancy in the top band whose most relevant ad has relevancy ``top``."""
    return max(top - RELEVANCE_BAND, calibrate(cosine_for(top) - COSINE_BAND))


def given_floor(top: float) -> float:
    """The lowest relevancy given out when the most relevant ad has relevancy ``top``."""
    return calibrate(cosine_for(top) - GIVEN_COSINE)


def ecpm(p: Placement, estimates: CtrModel, rng: np.random.Generator | None = None) -> float:
    """Expected revenue per 1,000 impressions; drawn from the posteriors when ``rng`` is set.
    A CPM bid is its own eCPM: the ad's estimate is built only for CPC and CPA (a dense band
    scores hundreds of ads)."""
    pm = p.ad_set.pricing_model
    if pm.type == "cpm":
        return pm.bid_amount
    est = estimates.estimate(p.ad.id)
    ctr = est.ctr.mean if rng is None else float(rng.beta(est.ctr.alpha, est.ctr.beta))
    if pm.type == "cpc":
        return pm.bid_amount * 1000 * ctr
    cvr = est.cvr.mean if rng is None else float(rng.beta(est.cvr.alpha, est.cvr.beta))
    return pm.bid_amount * 1000 * ctr * cvr


class Ranker:
    def __init__(self, placements: Sequence[Placement], floor: float) -> None:
        self.floor = floor
        self.cosine_floor = cosine_for(floor)
        self.estimates = CtrModel(placements)

    def relevancy(self, cosine: float) -> float:
        return calibrate(cosine)

    def score(self, p: Placement, relevancy: float, rng: np.random.Generator | None) -> ScoredAd:
        """The ad with its eCPM (drawn when exploring); the rank score is set by ``order``."""
        return ScoredAd(p, relevancy, relevancy, ecpm(p, self.estimates, rng))

    def order(
        self, ads: list[ScoredAd], one_per_campaign: bool, limit: int | None = None
    ) -> list[ScoredAd]:
        """Best first: the top band by eCPM, then the rest by relevancy down to
        ``GIVEN_COSINE`` below the most relevant ad; the first ``limit`` of them (None: all).

        ``rank_score`` is ``1 + ecpm / (ecpm + best_ecpm)`` inside the band (so above 1) and
        the relevancy outside it, which is exactly the order. A dense catalogue can put
        hundreds of ads in the band, so the order is taken on the scores first and only the
        ads given out are copied with theirs.
        """
        if not ads:
            return []
        top = max(s.relevancy_score for s in ads)
        band = band_floor(top)
        given = given_floor(top)
        best = max((s.ecpm for s in ads if s.relevancy_score >= band), default=0)
        ranks = [
            _band_score(s.ecpm, best) if s.relevancy_score >= band else s.relevancy_score
            for s in ads
        ]
        order = sorted(
            range(len(ads)),
            key=lambda i: (-ranks[i], -ads[i].relevancy_score, ads[i].placement.ad.id),
        )
        seen: set[str] = set()
        out: list[ScoredAd] = []
        for i in order:
            if limit is not None and len(out) == limit:
                break
            campaign = ads[i].placement.campaign.id
            if (one_per_campaign and campaign in seen) or ads[i].relevancy_score < given:
                continue
            seen.add(campaign)
            out.append(replace(ads[i], rank_score=ranks[i]))
        return out


def _band_score(value: float, best: float) -> float:
    return 1.0 + (value / (value + best) if value > 0 else 0.0)
