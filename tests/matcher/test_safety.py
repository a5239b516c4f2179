"""Brand safety: the labelled set, the held-out floors, the lexicon's precision, AI turns."""

from __future__ import annotations

import orjson
import pytest

from matcher import safety_train
from matcher.safety import LEXICON, SafetyClassifier
from matcher.state import ThreadState
from matcher.types import MatchRequest

ROWS = safety_train.load_labelled()


def test_labelled_set_is_large_and_varied():
    assert len(ROWS) >= 300
    kinds = {r.kind for r in ROWS if r.unsafe}
    assert {"crime", "disaster", "war", "politics", "markets", "deaths", "grief"} <= kinds
    idioms = [r for r in ROWS if r.kind == "idiom"]
    assert len(idioms) >= 40 and not any(r.unsafe for r in idioms)
    held = [r for r in ROWS if r.split == "heldout"]
    assert 0.2 <= len(held) / len(ROWS) <= 0.4
    assert any(r.unsafe for r in held) and any(not r.unsafe for r in held)


def test_shipped_weights_were_trained_on_this_labelled_set():
    # Edit the labelled set and forget `python -m matcher.safety_train`: this fails.
    from importlib import resources

    model = orjson.loads(resources.files("matcher.data").joinpath("safety_model.json").read_bytes())
    train_rows = [r for r in ROWS if r.split == "train"]
    assert model["trained_on"]["sha256"] == safety_train.rows_hash(train_rows)
    assert len(model["weights"]) == 384


def test_heldout_precision_and_recall(shared_matcher):
    report = safety_train.evaluate(shared_matcher.check_safety)
    assert report["texts"] >= 90
    assert report["recall"] >= 0.95, report
    assert report["safe_blocked"] <= 0.08, report
    assert report["precision"] >= 0.9, report


def test_lexicon_never_fires_on_the_safe_rows():
    hits = [r.text for r in ROWS if not r.unsafe and LEXICON.search(r.text)]
    assert hits == []


@pytest.mark.parametrize(
    "text",
    ["This album kills", "I'm dying of laughter", "Shooting photos at the beach all day"],
)
def test_violent_sounding_but_safe_text_gets_ads_considered(shared_matcher, text):
    (verdict,) = shared_matcher.check_safety([text])
    assert verdict.safe, verdict


def test_news_gets_no_ad_whatever_demand_exists(shared_matcher):
    # Dog food demand is there, but this is a tragedy.
    text = "Police said a dog walker was shot dead in the park; the gunman fled on foot."
    r = shared_matcher.decide(MatchRequest(product="ugc", content=text), ThreadState(), 1.79e9, {})
    assert r.outcome == "no_match" and r.reason == "unsafe"


def test_ai_turn_is_checked_on_prompt_and_answer(shared_matcher):
    safe_prompt = "What should I cook for dinner tonight?"
    unsafe_answer = "Before that: breaking news, an earthquake killed at least 40 people today."
    for prompt, content in ((safe_prompt, unsafe_answer), (unsafe_answer, safe_prompt)):
        req = MatchRequest(product="ai", content=content, prompt=prompt, explain=True)
        r = shared_matcher.decide(req, ThreadState(), 1.79e9, {})
        assert r.reason == "unsafe", (prompt, r)
        assert len(r.explanation["safety"]) == 2


def test_lexicon_only_classifier_still_blocks_clear_news():
    import numpy as np

    clf = SafetyClassifier(None)
    assert not clf.check("The death toll rose to 40", np.zeros(384, np.float32)).safe
    assert clf.check("I love my dog", np.zeros(384, np.float32)).safe
