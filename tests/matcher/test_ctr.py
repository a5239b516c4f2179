"""Click-through estimates: smoothing toward the parents, exploration, relevance-bounded eCPM."""

from __future__ import annotations

import json

import numpy as np
import pytest

from matcher.catalogue import parse_catalogue
from matcher.ctr import (
    DEFAULT_CTR,
    DEFAULT_STRENGTH,
    AdStats,
    CtrModel,
    moments_strength,
    stats_from_counters,
)
from matcher.ranking import COSINE_BAND, RELEVANCE_BAND, Ranker, band_floor, calibrate


def ad(ad_id):
    return {
        "id": ad_id,
        "title": "T",
        "cta": "Go",
        "description": "D",
        "click_through_url": "https://example.com/",
        "ttl_seconds": 60,
    }


def catalogue(sets):
    """sets: {campaign_id: {ad_set_id: (pricing, bid, [ad ids])}}"""
    campaigns = []
    for cid, ad_sets in sets.items():
        campaigns.append(
            {
                "id": cid,
                "advertiser_name": cid,
                "status": "active",
                "ad_sets": [
                    {
                        "id": sid,
                        "products": ["ugc"],
                        "pricing_model": {"type": pricing, "bid_amount": bid},
                        "ads": [ad(a) for a in ads],
                    }
                    for sid, (pricing, bid, ads) in ad_sets.items()
                ],
            }
        )
    return parse_catalogue(json.dumps({"campaigns": campaigns}))


def test_an_ad_alone_with_no_evidence_starts_at_the_default_prior():
    cat = catalogue({"c": {"s": ("cpc", 1, ["a"])}})
    est = CtrModel(cat.placements).estimate("a")
    assert est.ctr.mean == pytest.approx(DEFAULT_CTR)
    assert est.ctr.alpha + est.ctr.beta == pytest.approx(DEFAULT_STRENGTH)


def test_a_new_ad_starts_at_its_ad_sets_rate_not_at_zero():
    cat = catalogue(
        {"c": {"s": ("cpc", 1, ["old1", "old2", "new"])}, "d": {"t": ("cpc", 1, ["x"])}}
    )
    stats = {"old1": AdStats(20_000, 600), "old2": AdStats(20_000, 600)}  # 3% CTR
    est = CtrModel(cat.placements, stats).estimate("new")
    assert est.ctr.trials == 0
    assert 0.025 < est.ctr.mean < 0.031  # pulled toward its siblings' 3%, not the 1% default
    other = CtrModel(cat.placements, stats).estimate("x")
    # Another campaign: smoothed toward the catalogue's rate, so above the default, below 3%.
    assert DEFAULT_CTR < other.ctr.mean < est.ctr.mean


def test_a_lucky_first_click_is_not_oversold():
    cat = catalogue({"c": {"s": ("cpc", 1, ["a", "b"])}})
    est = CtrModel(cat.placements, {"a": AdStats(10, 1)}).estimate("a")
    assert est.ctr.mean < 0.02  # 1 in 10 raw, but 10 impressions are little evidence
    assert est.ctr.successes == 1 and est.ctr.trials == 10


def test_much_evidence_outweighs_the_prior():
    cat = catalogue({"c": {"s": ("cpc", 1, ["a", "b"])}})
    est = CtrModel(cat.placements, {"a": AdStats(500_000, 25_000)}).estimate("a")
    assert est.ctr.mean == pytest.approx(0.05, rel=0.01)


def test_an_ads_own_clicks_are_left_out_of_its_prior():
    cat = catalogue({"c": {"s": ("cpc", 1, ["a", "b"])}})
    est = CtrModel(cat.placements, {"a": AdStats(1000, 100)}).estimate("a")
    assert est.ctr.prior_mean == pytest.approx(DEFAULT_CTR)  # b has no evidence yet


