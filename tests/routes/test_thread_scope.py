"""Post and conversation ids are the partner's own: the matcher state behind one (its
no-match window, disables, frequency) never reaches another partner's post or conversation
of the same id, nor an AI conversation from a UGC post; a rotated key keeps it."""

from __future__ import annotations

import itertools
from urllib.parse import urlsplit

import pytest

from edge.threads import partner_thread
from matcher.catalogue import ad_number
from tests.conftest import issue_key
from tests.delivery.helpers import ORIGIN, PUB, register
from tests.routes.conftest import post_json

UGC = "/v1/ugc/process"
AI = "/v1/ai/process"
DOG = "my pup will not touch his kibble, any ideas?"
NO_DEMAND = "the committee minutes from tuesday are attached, please review section four"
CALLS = itertools.count()
ANSWER = "Try a grain-free kibble and feed at regular times."


@pytest.fixture
def client(make_client):
    return make_client(legacy_api=True)


def ugc_ads(client, key, post_id, path=UGC):
    # A new message each call: /v1 answers a repeated body from its retry memory.
    message = f"{DOG} ({next(CALLS)})"
    r = post_json(client, path, {"post_id": post_id, "message": message}, key)
    assert r.status_code == 200, r.text
    return [a["ad_id"] for a in r.json()["ads"]]


def ai_turn(client, key, conversation_id, message_id) -> list[dict]:
    """The ads of one turn of a conversation (the same prompt and answer every time)."""
    body = {
        "message_id": message_id,
        "conversation_id": conversation_id,
        "prompt": "what should I feed a picky puppy?",
        "content": ANSWER,
    }
    r = post_json(client, AI, body, key)
    assert r.status_code == 200, r.text
    return r.json()["ads"]


def ai_ads(client, key, conversation_id, message_id):
    return [a["ad_id"] for a in ai_turn(client, key, conversation_id, message_id)]


def disable(client, key, post_id, ad_id):
    r = post_json(client, "/ugc/disable", [{"post_id": post_id, "ad_id": ad_id}], key)
    assert r.status_code == 200, r.text


def test_a_no_match_window_stays_with_the_partners_post(client):
    a, b = issue_key(client, "ugc"), issue_key(client, "ugc")
    r = post_json(client, UGC, {"post_id": "shared-7", "message": NO_DEMAND}, a)
    assert "no_ad_retry_after_seconds" in r.json(), r.json()
    again = post_json(client, UGC, {"post_id": "shared-7", "message": DOG}, a).json()
    assert "no_ad_retry_after_seconds" in again  # the window holds for its own partner
    other = post_json(client, UGC, {"post_id": "shared-7", "message": DOG}, b).json()
    assert "no_ad_retry_after_seconds" not in other and other["ads"]


def test_a_disable_stays_with_the_partners_post(client):
    a, b = issue_key(client, "ugc"), issue_key(client, "ugc")
    bot = issue_key(client, "ai")
    served = ugc_ads(client, a, "shared-7")
    assert served and ad_number(served[0]) in ai_ads(client, bot, "shared-7", "m-0")
    disable(client, a, "shared-7", served[0])
    assert served[0] not in ugc_ads(client, a, "shared-7", "/ugc/process")
    assert served[0] not in ugc_ads(client, a, "shared-7")
    assert served[0] in ugc_ads(client, b, "shared-7")  # another partner's post
    assert ad_number(served[0]) in ai_ads(client, bot, "shared-7", "m-1")  # a conversation


def test_a_frequency_cap_stays_with_the_partners_conversation(client):
    a, b = issue_key(client, "ai"), issue_key(client, "ai")
    first = ai_ads(client, a, "shared-11", "m-1")[0]
    for turn in ("m-2", "m-3"):
        assert first in ai_ads(client, a, "shared-11", turn)
    assert first not in ai_ads(client, a, "shared-11", "m-4")  # capped at three turns
    assert first in ai_ads(client, b, "shared-11", "n-1")  # the other partner's first turn


def test_a_rotated_key_keeps_its_disables_and_windows(client):
    old = issue_key(client, "ugc")
    served = ugc_ads(client, old, "p-rot")
    disable(client, old, "p-rot", served[0])
    post_json(client, UGC, {"post_id": "p-miss", "message": NO_DEMAND}, old)
    new = client.get("/keys/apiKey", headers={"X-API-Key": old}).json()["apiKey"]
    assert served[0] not in ugc_ads(client, new, "p-rot")
    window = post_json(client, UGC, {"post_id": "p-miss", "message": DOG}, new).json()
    assert "no_ad_retry_after_seconds" in window


