"""Ids and numbers read one way only: no control characters in ids, full pattern matches
(no "abc\\n" beside "abc"), ASCII digits only, on the partner and delivery APIs."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from edge.beacons import ai_beacon_urls
from tests.conftest import AI_SCOPE, assert_error_shape, issue_key
from tests.delivery.helpers import ORIGIN, PUB, register
from tests.delivery.test_events import imp_body, stored, token
from tests.routes.conftest import post_json

CONTROL = ["a\nb", "abc\n", "a\rb", "a\x00b", "a\tb", "a\u2028b", "a\u200bb", "a\x85b"]


@pytest.mark.parametrize("text", CONTROL)
def test_control_character_finds_every_kind(text):
    from edge.partner.fields import control_character

    assert control_character(text) is not None
    assert control_character("post-42 é 漢字 🐶") is None


@pytest.mark.parametrize("field", ["message_id", "conversation_id"])
@pytest.mark.parametrize("bad", ["m\n", "m\n\nc", "m\x00", "m\u2029"])
def test_ai_ids_with_control_characters_are_422(make_client, field, bad):
    client = make_client()
    key = issue_key(client, "ai")
    body = {"message_id": "m-1", "conversation_id": "c-1", "content": "puppy food", field: bad}
    err = assert_error_shape(post_json(client, "/v1/ai/process", body, key), 422)
    assert err["field"] == field


@pytest.mark.parametrize("bad", ["p-1\n", "p\r\n1", "p\x7f"])
def test_ugc_post_id_with_control_characters_is_400(make_client, bad):
    client = make_client()
    key = issue_key(client, "ugc")
    body = {"post_id": bad, "message": "my pup will not touch his kibble"}
    err = assert_error_shape(post_json(client, "/v1/ugc/process", body, key), 400)
    assert err["field"] == "post_id"


def test_legacy_ids_with_control_characters_are_400(make_client):
    client = make_client(legacy_api=True)
    key = issue_key(client, "ugc")
    r = post_json(client, "/ugc/disable", [{"post_id": "p\n", "ad_id": "a"}], key)
    assert assert_error_shape(r, 400)["field"] == "[0].post_id"
    r = post_json(client, "/ugc/impression", {"post_id": "p", "ad_id": "a\n"}, key)
    assert assert_error_shape(r, 400)["field"] == "ad_id"


def test_impression_id_with_a_trailing_newline_is_refused(make_client):
    client = make_client()
    r = client.post("/dea/url/impression", json=imp_body(token(client), iid="imp-00000001\n"))
    assert assert_error_shape(r, 400)["field"] == "impression_id"
    assert stored(client) == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("slot_id", "side\n"), ("post_id", "p-1\u2028"), ("v", "1.0\n")],
)
def test_dea_ids_with_control_characters_are_400(make_client, field, value):
    client = make_client()
    register(client)
    slot = {"slot_id": "side", "post_id": "p-1", "text": "kibble"}
    body = {
        "publisher_id": PUB,
        "v": "1.0",
        "page_url": "https://news.example/a",
        "placements": [slot],
    }
    if field == "v":
        body["v"] = value
        where = "v"
    else:
        slot[field] = value
        where = f"placements[0].{field}"
    r = client.post("/dea/url/placements", json=body, headers={"Origin": ORIGIN})
    assert assert_error_shape(r, 400)["field"] == where


def test_publisher_id_with_a_trailing_newline_is_refused(make_client):
    client = make_client()
    register(client)
    body = {
        "publisher_id": PUB + "\n",
        "v": "1",
        "page_url": "https://news.example/",
        "slots": ["s"],
    }
    r = client.post("/dea/url/keywords", json=body, headers={"Origin": ORIGIN})
    assert assert_error_shape(r, 400)["field"] == "publisher_id"


# -- ASCII digits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "zipcode",
    [
        "\u0669\u0664\u0661\u0660\u0667",
        "\uff19\uff14\uff11\uff10\uff17",
        "94107-\u0663\u0663\u0663\u0663",
    ],
)
def test_zipcode_in_other_scripts_digits_is_400(make_client, zipcode):
    client = make_client()
    key = issue_key(client, "ugc")
    body = {"post_id": "p-1", "message": "kibble", "geo_target": {"zipcode": zipcode}}
    err = assert_error_shape(post_json(client, "/v1/ugc/process", body, key), 400)
    assert err["field"] == "geo_target.zipcode"


@pytest.mark.parametrize("dma", ["\u0668\u0660\u0667"])
def test_dma_in_other_scripts_digits_is_400(make_client, dma):
    client = make_client()
    key = issue_key(client, "ugc")
    body = {"post_id": "p-1", "message": "kibble", "geo_target": {"dma": dma}}
    err = assert_error_shape(post_json(client, "/v1/ugc/process", body, key), 400)
    assert err["field"] == "geo_target.dma"


def test_created_at_in_other_scripts_digits_is_400(make_client):
    client = make_client()
    key = issue_key(client, "ugc")
    body = {
        "post_id": "p-1",
        "message": "kibble",
        "created_at": "\u0662\u0660\u0662\u0666-05-01T12:30:00Z",
    }
    err = assert_error_shape(post_json(client, "/v1/ugc/process", body, key), 400)
    assert err["field"] == "created_at"


@pytest.mark.parametrize("limit", ["\u0663", "\uff13", "+3", " 3"])
def test_ad_manager_limit_must_be_ascii_digits(make_client, limit):
    client = make_client()
    key = issue_key(client, "ad-manager")
    r = client.get("/v1/ad-manager/campaigns", params={"limit": limit}, headers={"X-API-Key": key})
    assert assert_error_shape(r, 400)["field"] == "limit"


def test_ad_manager_campaign_id_refuses_control_characters(make_client):
    client = make_client()
    key = issue_key(client, "ad-manager")
    r = client.get(
        "/v1/ad-manager/ad-sets", params={"campaign_id": "cmp-1\n"}, headers={"X-API-Key": key}
    )
    assert assert_error_shape(r, 400)["field"] == "campaign_id"


@pytest.mark.parametrize("ad_id", ["+42", " 42", "4_2", "\u0664\u0662", "\uff1042"])
def test_ai_beacon_ad_id_must_be_ascii_digits(make_client, ad_id):
    client = make_client()
    ctx = client.app.state.ctx
    render, _ = ai_beacon_urls(ctx.signer, "", 42, "m-1", "c-1", scope=AI_SCOPE)
    query = dict(parse_qsl(urlsplit(render).query, keep_blank_values=True))
    r = client.get(f"/dea/ai/impressions/render?{urlencode({**query, 'ad_id': ad_id})}")
    assert_error_shape(r, 400)
    assert stored(client) == 0


def test_ai_beacon_ids_with_control_characters_are_400(make_client):
    client = make_client()
    ctx = client.app.state.ctx
    # Signed, still refused.
    render, _ = ai_beacon_urls(ctx.signer, "", 42, "m-1\n", "c-1", scope=AI_SCOPE)
    r = client.get(render)
    assert assert_error_shape(r, 400)["field"] == "message_id"
    assert stored(client) == 0
