"""Semantic relevance on the labelled set (tests/data/relevance_cases.json) and the sandbox
catalogue: paraphrases with no shared keyword must still find their ad."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from matcher.ranking import GIVEN_COSINE, Ranker, calibrate
from matcher.state import ThreadState
from matcher.types import GeoSignal, MatchRequest, ScoredAd

CASES = json.loads((Path(__file__).parents[1] / "data" / "relevance_cases.json").read_text())[
    "cases"
]
NOW = 1_790_000_000.0  # 2026-09-21: inside the sandbox catalogue's flights
_WORD = re.compile(r"[a-z0-9']+")
_STOPWORDS = "a an the to for of in on and or my i you your with at is it"
_STOP = set(_STOPWORDS.split())


def _decide(matcher, case):
    geo = GeoSignal(**case["geo"]) if case.get("geo") else None
    request = MatchRequest(product=case.get("product", "ugc"), content=case["text"], geo=geo)
    return matcher.decide(request, ThreadState(), NOW, {})


@pytest.fixture(scope="module")
def results(shared_matcher):
    return [(case, _decide(shared_matcher, case)) for case in CASES]


def test_the_set_is_big_enough_and_has_real_paraphrases(shared_matcher):
    positives = [c for c in CASES if c["expected"]]
    paraphrases = [c for c in positives if c["paraphrase"]]
    assert len(positives) >= 60 and len(paraphrases) >= 30
    for case in paraphrases:
        post_words = set(_WORD.findall(case["text"].lower())) - _STOP
        for ad_id in case["expected"]:
            ad = shared_matcher.catalogue.placement(ad_id).ad
            kw_words = {w for k in ad.keywords for w in _WORD.findall(k.lower())}
            assert not post_words & kw_words, (case["text"], ad_id, post_words & kw_words)


def test_the_kibble_paraphrase_finds_dog_food_sharing_no_word(results, shared_matcher):
    case, result = next((c, r) for c, r in results if c["text"].startswith("my pup won't"))
    assert result.outcome == "matched"
    assert result.ads[0].placement.ad.id == "ad-dog-food"
    ad = shared_matcher.catalogue.placement("ad-dog-food").ad
    ad_words = set(_WORD.findall(f"{ad.title} {ad.description} {' '.join(ad.keywords)}".lower()))
    assert not set(_WORD.findall(case["text"].lower())) & ad_words


def test_top_ad_accuracy(results):
    positives = [(c, r) for c, r in results if c["expected"]]
    hits = [bool(r.ads) and r.ads[0].placement.ad.id in c["expected"] for c, r in positives]
    # Measured 61/69 with the shipped model and catalogue; the misses are listed in
    # docs/decisions.md (hard paraphrases such as "ringlets" for curly hair).
    assert sum(hits) / len(hits) >= 0.85, sum(hits)


def test_expected_ad_in_the_top_three_for_paraphrases(results):
    para = [(c, r) for c, r in results if c["expected"] and c["paraphrase"]]
    hits = [any(s.placement.ad.id in c["expected"] for s in r.ads) for c, r in para]
    assert sum(hits) / len(hits) >= 0.85, sum(hits)


def test_posts_with_no_relevant_ad_mostly_get_no_match(results):
    negatives = [r for c, r in results if not c["expected"]]
    no_match = [r.outcome == "no_match" and r.reason == "no_relevant_demand" for r in negatives]
    assert sum(no_match) / len(no_match) >= 0.75, sum(no_match)


def test_scores_are_calibrated_and_ordered(results):
    for _, result in results:
        scores = [s.relevancy_score for s in result.ads]
        assert all(0.5 <= s <= 1.0 for s in scores)
        ranks = [s.rank_score for s in result.ads]
        assert ranks == sorted(ranks, reverse=True)


HELD_OUT = json.loads((Path(__file__).parents[1] / "data" / "relevance_heldout.json").read_text())[
    "cases"
]


@pytest.fixture(scope="module")
def held_out(shared_matcher):
    return [(case, _decide(shared_matcher, case)) for case in HELD_OUT]


def test_the_floor_holds_on_posts_it_was_not_fitted_on(held_out):
    """The relevance floor out of sample: most posts that a sandbox ad fits get one of the
    ads a person would pick first, and most posts that none fits get no ad. Measured 20 of
    27 and 18 of 23 (docs/decisions.md, Matcher: calibration and floor)."""
    positives = [(c, r) for c, r in held_out if c["expected"]]
    right = [bool(r.ads) and r.ads[0].placement.ad.id in c["expected"] for c, r in positives]
    assert sum(right) / len(positives) >= 0.7, sum(right)
    negatives = [r for c, r in held_out if not c["expected"]]
    quiet = [r.outcome == "no_match" for r in negatives]
    assert sum(quiet) / len(negatives) >= 0.7, sum(quiet)


def test_a_far_more_relevant_ad_is_not_outbid_near_the_top_of_the_scale(shared_matcher):
    """The budgeting answer is at cosine ~0.68 to the budgeting app and ~0.44 to the
    thermostat, both above 0.97 relevancy: the thermostat's higher eCPM must not put it
    first (it did while the band was bounded in relevancy alone)."""
    request = MatchRequest(
        product="ai",
        prompt="I lost my job, how do I make a budget that works on unemployment?",
        content="Start by listing essential expenses, cut subscriptions, and track every "
        "purchase for a month. A budgeting app can make this easier.",
        explain=True,
    )
    result = shared_matcher.decide(request, ThreadState(), NOW, {})
    assert result.ads[0].placement.ad.id == "ad-budget-app"
    listed = {a["ad_id"]: a for a in result.explanation["ads"]}
    thermostat = listed["ad-thermostat"]
    assert thermostat["relevancy"] > 0.97  # over the floor, far below the budgeting app
    ranking = result.explanation["ranking"]
    assert listed["ad-budget-app"]["relevancy"] >= ranking["band_floor"] > thermostat["relevancy"]
    # 0.24 of cosine below the first ad: not given at all (see the next test).
    assert thermostat["gate"] == "below_given_floor"
    assert thermostat["relevancy"] < ranking["given_floor"]
    assert "ad-thermostat" not in {s.placement.ad.id for s in result.ads}


def test_a_second_ad_is_given_only_near_the_first(shared_matcher):
    """A puppy-training post: the relevance floor alone let cat litter (cosine ~0.30) fill a
    place under dog treats (~0.54). Past the first, an ad must be within ``GIVEN_COSINE`` of
    the most relevant ad's cosine; ads that close are still given."""
    request = MatchRequest(
        product="ugc", content="what do u guys use to reward ur puppy when teaching sit n stay",
        explain=True,
    )  # fmt: skip
    result = shared_matcher.decide(request, ThreadState(), NOW, {})
    listed = result.explanation["ads"]
    top = max(a["cosine"] for a in listed if a["gate"] in (None, "ranked_out", "below_given_floor"))
    given = [a for a in listed if a["ad_id"] in {s.placement.ad.id for s in result.ads}]
    assert result.ads and all(a["cosine"] >= top - GIVEN_COSINE - 1e-4 for a in given)
    cut = [a for a in listed if a["gate"] == "below_given_floor"]
    assert all(a["cosine"] < top - GIVEN_COSINE for a in cut)
    assert cut, listed  # ads over the floor that the rule kept out
    assert all(a["relevancy"] >= 0.5 for a in cut)
    # The rule alone: cosines 0.6, 0.46 and 0.44 give the first two.
    placements = shared_matcher.catalogue.placements[:3]
    ads = [
        ScoredAd(p, calibrate(x), 0.0) for p, x in zip(placements, (0.6, 0.46, 0.44), strict=True)
    ]
    given = Ranker([], 0.5).order(ads, one_per_campaign=False)
    assert [s.placement for s in given] == list(placements[:2])