def test_a_disable_stored_under_the_bare_post_id_still_holds_for_ugc_posts(client):
    # Disables recorded before ids were scoped carry the partner's bare post id.
    ugc, bot = issue_key(client, "ugc"), issue_key(client, "ai")
    served = ugc_ads(client, ugc, "old-post")
    store = client.app.state.ctx.store
    client.portal.call(store.disable_ads, [("old-post", served[0], None)], 0.0)
    assert served[0] not in ugc_ads(client, ugc, "old-post")
    assert ad_number(served[0]) in ai_ads(client, bot, "old-post", "m-1")


def tag_ads(client, post_id):
    body = {"publisher_id": PUB, "v": "1", "page_url": "https://news.example/t/1",
            "placements": [{"slot_id": "s", "post_id": post_id, "text": DOG}]}  # fmt: skip
    r = client.post("/dea/url/placements", json=body, headers={"Origin": ORIGIN})
    assert r.status_code == 200, r.text
    ad = r.json()["placements"][0]["ad"]
    return [] if ad is None else [ad["ad_id"]]


def test_a_publishers_post_and_a_partners_post_of_one_id_stay_apart(client):
    register(client)
    key = issue_key(client, "ugc")
    served = ugc_ads(client, key, "shared-9")
    disable(client, key, "shared-9", served[0])
    assert served[0] not in ugc_ads(client, key, "shared-9")
    assert served == tag_ads(client, "shared-9")  # the partner's disable is its own


def test_scoped_ids_differ_by_product_and_family(client):
    ctx = client.app.state.ctx
    a, b = issue_key(client, "ugc"), issue_key(client, "ugc")
    ra, rb = (client.portal.call(ctx.keyring.find, k) for k in (a, b))
    assert partner_thread("ugc", ra, "x") != partner_thread("ugc", rb, "x")
    assert partner_thread("ugc", ra, "x") != partner_thread("ai", ra, "x")


# -- an AI partner's beacon URLs are its own -----------------------------------------------------

CONVERSIONS = "/v1/ad-manager/conversions"


def ai_ad(client, key, conversation_id, message_id):
    return ai_turn(client, key, conversation_id, message_id)[0]


def fire(client, url, click_id=None):
    u = urlsplit(url)
    extra = "" if click_id is None else f"&click_id={click_id}"
    r = client.get(f"{u.path}?{u.query}{extra}")
    assert r.status_code == 204, r.text


def ad_counts(client, number):
    ctx = client.app.state.ctx
    placement = ctx.matcher.catalogue.placement_by_number(number)
    rows = client.portal.call(ctx.store.counts)
    return {c: n for s, i, c, n in rows if s == "ad" and i == placement.ad.id}


def test_two_ai_partners_beacons_of_one_conversation_and_message_each_count(client):
    """Two AI partners both number a conversation "7" and its message "1" and get the
    same ad: each partner's render, view, click and conversion count as its own, never
    as a replay of the other's, whether the click is named by the partner or not."""
    a, b = issue_key(client, "ai"), issue_key(client, "ai")
    am = issue_key(client, "ad-manager")
    ads = {who: ai_ad(client, key, "7", "1") for who, key in (("a", a), ("b", b))}
    number = ads["a"]["ad_id"]
    assert ads["b"]["ad_id"] == number
    for name in ("render_impression_url", "view_impression_url", "click_url"):
        assert ads["a"][name] != ads["b"][name], name
    for who, ad in ads.items():
        fire(client, ad["render_impression_url"])
        fire(client, ad["view_impression_url"])
        fire(client, ad["click_url"], f"partner-{who}-click-7-1")
    c = ad_counts(client, number)
    assert (c["impressions"], c["viewable_impressions"], c["clicks"]) == (2, 2, 2)
    assert not {k: n for k, n in c.items() if k.startswith("invalid") and n}, c
    for who in ads:
        r = post_json(client, CONVERSIONS, {"click_id": f"partner-{who}-click-7-1"}, am)
        assert r.status_code == 200 and r.json()["counted"] is True, r.text
    # Clicks the partners do not name: each partner's derived click id is its own.
    for key in (a, b):
        ad = ai_ad(client, key, "7", "2")
        fire(client, ad["view_impression_url"])
        fire(client, ad["click_url"])
    c = ad_counts(client, number)
    assert (c["viewable_impressions"], c["clicks"]) == (4, 4)
    assert not {k: n for k, n in c.items() if k.startswith("invalid") and n}, c


def test_a_rotated_ai_key_keeps_its_beacon_urls(client):
    old = issue_key(client, "ai")
    before = ai_ad(client, old, "c-rot", "1")
    new = client.get("/keys/apiKey", headers={"X-API-Key": old}).json()["apiKey"]
    after = ai_ad(client, new, "c-rot", "1")
    assert after["ad_id"] == before["ad_id"]
    for name in ("render_impression_url", "view_impression_url", "click_url"):
        assert after[name] == before[name], name  # the same partner: one message, one count
