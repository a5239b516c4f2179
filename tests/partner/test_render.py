"""edge.partner.render: MatchResult -> the partner response bodies."""

import pytest

from edge.context import Context
from edge.partner.render import ai_body, legacy_ad, no_match_seconds, ugc_body
from edge.settings import Settings
from matcher.catalogue import load_catalogue
from matcher.types import MatchResult, ScoredAd
from tests.conftest import AI_SCOPE
from tests.routes.conftest import CATALOGUE


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(CATALOGUE)


@pytest.fixture
def ctx(tmp_path):
    return Context.build(Settings(db=tmp_path / "edge.db", cache_dir=tmp_path / "cache"))


@pytest.mark.parametrize(("seconds", "expected"), [(None, 60), (0, 60), (30, 60), (900, 900)])
def test_no_match_window_has_a_one_minute_floor(seconds, expected):
    assert no_match_seconds(MatchResult("no_match", retry_after_seconds=seconds)) == expected


def test_ugc_no_match_is_the_retry_body(ctx):
    body = ugc_body(ctx, MatchResult("no_match", retry_after_seconds=600), "p-1")
    assert body == {"no_ad_retry_after_seconds": 600}


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (MatchResult("no_match"), "no_relevant_demand"),
        (MatchResult("empty"), "suppressed"),
        (MatchResult("empty", reason="unsafe"), "unsafe"),
    ],
)
def test_ai_body_without_ads_says_why(ctx, result, reason):
    assert ai_body(ctx, result, "m-1", None, AI_SCOPE) == {
        "message_id": "m-1",
        "ads": [],
        "no_ad_reason": reason,
    }


def test_legacy_ad_carries_pricing_and_a_clamped_relevancy(catalogue):
    scored = ScoredAd(catalogue.placement("ad-dog-food"), 1.7, 1.7)
    ad = legacy_ad(scored)
    assert ad["ad_id"] == "ad-dog-food" and ad["relevancy_score"] == 1.0
    assert set(ad["pricing_model"]) == {"type", "bid_amount"}
    assert all(t["vendor"] != "edge" for t in ad["pixel_trackers"])  # no edge pixel here
