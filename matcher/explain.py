"""The explanation of one decision: which gate removed which ad, with the scores.

Built only when ``MatchRequest.explain`` is set (tests, the sandbox's explain output,
operators); otherwise every method returns at once, so the hot path pays nothing.

Shape::

    {"outcome": "matched", "reason": "", "safety": [{"part", "safe", "class", "sentence",
                                                     "p_unsafe", "lexicon", "second_pass",
                                                     "sentence_alone", "self_harm_read",
                                                     "evidence", "scores"}],
     "safety_thresholds": {name: threshold},
     "location": {...} | null, "floor": {"relevancy", "cosine"},
     "ads": [{"ad_id", "campaign_id", "cosine", "relevancy", "gate", "detail"}],
     "ranked": [{"ad_id", "relevancy", "rank_score", "ecpm", "pricing", "estimate"}],
     "ranking": {"band", "band_floor", "given_floor", "estimates_as_of"}}

``safety`` has one verdict per text judged (``part``: content, or an AI turn's prompt and
answer): ``second_pass`` when its sentences were also encoded alone, ``sentence_alone`` when
the sentence that blocked was one of those, ``self_harm_read`` False for an answer whose
prompt shows no self-harm evidence (its self-harm scores are listed but did not count),
``evidence`` what blocked it (``matcher.safety.EVIDENCE``; null when safe).
``safety_thresholds`` are the model's: a text is blocked when a lexicon phrase matches, or
when, on the whole text or one of its sentences, a class's probability reaches that class's
threshold, P(any unsafe class) reaches ``unsafe``, or the self-harm nearest-neighbour
margin (``scores.self_harm_knn``: 0.5 is as near to known self-harm wordings as to safe
ones) reaches ``self_harm_knn``; ``suspect_self_harm`` and ``suspect_knn`` are the levels at
which a text's sentences are also judged alone (``second_pass``).

``band`` is the top band's width (``relevancy`` and ``cosine``) and ``band_floor`` the lowest
relevancy inside it for this request (null when no ad passed the gates): the ads at or above
it are ordered by eCPM. ``given_floor`` is the lowest relevancy given out (a relevancy, as
``band_floor``): an ad past the first is given only within 0.15 of cosine of the most
relevant eligible ad (``ranking.GIVEN_COSINE``).

``estimate`` is the ad's smoothed click-through and conversion rates with their evidence
(``successes`` of ``trials``: clicks of viewable impressions, conversions of clicks) and the
prior they were smoothed toward; ``ecpm`` is the value this request ranked with (a draw from
the posterior when exploring).

``gate`` is null for an ad that was shown or could have been; otherwise one of
``product_not_ugc|ai``, ``status_paused|archived``, ``not_started``, ``expired``,
``below_floor``, ``geo``, ``disabled_in_thread``, ``frequency_capped``, ``budget_exhausted``,
``daily_cap_reached``, ``pacing_ahead``, ``not_examined`` (past the candidate limit),
``ranked_out`` (a better ad of the same
campaign, or past ``max_ads``), ``below_given_floor`` (past the first, too far below the most
relevant ad).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from matcher.ctr import CtrModel
from matcher.geo import Location
from matcher.ranking import (
    COSINE_BAND,
    RELEVANCE_BAND,
    band_floor,
    calibrate,
    cosine_for,
    given_floor,
)
from matcher.safety import SafetyVerdict
from matcher.types import MatchResult, Placement, ScoredAd

MAX_LISTED = 200  # large catalogues list only the ads nearest the query


class Explainer:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.doc: dict[str, Any] = {"safety": [], "location": None, "ads": [], "ranked": []}
        self._ads: dict[str, dict[str, Any]] = {}

    def safety(
        self, verdicts: Sequence[SafetyVerdict], thresholds: Mapping[str, float] | None = None
    ) -> None:
        if self.enabled:
            self.doc["safety"] = [v.as_dict() for v in verdicts]
            if thresholds is not None:
                self.doc["safety_thresholds"] = {k: round(v, 4) for k, v in thresholds.items()}

    def location(self, loc: Location | None) -> None:
        if self.enabled:
            self.doc["location"] = loc.as_dict() if loc else None

    def static_gates(
        self,
        placements: Sequence[Placement],
        cosines: np.ndarray,
        product: str,
        now: float,
        gate_of: Callable[[Placement, str, float], str | None],
        floor: float = 0.5,
    ) -> None:
        order = np.argsort(-cosines, kind="stable")[:MAX_LISTED]
        for row in order:
            p = placements[row]
            cos = float(cosines[row])
            gate = gate_of(p, product, now)
            if gate is None:
                gate = "below_floor" if calibrate(cos) < floor else "not_examined"
            self._entry(p, cos, gate)
        self.doc["floor"] = {"relevancy": floor, "cosine": round(cosine_for(floor), 4)}

    def gate(
        self, p: Placement, cosine: float, gate: str | None, detail: str | None = None
    ) -> None:
        if self.enabled:
            self._entry(p, float(cosine), gate or "ranked_out", detail)

    def _entry(
        self, p: Placement, cosine: float, gate: str | None, detail: str | None = None
    ) -> None:
        self._ads[p.ad.id] = {
            "ad_id": p.ad.id,
            "campaign_id": p.campaign.id,
            "cosine": round(cosine, 4),
            "relevancy": round(calibrate(cosine), 4),
            "gate": gate,
            "detail": detail,
        }

    def ranked(
        self, ads: Sequence[ScoredAd], candidates: Sequence[ScoredAd], estimates: CtrModel
    ) -> None:
        """``ads`` as given out, from ``candidates`` (every ad that passed the gates)."""
        if not self.enabled:
            return
        top = max((s.relevancy_score for s in candidates), default=None)
        self.doc["ranking"] = {
            "band": {"relevancy": RELEVANCE_BAND, "cosine": COSINE_BAND},
            "band_floor": None if top is None else round(band_floor(top), 4),
            "given_floor": None if top is None else round(given_floor(top), 4),
            "estimates_as_of": estimates.as_of,
        }
        for s in ads:
            if s.placement.ad.id in self._ads:
                self._ads[s.placement.ad.id]["gate"] = None
        if top is not None:
            given = given_floor(top)
            for entry in self._ads.values():
                if entry["gate"] == "ranked_out" and calibrate(entry["cosine"]) < given:
                    entry["gate"] = "below_given_floor"
        self.doc["ranked"] = [
            {
                "ad_id": s.placement.ad.id,
                "relevancy": round(s.relevancy_score, 4),
                "rank_score": round(s.rank_score, 4),
                "ecpm": round(s.ecpm, 4),
                "pricing": s.placement.ad_set.pricing_model.type,
                "estimate": estimates.estimate(s.placement.ad.id).as_dict(),
            }
            for s in ads
        ]

    def result(self, result: MatchResult) -> MatchResult:
        if not self.enabled:
            return result
        doc = dict(self.doc, outcome=result.outcome, reason=result.reason)
        doc["ads"] = sorted(self._ads.values(), key=lambda a: -a["cosine"])
        return replace(result, explanation=doc)
