"""The matcher's public data: the catalogue model, a match request and its result.

These are the contract between ``matcher`` and its callers (``edge``'s /v1 and /dea routes,
the sandbox, the CLI). Field names of the catalogue follow the file format
(docs/catalogue.md) exactly, so ``as_dict()`` gives back the file's shape (the Ad Manager
routes serve it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

ProductName = Literal["ugc", "ai"]
Outcome = Literal["matched", "empty", "no_match"]


# -- catalogue --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PixelTracker:
    vendor: str
    tracker_type: str
    url: str


@dataclass(frozen=True, slots=True)
class PricingModel:
    type: Literal["cpc", "cpm", "cpa"]
    bid_amount: float


@dataclass(frozen=True, slots=True)
class CityTarget:
    city: str
    state: str  # ISO 3166-2, "US-TX"


@dataclass(frozen=True, slots=True)
class RadiusTarget:
    lat: float
    lon: float
    km: float


@dataclass(frozen=True, slots=True)
class GeoTargets:
    countries: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    dmas: tuple[str, ...] = ()
    cities: tuple[CityTarget, ...] = ()
    zipcodes: tuple[str, ...] = ()
    radius: tuple[RadiusTarget, ...] = ()


@dataclass(frozen=True, slots=True)
class Ad:
    id: str
    title: str
    cta: str
    description: str
    keywords: tuple[str, ...]
    click_through_url: str
    ttl_seconds: int
    pixel_trackers: tuple[PixelTracker, ...] = ()


@dataclass(frozen=True, slots=True)
class AdSet:
    id: str
    products: tuple[ProductName, ...]
    pricing_model: PricingModel
    ads: tuple[Ad, ...]
    geo: GeoTargets | None = None  # None: all of the US


@dataclass(frozen=True, slots=True)
class Campaign:
    id: str
    advertiser_name: str
    status: Literal["active", "paused", "archived"]
    start_at: str | None  # RFC 3339, as in the file
    end_at: str | None
    budget_usd: float | None  # None: no budget cap
    ad_sets: tuple[AdSet, ...]
    pacing: Literal["even", "asap"] = "even"  # spread spend over the flight, or serve at once
    daily_cap_usd: float | None = None  # most USD billed per UTC day; None: no daily cap

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Placement:
    """One servable ad with the campaign and ad set it belongs to."""

    ad: Ad
    ad_set: AdSet
    campaign: Campaign


# -- a match ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GeoSignal:
    """What is known of the user's location; any field may be missing.

    ``state`` is ISO 3166-2 (``US-CA``) or a bare code (``CA``); the matcher resolves the
    richest usable signal and ignores a lone lat or lon.
    """

    lat: float | None = None
    lon: float | None = None
    zipcode: str | None = None
    city: str | None = None
    state: str | None = None
    dma: str | None = None
    country: str | None = None


@dataclass(frozen=True, slots=True)
class MatchRequest:
    product: ProductName
    content: str
    prompt: str | None = None  # AI: the user's prompt that produced ``content``
    thread_id: str | None = None  # suppression and frequency scope (post, conversation, page)
    post_id: str | None = None  # no-match backoff key (UGC)
    # The no-match window's key when it is not ``post_id``: the tag's window is its post's
    # and text's, since anyone can send any text under a post id read from the page.
    window_id: str | None = None
    # AI: the assistant message id. The frequency cap counts an ad once per unit (post_id,
    # else turn_id): refreshes of one post never use up the cap; requests with neither
    # (page-level slots) are not counted.
    turn_id: str | None = None
    geo: GeoSignal | None = None
    created_at: float | None = None  # epoch seconds of the source post, when known
    max_ads: int = 3
    explain: bool = False


@dataclass(frozen=True, slots=True)
class ScoredAd:
    placement: Placement
    relevancy_score: float  # calibrated 0..1
    rank_score: float  # what the order is by (relevance first, then eCPM in the top band)
    ecpm: float = 0.0  # expected USD per 1,000 impressions used for this request


@dataclass(frozen=True, slots=True)
class MatchResult:
    outcome: Outcome
    ads: tuple[ScoredAd, ...] = ()
    retry_after_seconds: int | None = None  # set when outcome is "no_match"
    reason: str = ""  # machine-readable: "unsafe", "no_relevant_demand", "backoff", ...
    explanation: dict[str, Any] | None = field(default=None, compare=False)
    # With reason "unsafe": the brand-safety class that blocked it ("self_harm", "news", ...),
    # and what blocked it (``matcher.safety.EVIDENCE``: "lexicon", "model", "margin" or
    # "margin_short").
    unsafe_category: str | None = None
    unsafe_evidence: str | None = None