def test_prior_strength_is_fitted_from_the_spread_between_ads():
    rng = np.random.default_rng(7)
    true = rng.beta(5, 495, size=400)  # a + b = 500: ads are fairly alike
    n = np.full(400, 100_000.0)
    clicks = rng.binomial(100_000, true).astype(float)
    assert 300 < moments_strength(clicks, n) < 800
    assert moments_strength([1.0], [1000.0]) == DEFAULT_STRENGTH  # too few ads to tell


def test_stats_come_from_viewable_impressions_clicks_and_conversions():
    rows = [
        ("ad", "a", "impressions", 9.0),
        ("ad", "a", "viewable_impressions", 7.0),
        ("ad", "a", "clicks", 2.0),
        ("ad", "a", "conversions", 1.0),
        ("campaign", "c", "clicks", 5.0),
    ]
    assert stats_from_counters(rows) == {"a": AdStats(7.0, 2.0, 1.0)}


def ranked(ranker, cat, relevancies, rng=None):
    ads = [ranker.score(cat.placement(a), r, rng) for a, r in relevancies.items()]
    return [s.placement.ad.id for s in ranker.order(ads, one_per_campaign=False)]


def test_learned_ctr_decides_among_ads_of_similar_relevance():
    cat = catalogue({"c": {"s": ("cpc", 1, ["good", "poor"])}})
    ranker = Ranker(cat.placements, 0.5)
    # Without evidence the slightly more relevant ad comes first ...
    assert ranked(ranker, cat, {"good": 0.80, "poor": 0.81}) == ["poor", "good"]
    # ... once clicks show "good" earns 3x, it wins inside the band.
    ranker.estimates = CtrModel(
        cat.placements, {"good": AdStats(50_000, 1500), "poor": AdStats(50_000, 500)}
    )
    assert ranked(ranker, cat, {"good": 0.80, "poor": 0.81}) == ["good", "poor"]


def test_a_clearly_more_relevant_ad_is_not_beaten_by_a_higher_ecpm():
    cat = catalogue({"c": {"s": ("cpc", 50, ["rich"])}, "d": {"t": ("cpm", 0.1, ["relevant"])}})
    ranker = Ranker(cat.placements, 0.5)
    gap = RELEVANCE_BAND + 0.005
    assert ranked(ranker, cat, {"rich": 0.80, "relevant": 0.80 + gap}) == ["relevant", "rich"]
    assert ranked(ranker, cat, {"rich": 0.80, "relevant": 0.80 + 0.02}) == ["rich", "relevant"]


def test_near_the_top_of_the_scale_the_band_is_bounded_in_cosine():
    """Relevancy saturates: a 0.56-cosine ad is within 0.03 relevancy of a 0.7-cosine one, yet
    far less relevant. It must not win on eCPM (it comes second: within ``GIVEN_COSINE``);
    an ad of nearly the same cosine still may."""
    cat = catalogue({"c": {"s": ("cpc", 50, ["rich"])}, "d": {"t": ("cpm", 0.1, ["relevant"])}})
    ranker = Ranker(cat.placements, 0.5)
    top, loose = calibrate(0.70), calibrate(0.56)
    assert top - loose < RELEVANCE_BAND  # the relevancy bound alone would let it in
    assert ranked(ranker, cat, {"rich": loose, "relevant": top}) == ["relevant", "rich"]
    near = calibrate(0.70 - COSINE_BAND + 0.005)
    assert ranked(ranker, cat, {"rich": near, "relevant": top}) == ["rich", "relevant"]
    # Lower down the scale the relevancy bound is the narrower one, as before.
    assert band_floor(0.8) == pytest.approx(0.8 - RELEVANCE_BAND)


def test_cpa_ecpm_uses_click_and_conversion_rates():
    cat = catalogue({"c": {"s": ("cpa", 20, ["a"])}, "d": {"t": ("cpc", 1, ["b"])}})
    ranker = Ranker(cat.placements, 0.5)
    s = ranker.score(cat.placement("a"), 0.8, None)
    est = ranker.estimates.estimate("a")
    assert s.ecpm == pytest.approx(20 * 1000 * est.ctr.mean * est.cvr.mean)


