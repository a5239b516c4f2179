"""Measurement helpers for ``make bench`` (bench/ calls these; nothing here runs in serving).

- ``synthetic_matcher(n_ads)``: a Matcher over a generated catalogue of ``n_ads`` ads whose
  vectors are derived from the sandbox ads' real vectors plus noise, so the search has real
  structure (some ads relevant, most not) without embedding 100k texts.
- ``forward_pass_ms(embedder, text)``: the embedding forward pass alone, the latency floor
  of any match that has to embed its text.
- ``match_ms(matcher, text)``: one whole ``Matcher.decide`` (embed, safety, search, gates,
  ranking), the number to compare with that floor.

Both time the uncached model: a cache hit would measure nothing but a dict lookup.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from matcher.catalogue import Catalogue, load_catalogue
from matcher.embeddings import CachedEmbedder, Embedder, MiniLM, normalise
from matcher.engine import Matcher
from matcher.geo import Gazetteer
from matcher.index import ad_text
from matcher.safety import SafetyClassifier
from matcher.state import ThreadState
from matcher.types import (
    Ad,
    AdSet,
    Campaign,
    GeoTargets,
    MatchRequest,
    PixelTracker,
    PricingModel,
    ProductName,
)

POST_40_WORDS = (
    "Training for my first marathon this spring and my knees ache after every long run. "
    "I've been doing three easy runs and one long run each week, but my old shoes feel flat. "
    "Any advice on cushioning or pacing before race day?"
)
_STATES = ("US-CA", "US-TX", "US-NY", "US-WA", "US-IL", "US-FL", "US-CO", "US-MA")


def synthetic_catalogue(n_ads: int, *, ads_per_set: int = 5, seed: int = 0) -> Catalogue:
    """``n_ads`` ads in campaigns of one ad set each; a fifth of the sets are geo-targeted."""
    rng = np.random.default_rng(seed)
    campaigns = []
    for c in range(0, n_ads, ads_per_set):
        ads = tuple(
            Ad(
                id=f"syn-{i}",
                title=f"Synthetic ad {i}",
                cta="Shop now",
                description="A generated ad for benchmarks.",
                keywords=(),
                click_through_url=f"https://syn.example/{i}",
                ttl_seconds=900,
                pixel_trackers=(PixelTracker("acme", "impression", f"https://px.example/{i}"),),
            )
            for i in range(c, min(c + ads_per_set, n_ads))
        )
        geo = (
            GeoTargets(states=(_STATES[c % len(_STATES)],)) if (c // ads_per_set) % 5 == 0 else None
        )
        pricing = PricingModel(type="cpc", bid_amount=round(float(rng.uniform(0.2, 3.0)), 2))
        ad_set = AdSet(
            id=f"syn-as-{c}", products=("ugc", "ai"), pricing_model=pricing, ads=ads, geo=geo
        )
        campaigns.append(
            Campaign(
                id=f"syn-c-{c}",
                advertiser_name=f"Advertiser {c}",
                status="active",
                start_at=None,
                end_at=None,
                budget_usd=None,
                ad_sets=(ad_set,),
            )
        )
    return Catalogue(campaigns)


def synthetic_vectors(
    n_ads: int, embedder: Embedder, *, noise: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Rows near the sandbox ads' real vectors (each a noisy copy of one), unit length."""
    base_cat = load_catalogue()
    base = embedder.embed([ad_text(p.ad) for p in base_cat.placements])
    rng = np.random.default_rng(seed)
    out = np.empty((n_ads, embedder.dim), dtype=np.float32)
    step = 8192  # bounded temporaries at 100k x 384
    for start in range(0, n_ads, step):
        rows = np.arange(start, min(start + step, n_ads))
        jitter = rng.standard_normal((len(rows), embedder.dim)).astype(np.float32)
        jitter *= noise / np.sqrt(embedder.dim)
        out[rows] = normalise(base[rows % len(base)] + jitter)
    return out


def synthetic_matcher(
    n_ads: int, embedder: Embedder | None = None, *, threads: int = 1, seed: int = 0
) -> Matcher:
    """A full Matcher (geo, safety) over ``n_ads`` synthetic ads, built without embedding them."""
    embedder = embedder or MiniLM(threads=threads)
    catalogue = synthetic_catalogue(n_ads, seed=seed)
    vectors = synthetic_vectors(n_ads, embedder, seed=seed)
    return Matcher(
        catalogue,
        embedder,
        vectors,
        gazetteer=Gazetteer(),
        safety=SafetyClassifier.load(),
    )


def _timed(fn: Callable[[], object], runs: int, warmup: int = 3) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    arr = np.array(samples)
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "mean_ms": float(arr.mean()),
        "runs": runs,
    }


def _uncached(embedder: Embedder) -> Embedder:
    return embedder.inner if isinstance(embedder, CachedEmbedder) else embedder


def forward_pass_ms(
    embedder: Embedder, text: str = POST_40_WORDS, runs: int = 50
) -> dict[str, float]:
    """Latency of embedding ``text`` once (tokenise + forward + pool), with its token count."""
    model = _uncached(embedder)
    stats = _timed(lambda: model.embed([text]), runs)
    if isinstance(model, MiniLM):  # the one embedder with a tokenizer to count
        stats["tokens"] = len(model.token_ids(text))
    return stats


def match_ms(
    matcher: Matcher, text: str = POST_40_WORDS, runs: int = 50, product: ProductName = "ugc"
) -> dict[str, float]:
    """Latency of one whole ``Matcher.decide`` on ``text`` (uncached model, no store I/O)."""
    cached, matcher.embedder = matcher.embedder, _uncached(matcher.embedder)
    try:
        request = MatchRequest(product=product, content=text)
        state = ThreadState()
        now = time.time()
        return _timed(lambda: matcher.decide(request, state, now, {}), runs)
    finally:
        matcher.embedder = cached
