"""POST /v1/ai/process: 422 validation, AI ads, signed beacon URLs."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlsplit

import pytest

from edge.beacons import verify_ai_beacon
from edge.partner.idempotency import REPLAY_HEADER
from edge.store import StoreUnavailable
from edge.threads import partner_scope
from matcher.catalogue import ad_number
from tests.conftest import assert_error_shape, issue_key
from tests.routes.conftest import post_json

PATH = "/v1/ai/process"
TURN = {
    "message_id": "m-1",
    "conversation_id": "c-9",
    "prompt": "what should I feed a picky puppy?",
    "content": "Try a grain-free kibble and feed at regular times.",
}


@pytest.fixture
def ai(make_client, script):
    client = make_client(matcher=script)
    return client, issue_key(client, "ai")


def call(ai, body):
    client, key = ai
    return post_json(client, PATH, body, key)


@pytest.mark.parametrize("product", [None, "ugc", "ad-manager"])
def test_missing_or_wrong_product_key_is_401(ai, product):
    client, _ = ai
    key = issue_key(client, product) if product else None
    assert_error_shape(post_json(client, PATH, TURN, key), 401, "unauthorized")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": "hi"}, "message_id"),
        ({"message_id": "m"}, "content"),
        ({"message_id": "m", "content": ""}, "content"),
        ({"message_id": 7, "content": "hi"}, "message_id"),
        ({"message_id": "m", "content": "hi", "conversation_id": 3}, "conversation_id"),
        ({"message_id": "m", "content": "hi", "prompt": {"text": "x"}}, "prompt"),
        ({"message_id": "m", "content": "hi", "location": "California"}, "location"),
        ({"message_id": "m", "content": "hi", "location": 6}, "location"),
        ({"message_id": "m", "content": "x" * 20_001}, "content"),
        ({"message_id": "m", "content": "hi", "post_id": "p"}, "post_id"),
        (["m"], "body"),
    ],
)
def test_validation_failures_are_422_naming_the_field(ai, body, field, script):
    err = assert_error_shape(call(ai, body), 422, "validation_error")
    assert err["field"] == field
    assert script.requests == []


@pytest.mark.parametrize("raw", [b"{", b"", b"nul"])
def test_malformed_json_is_422(ai, raw):
    client, key = ai
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    assert_error_shape(client.post(PATH, content=raw, headers=headers), 422, "validation_error")


def test_wrong_content_type_is_415(ai):
    client, key = ai
    r = client.post(PATH, content=b"{}", headers={"X-API-Key": key, "Content-Type": "text/xml"})
    assert_error_shape(r, 415)


def test_ads_have_integer_ids_placement_creative_and_signed_beacons(ai, script):
    client, key = ai
    script.ad_ids = ("ad-notes",)
    r = call(ai, TURN)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    body = r.json()
    assert set(body) == {"message_id", "ads"} and body["message_id"] == "m-1"
    (ad,) = body["ads"]
    assert ad["ad_id"] == ad_number("ad-notes") and isinstance(ad["ad_id"], int)
    assert ad["placement"] == "after_message"
    assert ad["title"] == "Notes that organise themselves" and ad["cta"] == "Try free"
    assert ad["advertiser_name"] == "Cloud Notes" and ad["ttl_seconds"] == 300
    assert ad["click_through_url"] == "https://notes.example.com/"
    assert ad["pixel_trackers"] == []
    ctx = client.app.state.ctx
    signer = ctx.signer
    # The URLs name the partner (a keyed hash of its key family, edge.threads).
    scope = partner_scope(signer, "ai", client.portal.call(ctx.keyring.find, key))
    for kind in ("render", "view"):
        url = urlsplit(ad[f"{kind}_impression_url"])
        assert f"{url.scheme}://{url.netloc}{url.path}" == (
            f"http://127.0.0.1:8000/dea/ai/impressions/{kind}"
        )
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        assert query["ad_id"] == str(ad["ad_id"]) and query["message_id"] == "m-1"
        assert query["conversation_id"] == "c-9" and query["scope"] == scope
        beacon = verify_ai_beacon(signer, kind, query, now=ctx.clock())
        assert (beacon.ad_id, beacon.message_id, beacon.scope) == (ad["ad_id"], "m-1", scope)


def test_beacons_use_the_configured_public_base_url(make_client, script):
    client = make_client(public_base_url="https://ads.example.com", matcher=script)
    script.ad_ids = ("ad-notes",)
    ad = post_json(client, PATH, TURN, issue_key(client, "ai")).json()["ads"][0]
    assert ad["render_impression_url"].startswith("https://ads.example.com/dea/ai/impressions/")


def test_prompt_content_and_thread_reach_the_matcher(ai, script):
    call(ai, TURN)
    req = script.last
    assert (req.product, req.content, req.prompt) == ("ai", TURN["content"], TURN["prompt"])
    # The partner's own conversation: scoped to its key family (edge.threads).
    assert req.thread_id.startswith("ai:key_") and req.thread_id.endswith(":c-9")
    assert (req.turn_id, req.post_id) == ("m-1", None)
    call(ai, {"message_id": "m-2", "content": "hello"})
    assert script.last.thread_id.endswith(":m-2") and script.last.prompt is None


def test_location_is_used_for_geo(ai, script):
    call(ai, {**TURN, "location": "us-ca"})
    assert (script.last.geo.state, script.last.geo.country) == ("US-CA", "US")
    call(ai, {**TURN, "location": "US"})  # a country alone is no signal
    assert script.last.geo is None


@pytest.mark.parametrize(
    ("outcome", "reason", "expected"),
    [
        ("no_match", "unsafe", "unsafe"),
        ("no_match", "", "no_relevant_demand"),
        ("empty", "", "suppressed"),
    ],
)
def test_no_ad_and_unsafe_are_answered_in_the_same_schema(ai, script, outcome, reason, expected):
    script.outcome, script.reason, script.retry_after = outcome, reason, 600
    assert call(ai, TURN).json() == {"message_id": "m-1", "ads": [], "no_ad_reason": expected}


def test_matcher_failure_is_502(ai, script):
    script.error = RuntimeError("boom")
    r = call(ai, TURN)
    assert_error_shape(r, 502)
    assert "Retry-After" in r.headers


def test_hand_built_v1_ai_beacon_is_404(ai):
    client, _ = ai
    for kind in ("render", "view"):
        r = client.get(f"/v1/ai/impressions/{kind}?ad_id=1&message_id=m&conversation_id=c")
        assert_error_shape(r, 404, "not_found")


def test_sandbox_has_no_ai_product(make_client, script):
    client = make_client(env="sandbox", matcher=script)
    key = issue_key(client, "ai")
    assert_error_shape(post_json(client, PATH, TURN, key), 404)
    assert PATH not in client.get("/openapi.json").json()["paths"]


def test_real_matcher_turns_and_brand_safety(make_client, shared_matcher):
    client = make_client()
    key = issue_key(client, "ai")
    body = post_json(client, PATH, TURN, key).json()
    ad = body["ads"][0]
    placement = shared_matcher.catalogue.placement_by_number(ad["ad_id"])
    assert placement is not None and placement.ad.title == ad["title"]
    assert "dog" in placement.ad.id  # the prompt and answer are about a picky puppy
    unsafe = {
        "message_id": "m-news",
        "prompt": "what happened downtown today?",
        "content": "A gunman opened fire at the station this morning, killing four people.",
    }
    assert post_json(client, PATH, unsafe, key).json() == {
        "message_id": "m-news",
        "ads": [],
        "no_ad_reason": "unsafe",
    }


# An ordinary turn that follows a blocked one in the same conversation.
MATTRESS = {
    "message_id": "m-2",
    "prompt": "ok. what's a good cheap mattress for back pain?",
    "content": "A medium-firm foam mattress supports the lower back.",
}
# The turn that holds its conversation: the user wrote of not wanting to live.
CRISIS = {
    "message_id": "m-1",
    "conversation_id": "c-1",
    "prompt": "I don't want to live anymore.",
    "content": "I'm really sorry you're feeling this way. You can call or text 988.",
}


def test_a_self_harm_turn_holds_the_conversations_ads_for_a_day(make_client, clock):
    # The user wrote of not wanting to live; their next turn asks for a mattress. No ad in
    # that conversation for 24 hours, whatever its later turns say; other conversations,
    # and the same conversation id of another partner, are not held.
    client = make_client()
    key = issue_key(client, "ai")
    other_partner = issue_key(client, "ai")
    ordinary = {**MATTRESS, "conversation_id": "c-1"}
    unsafe = {"message_id": "m-1", "ads": [], "no_ad_reason": "unsafe"}
    assert post_json(client, PATH, CRISIS, key).json() == unsafe
    assert post_json(client, PATH, ordinary, key).json() == {**unsafe, "message_id": "m-2"}
    elsewhere = {**ordinary, "conversation_id": "c-2"}
    assert post_json(client, PATH, elsewhere, key).json()["ads"]  # the turn itself is fine
    assert post_json(client, PATH, ordinary, other_partner).json()["ads"]
    clock.advance(23 * 3600)
    later = {**ordinary, "message_id": "m-3"}
    assert post_json(client, PATH, later, key).json()["no_ad_reason"] == "unsafe"
    clock.advance(3600 + 1)
    assert post_json(client, PATH, {**later, "message_id": "m-4"}, key).json()["ads"]


def test_the_hold_is_stored_before_the_turn_is_answered(make_client, monkeypatch):
    # The next turn may reach another node the moment this answer is out, and the node that
    # answered may die: the hold must already be committed (a slow store shows it).
    client = make_client()
    key = issue_key(client, "ai")
    store = client.app.state.ctx.store
    stored = []
    put_backoff = store.put_backoff

    async def slow_put(thread_id, window, at):
        await asyncio.sleep(0.3)
        await put_backoff(thread_id, window, at)
        stored.append(thread_id)

    monkeypatch.setattr(store, "put_backoff", slow_put)
    assert post_json(client, PATH, CRISIS, key).json()["no_ad_reason"] == "unsafe"
    assert [s for s in stored if s.endswith("#crisis")], stored


def test_a_hold_that_cannot_be_stored_is_retried(make_client, monkeypatch):
    client = make_client()
    key = issue_key(client, "ai")
    store = client.app.state.ctx.store
    put_backoff = store.put_backoff

    async def down(*args):
        raise StoreUnavailable("down")

    monkeypatch.setattr(store, "put_backoff", down)
    r = post_json(client, PATH, CRISIS, key)
    assert_error_shape(r, 502, "upstream_unavailable")
    assert r.headers["Retry-After"]
    monkeypatch.setattr(store, "put_backoff", put_backoff)
    assert post_json(client, PATH, CRISIS, key).json()["no_ad_reason"] == "unsafe"
    ordinary = {**MATTRESS, "conversation_id": "c-1"}
    assert post_json(client, PATH, ordinary, key).json()["no_ad_reason"] == "unsafe"


def test_news_in_a_conversation_holds_only_its_own_turn(make_client):
    # Only self-harm holds a conversation: a tragedy asked about is that turn's alone.
    client = make_client()
    key = issue_key(client, "ai")
    news = {
        "message_id": "m-1",
        "conversation_id": "c-9",
        "prompt": "what happened downtown today?",
        "content": "A gunman opened fire at the station this morning, killing four people.",
    }
    ordinary = {**MATTRESS, "conversation_id": "c-9"}
    assert post_json(client, PATH, news, key).json()["no_ad_reason"] == "unsafe"
    assert post_json(client, PATH, ordinary, key).json()["ads"]


def _turn_and_the_next(make_client, prompt: str, answer: str) -> tuple[dict, dict]:
    """The answers to a turn and to an ordinary shopping turn right after it, in one
    conversation: the second has ads unless the first held the conversation."""
    client = make_client()
    key = issue_key(client, "ai")
    turn = {"message_id": "m-1", "conversation_id": "c-5", "prompt": prompt, "content": answer}
    first = post_json(client, PATH, turn, key).json()
    return first, post_json(client, PATH, {**MATTRESS, "conversation_id": "c-5"}, key).json()


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        # Greetings and small talk: a text of a few words lands near the self-harm margin's
        # threshold whatever it says, so the turn itself may get no ad.
        ("hi", "Hello! How can I help you today?"),
        ("thanks!", "You're welcome!"),
        ("lol", "Glad that made you laugh."),
        ("?", "Could you say a little more about what you need?"),
        ("tell me a joke", "Why did the scarecrow win an award? He was outstanding."),
        ("can we start over?", "Of course. What would you like to talk about?"),
        ("that's it, I'm done", "Great, glad I could help!"),
        # Warm sign-offs: the answer is read for self-harm after a prompt with some evidence,
        # and a sign-off can read as self-harm itself; the prompt's weak evidence stays weak.
        ("bye", "Take care of yourself, and feel free to come back anytime."),
        ("good night", "Good night! Sleep well and see you tomorrow."),
        ("thanks!", "You're welcome! You can end your life insurance policy in 30 days."),
    ],
)
def test_small_talk_holds_no_conversation(make_client, prompt, answer):
    first, following = _turn_and_the_next(make_client, prompt, answer)
    assert following["ads"], first


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        # A few words the models read as self-harm, not only the margin: held whatever the
        # answer says.
        ("i want to die", "Please talk to someone."),
        # A few words that weigh the same as small talk: the answer's crisis help says
        # which they were.
        ("i'm done", "It sounds like you're going through a lot. If you're thinking of "
         "ending your life, please call or text 988."),
        ("not worth it", "You can text HOME to 741741 to reach a counselor right now."),
        ("kill me now", "Please reach out to the Samaritans on 116 123, any time."),
    ],
)  # fmt: skip
def test_a_short_self_harm_turn_holds_its_conversation(make_client, prompt, answer):
    first, following = _turn_and_the_next(make_client, prompt, answer)
    assert first["no_ad_reason"] == following["no_ad_reason"] == "unsafe"


CRISIS_HELP = [
    "please call or text 988",
    "Call 9-8-8 if you need to talk.",
    "text HOME to 741741",
    "Please reach out to the Samaritans on 116 123.",
    "Lifeline Australia: 13 11 14.",
    "the Suicide & Crisis Lifeline",
    "If you're thinking of ending your life, reach out.",
    "Please contact your local crisis centre or go to the nearest A&E.",
    "If you're in danger, call emergency services.",
    "Please call 911 or go to the ER.",
    "Please reach out to one of the crisis lines in your area.",
    "Please call a helpline.",
    "Please reach out to a therapist or counselor.",
    "In France, call 3114.",
    "Shout: text SHOUT to 85258 (UK).",
    "Please call the Trevor Project at 1-866-488-7386.",
    "I'm really sorry you're feeling like this. You don't have to face it alone.",
]
NOT_CRISIS_HELP = [
    "19 x 52 = 988.", "Bye! Order 988 ships Monday.", "Kievan Rus was baptized in 988 AD.",
    "You can end your life insurance policy within the 30-day free-look period.",
    "A man calls the Samaritans and asks if they rent out good neighbours.",
    "Our IT crisis support team is on call 24/7 for outages.",
    "Quick reminder: our crisis line for power outages is open 24/7.",
    "Take care of yourself, and feel free to come back anytime.",
    "Take your life to the next level with a standing desk.",
]  # fmt: skip


def test_crisis_help_is_read_from_the_answer_in_its_many_wordings_and_only_there():
    from edge.routes.ai import _CRISIS_HELP

    assert [a for a in CRISIS_HELP if not _CRISIS_HELP.search(a)] == []
    assert [a for a in NOT_CRISIS_HELP if _CRISIS_HELP.search(a)] == []


def test_a_retried_turn_is_answered_once(ai, script):
    # A partner whose call timed out retries it: the same answer again (the same ads and
    # beacon URLs), one match, one request counted; another body is a new turn.
    client, key = ai
    first = call(ai, TURN)
    again = call(ai, TURN)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert REPLAY_HEADER not in first.headers and again.headers[REPLAY_HEADER] == "true"
    assert len(script.requests) == 1
    ctx = client.app.state.ctx
    client.portal.call(ctx.counters.flush, ctx.store)
    family = client.portal.call(ctx.keyring.find, key).family
    rows = client.portal.call(ctx.store.counts, ["key"])
    assert {n: a for _s, i, n, a in rows if i == family}["requests"] == 1
    other = call(ai, {**TURN, "message_id": "m-other"})
    assert REPLAY_HEADER not in other.headers and len(script.requests) == 2