def test_thompson_sampling_gives_an_unproven_ad_a_share_of_requests():
    cat = catalogue(
        {"c": {"s": ("cpc", 1, ["proven"])}, "d": {"t": ("cpc", 1, ["unproven", "dud"])}}
    )
    ranker = Ranker(cat.placements, 0.5)
    # "proven" has a 1.2% CTR on much evidence; "unproven" has none, and its sibling's 0.8%
    # pulls its prior below "proven".
    stats = {"proven": AdStats(200_000, 2400), "dud": AdStats(200_000, 1600)}
    ranker.estimates = CtrModel(cat.placements, stats)
    assert ranker.estimates.estimate("unproven").ctr.mean < 0.011
    rng = np.random.default_rng(1)
    firsts = [ranked(ranker, cat, {"proven": 0.8, "unproven": 0.8}, rng)[0] for _ in range(2000)]
    share = firsts.count("unproven") / len(firsts)
    assert 0.05 < share < 0.6
    # The means alone never show it.
    assert ranked(ranker, cat, {"proven": 0.8, "unproven": 0.8}) == ["proven", "unproven"]


def _order_all_then_cut(ads, one_per_campaign, limit):
    """The order as first written: every ad copied with its rank score, sorted, then the
    first ``limit`` (one per campaign) of those within ``GIVEN_COSINE`` of the top."""
    from dataclasses import replace

    from matcher.ranking import _band_score, given_floor

    top = max(s.relevancy_score for s in ads)
    floor = band_floor(top)
    best = max((s.ecpm for s in ads if s.relevancy_score >= floor), default=0)
    scored = [
        replace(s, rank_score=_band_score(s.ecpm, best))
        if s.relevancy_score >= floor
        else replace(s, rank_score=s.relevancy_score)
        for s in ads
    ]
    scored.sort(key=lambda s: (-s.rank_score, -s.relevancy_score, s.placement.ad.id))
    out, seen = [], set()
    for s in scored:
        if s.relevancy_score < given_floor(top):
            continue
        if not one_per_campaign or s.placement.campaign.id not in seen:
            seen.add(s.placement.campaign.id)
            out.append(s)
    return out[:limit]


@pytest.mark.parametrize("one_per_campaign", [True, False])
def test_the_first_ads_in_order_are_those_of_the_whole_order(one_per_campaign):
    """A dense band: ``order`` ranks on the scores and copies only the ads it gives out."""
    rng = np.random.default_rng(3)
    sets = {
        f"c{c}": {
            f"s{c}": (("cpm", "cpc", "cpa")[c % 3], 1 + c % 4, [f"a{c}-{i}" for i in range(8)])
        }
        for c in range(12)
    }
    cat = catalogue(sets)
    ranker = Ranker(cat.placements, 0.5)
    for _ in range(20):
        ads = [ranker.score(p, float(rng.uniform(0.9, 1.0)), None) for p in cat.placements]
        for limit in (1, 3, 5, 200):
            got = ranker.order(ads, one_per_campaign, limit)
            assert got == _order_all_then_cut(ads, one_per_campaign, limit)
    assert ranker.order([], one_per_campaign, 3) == []


def test_a_cpm_ad_is_ranked_on_its_bid_without_reading_an_estimate():
    cat = catalogue({"c": {"s": ("cpm", 4, ["a"])}, "d": {"t": ("cpc", 1, ["b"])}})
    ranker = Ranker(cat.placements, 0.5)
    read = []
    estimate = ranker.estimates.estimate
    ranker.estimates.estimate = lambda ad_id: read.append(ad_id) or estimate(ad_id)
    a = ranker.score(cat.placement("a"), 0.9, np.random.default_rng(1))
    b = ranker.score(cat.placement("b"), 0.9, np.random.default_rng(1))
    assert a.ecpm == 4 and b.ecpm > 0 and read == ["b"]
