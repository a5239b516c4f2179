"""Semantic relevance on the labelled set (tests/data/relevance_cases.json) and the sandbox
catalogue: paraphrases with no shared keyword must still find their ad."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from matcher.state import ThreadState
from matcher.types import GeoSignal, MatchRequest

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
    shown = {s.placement.ad.id: s.relevancy_score for s in result.ads}
    assert shown.get("ad-thermostat", 0) > 0.97  # relevant enough to be shown, after it
    ranking = result.explanation["ranking"]
    assert shown["ad-budget-app"] >= ranking["band_floor"] > shown["ad-thermostat"]