THIRD = json.loads((Path(__file__).parents[1] / "data" / "relevance_third.json").read_text())[
    "cases"
]


def test_ads_on_a_set_from_another_hand(shared_matcher):
    """224 texts an outside evaluator labelled before sending any: the first ad fits for 132
    of the 142 that an ad fits, 18 of the 82 that none fits get an ad anyway (puns and loose
    associations just above the floor), and past the first ad, 32 ads are given (98 before
    the second ad's rule; docs/decisions.md, "The second and third ad")."""
    fits = nones = none_with_ad = extra = 0
    top_right = 0
    for case in THIRD:
        geo = GeoSignal(**case["geo"]) if case.get("geo") else None
        request = MatchRequest(
            product=case["product"], content=case["text"], prompt=case.get("prompt"), geo=geo
        )
        ads = [
            s.placement.ad.id for s in shared_matcher.decide(request, ThreadState(), NOW, {}).ads
        ]
        extra += max(len(ads) - 1, 0)
        if case["expected"]:
            fits += 1
            top_right += bool(ads) and ads[0] in case["expected"]
        else:
            nones += 1
            none_with_ad += bool(ads)
    assert (fits, nones) == (142, 82)
    assert top_right / fits >= 0.88, top_right
    assert none_with_ad / nones <= 0.25, none_with_ad
    assert extra <= 40, extra
