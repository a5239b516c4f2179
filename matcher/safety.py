"""Brand safety: a lexicon plus an embedding classifier. Content about news or tragedy gets
no ad, whatever the demand.

Two layers, either one blocks:

1. A lexicon of high-precision cues ("death toll", "mass shooting", "passed away"): phrases
   that are news or grief in nearly every use. Single violent-sounding words ("kill",
   "shoot", "dying") are deliberately absent, because ordinary posts use them for albums,
   photos and laughter.
2. Logistic regression on the same MiniLM vector the matcher already computed for relevance
   (no second forward pass). Its weights are trained by ``matcher.safety_train`` from the
   labelled set in ``tests/data/safety_labelled.jsonl`` and shipped as
   ``data/safety_model.json`` together with the hash of the training rows, so a test catches
   weights that no longer match the labelled set.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import orjson

MODEL_FILE = "safety_model.json"

_LEXICON = [
    r"death toll",
    r"(?:were|been|people|persons?|dozens|hundreds|thousands|\d+) (?:killed|dead|injured|wounded)",
    r"found dead|(?:died|killed) in (?:a|an|the) (?:crash|fire|attack|shooting|blast|explosion)",
    r"killed in (?:a|an|the)",
    r"mass shooting",
    r"gunman|gunmen|shooter opened fire|opened fire on",
    r"shot (?:dead|and killed)|fatally (?:shot|stabbed|injured|wounded)|stabbed to death",
    r"passed away|rest in peace|\brip\b|funeral|obituar(?:y|ies)|laid to rest|in memoriam",
    r"terror(?:ist)? attack|suicide bomb|car bomb|airstrikes?|missile strikes?|shelling",
    r"hostages?|massacre (?:of|in|at)|massacred|genocide|war crimes?|refugees? fleeing|ceasefire",
    # Disaster words alone also name preparedness ("hurricane season kit"): only in news use.
    r"(?:earthquake|tsunami|hurricane|tornado(?:es)?|wildfires?|flood(?:s|ing|waters)?|storm|"
    r"blizzard|landslide|eruption) (?:hit|hits|struck|strikes|tore|killed|kills|destroyed|"
    r"swept|forced|made landfall|leveled|flattened|victims|death)|magnitude \d|"
    r"tsunami warning|flash flood(?:ing)?|evacuation orders?|state of emergency",
    r"plane crash|train derail|derailed|(?:fatal|deadly) (?:crash|collision|fire|accident|blast)",
    r"breaking news|\bbreaking:|developing story|press conference|authorities said|police said",
    r"indicted|arrested (?:for|on|after)|charged with (?:murder|assault|manslaughter)|"
    r"manslaughter|homicide|murder(?:ed)? (?:of|in|by)",
    r"election (?:results|fraud|night)|impeach|senate vote|polls? (?:show|closed)|ballots?",
    r"stock market (?:crash|plunge)|markets? (?:plunged|tumbled|crashed|sell-?off)|recession fears",
    r"overdose|suicide|took (?:his|her|their) own life",
    r"diagnosed with terminal|lost (?:my|our|his|her) (?:battle|fight) with|miscarriage",
]
LEXICON = re.compile(r"\b(?:" + "|".join(_LEXICON) + r")", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SafetyVerdict:
    safe: bool
    probability: float  # the classifier's P(unsafe)
    lexicon_hit: str | None  # the cue that matched, if any

    def as_dict(self) -> dict[str, Any]:
        return {
            "safe": self.safe,
            "p_unsafe": round(self.probability, 4),
            "lexicon": self.lexicon_hit,
        }


class SafetyClassifier:
    """``check(text, vector)``: unsafe when the lexicon fires or P(unsafe) >= threshold."""

    def __init__(self, weights: np.ndarray | None, bias: float = 0.0, threshold: float = 1.0):
        """``weights`` None: the lexicon alone (a fallback for tests and tools)."""
        self.weights = None if weights is None else np.ascontiguousarray(weights, np.float32)
        self.bias = float(bias)
        self.threshold = float(threshold)

    @classmethod
    def load(cls, data: dict[str, Any] | None = None) -> SafetyClassifier:
        """The shipped model (``data/safety_model.json``), or one from a parsed dict."""
        if data is None:
            raw = resources.files("matcher.data").joinpath(MODEL_FILE).read_bytes()
            data = orjson.loads(raw)
        return cls(np.array(data["weights"], dtype=np.float32), data["bias"], data["threshold"])

    def probability(self, vector: np.ndarray) -> float:
        if self.weights is None:
            return 0.0
        z = float(vector @ self.weights) + self.bias
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def check(self, text: str, vector: np.ndarray) -> SafetyVerdict:
        hit = LEXICON.search(text)
        p = self.probability(vector)
        return SafetyVerdict(
            safe=hit is None and p < self.threshold,
            probability=p,
            lexicon_hit=hit.group(0).lower() if hit else None,
        )
