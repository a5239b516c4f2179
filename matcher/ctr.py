"""Per-ad click-through and conversion estimates, smoothed toward their parents.

Each ad's click-through rate (clicks per viewable impression) is a Beta posterior whose prior
is the pooled rate of its ad set, itself smoothed toward its campaign, itself toward the whole
catalogue (the catalogue has no category field, so the catalogue is the top of the tree).
Every level pools the evidence of the others ads below it, leaving the ad's own counts out
(leave-one-out), so an ad's clicks are not counted twice. The prior strength (pseudo
impressions) is estimated from the data by the method of moments over ads with enough
impressions, within ``[MIN_STRENGTH, MAX_STRENGTH]``; with too few such ads it is
``DEFAULT_STRENGTH``. A new ad starts at its parent's rate with the parent's confidence:
neither buried (a zero CTR) nor oversold (a lucky first click).

Conversion rate (conversions per click, for CPA ads) is smoothed the same way.

``CtrModel`` is immutable: the edge builds a new one from the durable counters at a bounded
interval and swaps it in, so the ranking reads memory only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from matcher.types import Placement

DEFAULT_CTR = 0.01  # the catalogue-wide prior mean before any evidence
DEFAULT_CVR = 0.1  # conversions per click before any evidence
DEFAULT_STRENGTH = 100.0  # pseudo impressions (or clicks, for conversions) of a prior
MIN_STRENGTH = 20.0
MAX_STRENGTH = 20000.0
MOMENTS_MIN_TRIALS = 200  # an ad needs this many trials to inform the prior strength
MOMENTS_MIN_ADS = 5


@dataclass(frozen=True, slots=True)
class AdStats:
    """Durable evidence of one ad: viewable impressions, valid clicks, conversions."""

    impressions: float = 0.0
    clicks: float = 0.0
    conversions: float = 0.0


@dataclass(frozen=True, slots=True)
class Rate:
    """A Beta posterior of one rate: the mean, its parameters and where the prior came from."""

    alpha: float
    beta: float
    successes: float
    trials: float
    prior_mean: float
    prior_strength: float

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)

    def as_dict(self) -> dict[str, float]:
        return {
            "mean": round(self.mean, 6),
            "alpha": round(self.alpha, 3),
            "beta": round(self.beta, 3),
            "successes": self.successes,
            "trials": self.trials,
            "prior_mean": round(self.prior_mean, 6),
            "prior_strength": round(self.prior_strength, 1),
        }


@dataclass(frozen=True, slots=True)
class Estimate:
    ad_id: str
    ctr: Rate  # clicks per viewable impression
    cvr: Rate  # conversions per click

    def as_dict(self) -> dict[str, object]:
        return {"ctr": self.ctr.as_dict(), "cvr": self.cvr.as_dict()}


def moments_strength(
    successes: Sequence[float], trials: Sequence[float], default: float = DEFAULT_STRENGTH
) -> float:
    """Prior strength ``a + b`` of a Beta fitted by the method of moments to per-ad rates.

    Only ads with at least ``MOMENTS_MIN_TRIALS`` trials inform it; the binomial noise of
    each ad's rate is taken out of the spread, so what is left is the true spread between
    ads. A small true spread means a strong prior (ads are alike), a wide one a weak prior.
    """
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    keep = n >= MOMENTS_MIN_TRIALS
    if int(keep.sum()) < MOMENTS_MIN_ADS:
        return default
    s, n = s[keep], n[keep]
    rates = s / n
    mean = float(s.sum() / n.sum())
    if not 0.0 < mean < 1.0:
        return default
    noise = float(np.mean(mean * (1 - mean) / n))
    between = float(rates.var()) - noise
    if between <= 0:
        return MAX_STRENGTH
    strength = mean * (1 - mean) / between - 1
    return float(min(max(strength, MIN_STRENGTH), MAX_STRENGTH))


class _Pool:
    """Summed successes and trials per key (campaign, ad set, or everything)."""

    def __init__(self) -> None:
        self.succ: dict[str, float] = {}
        self.trials: dict[str, float] = {}

    def add(self, key: str, s: float, n: float) -> None:
        self.succ[key] = self.succ.get(key, 0.0) + s
        self.trials[key] = self.trials.get(key, 0.0) + n

    def without(self, key: str, s: float, n: float) -> tuple[float, float]:
        return self.succ.get(key, 0.0) - s, self.trials.get(key, 0.0) - n


def _bare(mean: float) -> Rate:
    m = DEFAULT_STRENGTH
    return Rate(m * mean, m * (1 - mean), 0.0, 0.0, mean, m)


def _smoothed(s: float, n: float, prior_mean: float, strength: float) -> float:
    return (max(s, 0.0) + strength * prior_mean) / (max(n, 0.0) + strength)


@dataclass(frozen=True, slots=True)
class _RateColumns:
    """One Beta posterior per placement, as columns (a ``Rate`` is made on demand)."""

    alpha: np.ndarray
    beta: np.ndarray
    successes: np.ndarray
    trials: np.ndarray
    prior_mean: np.ndarray
    strength: float

    def rate(self, i: int) -> Rate:
        return Rate(
            alpha=float(self.alpha[i]),
            beta=float(self.beta[i]),
            successes=float(self.successes[i]),
            trials=float(self.trials[i]),
            prior_mean=float(self.prior_mean[i]),
            prior_strength=self.strength,
        )


def _rates(
    placements: Sequence[Placement],
    evidence: Sequence[tuple[float, float]],
    default_mean: float,
) -> _RateColumns:
    """One posterior per placement from (successes, trials) pairs in the same order."""
    strength = moments_strength([e[0] for e in evidence], [e[1] for e in evidence])
    pool = _Pool()
    for p, (s, n) in zip(placements, evidence, strict=True):
        pool.add("*", s, n)
        pool.add("c:" + p.campaign.id, s, n)
        pool.add("s:" + p.campaign.id + "/" + p.ad_set.id, s, n)
    prior = np.empty(len(placements), dtype=np.float64)
    for i, (p, (s, n)) in enumerate(zip(placements, evidence, strict=True)):
        top = _smoothed(*pool.without("*", s, n), default_mean, strength)
        camp = _smoothed(*pool.without("c:" + p.campaign.id, s, n), top, strength)
        set_key = "s:" + p.campaign.id + "/" + p.ad_set.id
        prior[i] = _smoothed(*pool.without(set_key, s, n), camp, strength)
    succ = np.array([e[0] for e in evidence], dtype=np.float64)
    trials = np.array([e[1] for e in evidence], dtype=np.float64)
    n_ok = np.maximum(trials, 0.0)
    s_ok = np.minimum(np.maximum(succ, 0.0), n_ok)
    return _RateColumns(
        alpha=strength * prior + s_ok,
        beta=strength * (1 - prior) + n_ok - s_ok,
        successes=succ,
        trials=trials,
        prior_mean=prior,
        strength=strength,
    )


class CtrModel:
    """Posterior CTR and CVR of every ad of one catalogue, from one snapshot of evidence.

    Held as float columns and one row per ad id (not three objects per ad: ~36 MiB at 100k
    ads); ``estimate`` builds the ``Estimate`` of one ad when asked.
    """

    def __init__(
        self,
        placements: Sequence[Placement],
        stats: Mapping[str, AdStats] | None = None,
        *,
        as_of: float | None = None,
    ) -> None:
        stats = stats or {}
        self.as_of = as_of  # epoch seconds of the evidence (None: no evidence read yet)
        ev = [stats.get(p.ad.id, AdStats()) for p in placements]
        self._ctr = _rates(placements, [(e.clicks, e.impressions) for e in ev], DEFAULT_CTR)
        self._cvr = _rates(placements, [(e.conversions, e.clicks) for e in ev], DEFAULT_CVR)
        self._row = {p.ad.id: i for i, p in enumerate(placements)}

    def estimate(self, ad_id: str) -> Estimate:
        i = self._row.get(ad_id)
        if i is None:  # not in this catalogue: the bare prior
            return Estimate(ad_id, _bare(DEFAULT_CTR), _bare(DEFAULT_CVR))
        return Estimate(ad_id, self._ctr.rate(i), self._cvr.rate(i))

    def ad_ids(self) -> Iterable[str]:
        return self._row.keys()


def stats_from_counters(rows: Iterable[tuple[str, str, str, float]]) -> dict[str, AdStats]:
    """``AdStats`` per ad from durable report counter rows ``(scope, id, counter, amount)``."""
    acc: dict[str, dict[str, float]] = {}
    for scope, ad_id, counter, amount in rows:
        if scope == "ad" and counter in ("viewable_impressions", "clicks", "conversions"):
            acc.setdefault(ad_id, {})[counter] = amount
    return {
        ad_id: AdStats(
            impressions=c.get("viewable_impressions", 0.0),
            clicks=c.get("clicks", 0.0),
            conversions=c.get("conversions", 0.0),
        )
        for ad_id, c in acc.items()
    }
