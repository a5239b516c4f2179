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
