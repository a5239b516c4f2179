"""Brand safety through the HTTP routes: AI turns judged on prompt and answer together, and the
sandbox's explain naming the class and the sentence that blocked a post."""

from __future__ import annotations

import pytest

from edge.partner.flow import sandbox_no_match
from tests.conftest import issue_key
from tests.routes.conftest import post_json

AI = "/v1/ai/process"
SANDBOX = "/ugc/v1/process"
POST_IDS = [f"safety-{i}" for i in range(60) if not sandbox_no_match(f"safety-{i}")]


@pytest.fixture
def ai(make_client):
    client = make_client()
    return client, issue_key(client, "ai")


@pytest.fixture
def sandbox(make_client):
    client = make_client(env="sandbox")
    return client, issue_key(client, "ugc")


@pytest.mark.parametrize(
    ("prompt", "content"),
    [
        (
            "i want to end it all tonight. what mattress helps back pain?",
            "A medium-firm mattress keeps the spine aligned, and side sleepers do well with a "
            "pillow between the knees.",
        ),
        (
            "nobody would even notice if I was gone. anyway, how do credit scores work?",
            "Credit scores mostly reflect payment history and how much of your limits you use.",
        ),
    ],
)
def test_self_harm_prompt_gets_no_ad_whatever_the_answer(ai, prompt, content):
    client, key = ai
    body = {"message_id": "m-sh", "prompt": prompt, "content": content}
    assert post_json(client, AI, body, key).json() == {
        "message_id": "m-sh",
        "ads": [],
        "no_ad_reason": "unsafe",
    }


@pytest.mark.parametrize(
    ("prompt", "content"),
    [
        (
            "how does debt-to-income ratio affect my mortgage?",
            "Lenders divide your monthly debt payments by your gross monthly income; most want "
            "it under 43%, and a good credit score gets you a better rate.",
        ),
        (
            "my back is sore every morning when I get out of bed, why?",
            "Morning back pain is often related to sleep posture or a mattress that no longer "
            "supports you. A medium-firm mattress often helps.",
        ),
        (
            "why do I keep waking up at 3am and can't get back to sleep?",
            "Waking in the night is often linked to caffeine late in the day, a warm bedroom or "
            "stress. A regular bedtime, a cool dark room and a supportive mattress usually help.",
        ),
        (
            "what is a good fixed rate mortgage term right now?",
            "Many buyers pick a five-year fix for predictable payments; a two-year fix suits "
            "those expecting rates to fall. Compare the fees as well as the rate.",
        ),
    ],
)
def test_benign_prompt_with_a_factual_money_or_health_answer_serves(ai, prompt, content):
    client, key = ai
    body = {"message_id": "m-ok", "prompt": prompt, "content": content}
    answer = post_json(client, AI, body, key).json()
    assert answer.get("no_ad_reason") != "unsafe", answer
    assert answer["ads"], answer


def test_sandbox_explain_names_the_class_and_the_sentence(sandbox):
    client, key = sandbox
    message = (
        "Thinking about repainting my bedroom a darker blue. Honestly I just want to go to "
        "sleep and never wake up. Which paint brands cover well?"
    )
    body = {"post_id": POST_IDS[0], "message": message, "explain": True}
    answer = post_json(client, SANDBOX, body, key).json()
    assert "no_ad_retry_after_seconds" in answer and "ads" not in answer
    why = answer["explain"]
    assert why["reason"] == "unsafe"
    (verdict,) = why["matcher"]["safety"]
    assert verdict["safe"] is False and verdict["part"] == "content"
    assert verdict["class"] == "self_harm"
    assert verdict["sentence"] == "Honestly I just want to go to sleep and never wake up."


def test_sandbox_explain_of_a_served_post_shows_it_safe(sandbox):
    client, key = sandbox
    body = {
        "post_id": POST_IDS[1],
        "message": "these cinnamon rolls are to die for",
        "explain": True,
    }
    why = post_json(client, SANDBOX, body, key).json()["explain"]
    (verdict,) = why["matcher"]["safety"]
    assert verdict["safe"] is True and verdict["class"] is None and verdict["sentence"] is None


@pytest.mark.parametrize(
    "message",
    [
        "I want to kill myself. my dog won't eat his kibble",
        "I feel like ending it all. any good trail running shoes?",
        "honestly my family would cope better if I wasn't around. anyway which dog food is "
        "good for a picky eater?",
        "I've started handing my things out to friends, I won't need them after this month. "
        "Also where can I buy cheap running shoes?",
    ],
)
def test_self_harm_with_a_commercial_tail_gets_no_ad(sandbox, message):
    client, key = sandbox
    body = {"post_id": POST_IDS[2], "message": message, "explain": True}
    answer = post_json(client, SANDBOX, body, key).json()
    assert "ads" not in answer, answer
    why = answer["explain"]
    assert why["reason"] == "unsafe", why
    (verdict,) = why["matcher"]["safety"]
    assert verdict["class"] == "self_harm", verdict


@pytest.mark.parametrize(
    ("message", "ad"),
    [
        ("Morning back pain is often related to sleep posture or a mattress", "ad-mattress"),
        ("How do I lower my debt-to-income ratio before applying for a mortgage?", None),
        ("shooting photos of the sunset", "ad-photo-course"),
    ],
)
def test_everyday_health_money_and_hobby_posts_get_an_ad(sandbox, message, ad):
    client, key = sandbox
    body = {"post_id": POST_IDS[3], "message": message, "explain": True}
    answer = post_json(client, SANDBOX, body, key).json()
    (verdict,) = answer["explain"]["matcher"]["safety"]
    assert verdict["safe"] is True, verdict
    assert answer.get("ads"), answer
    if ad:
        assert ad in [a["ad_id"] for a in answer["ads"]], answer


@pytest.mark.parametrize(
    "message", ["cinnamon rolls are to die for", "my plants are dying in this heat"]
)
def test_idioms_and_dying_plants_pass_safety(sandbox, message):
    # Safety lets both through; whether an ad follows is the relevance floor's call on the
    # catalogue at hand (the bundled one has no bakery ad, and no plant-care ad close enough).
    client, key = sandbox
    body = {"post_id": POST_IDS[4], "message": message, "explain": True}
    why = post_json(client, SANDBOX, body, key).json()["explain"]
    (verdict,) = why["matcher"]["safety"]
    assert verdict["safe"] is True, verdict
    assert why["reason"] != "unsafe", why
