"""POST /dea/url/keywords and /dea/url/placements through HTTP, with a scripted matcher."""

import pytest

from edge.beacons import read_impression_token
from edge.delivery import schemas
from edge.delivery.validate import validate
from matcher.types import MatchResult
from tests.conftest import assert_error_shape
from tests.delivery.helpers import ORIGIN, PUB, matched, register, script

PAGE = "https://news.example/a/1"


def kw_body(**kw):
    body = {"publisher_id": PUB, "v": "1.0.0", "page_url": PAGE, "title": "Trail",
            "text": "trail running shoes for wet rock", "slots": ["side", "foot"]}  # fmt: skip
    body.update(kw)
    return {k: v for k, v in body.items() if v is not None}


@pytest.fixture
def client(make_client):
    c = make_client()
    register(c)
    c.headers["Origin"] = ORIGIN  # browsers send it on every POST; the match routes need it
    return c


def read(client, token, surface):
    ctx = client.app.state.ctx
    return read_impression_token(
        ctx.signer, token, surface=surface, env=ctx.settings.env, now=ctx.clock()
    )


def test_keywords_fills_slots_best_first_with_url_tokens(client, monkeypatch):
    fake = script(monkeypatch, {"Trail": matched("ad-1", "ad-2")})
    r = client.post("/dea/url/keywords", json=kw_body(), headers={"Origin": ORIGIN})
    assert r.status_code == 200, r.text
    body = r.json()
    validate(body, schemas.KEYWORDS_RESPONSE)
    assert body["safe"] is True
    assert [p["ad"]["ad_id"] for p in body["placements"]] == ["ad-1", "ad-2"]
    ad = body["placements"][0]["ad"]
    assert ad["click_through_url"] == "https://adv.example/ad-1?utm_source=x&a=b"
    assert ad["description"] == "About ad-1" and ad["relevancy_score"] == 0.8
    claims = read(client, ad["impression_token"], "url")
    assert (claims.ad_id, claims.publisher_id, claims.slot_id) == ("ad-1", PUB, "side")
    assert claims.cpm_usd == 4.0 and claims.campaign_id == "cmp-ad-1"
    assert body["keywords"] == ["kw-ad-1", "shared", "kw-ad-2"]
    req = fake.requests[0]
    # The page is the thread, scoped to its publisher (edge.threads).
    assert (req.thread_id, req.post_id) == (f"tag:{PUB}:{PAGE}", None)
    assert (req.product, req.max_ads) == ("ugc", 2)
    assert req.content == "Trail\n\ntrail running shoes for wet rock"
    # The client (216.160.83.56) is located and passed on for geo targeting.
    assert req.geo.zipcode == "98354" and req.geo.state == "US-WA"


def test_fewer_ads_than_slots_leaves_the_rest_empty(client, monkeypatch):
    script(monkeypatch, {"Trail": matched("ad-1", "ad-1")})  # duplicates never fill two slots
    body = client.post("/dea/url/keywords", json=kw_body()).json()
    assert body["placements"][0]["ad"]["ad_id"] == "ad-1"
    assert body["placements"][1] == {"slot_id": "foot", "ad": None, "reason": "no_relevant_demand"}


def test_unsafe_page_gets_no_ads(client, monkeypatch):
    script(
        monkeypatch, {"Trail": MatchResult("no_match", retry_after_seconds=600, reason="unsafe")}
    )
    body = client.post("/dea/url/keywords", json=kw_body()).json()
    validate(body, schemas.KEYWORDS_RESPONSE)
    assert body["safe"] is False and body["keywords"] == []
    assert all(p["ad"] is None and p["reason"] == "unsafe" for p in body["placements"])


def test_empty_page_text_does_not_call_the_matcher(client, monkeypatch):
    fake = script(monkeypatch, {})
    body = client.post("/dea/url/keywords", json=kw_body(title=" ", text="")).json()
    assert fake.requests == [] and all(p["ad"] is None for p in body["placements"])


def test_placements_group_by_text_and_post_and_keep_request_order(client, monkeypatch):
    fake = script(
        monkeypatch,
        {
            "dogs": matched("ad-dog"),
            "page": matched("ad-1", "ad-2"),
            "news": MatchResult("no_match", retry_after_seconds=3600, reason="backoff"),
            "quiet": MatchResult("empty", reason="suppressed"),
        },
    )
    body = {"publisher_id": PUB, "v": "1", "page_url": PAGE, "placements": [
        {"slot_id": "p-1-ad", "post_id": "p-1", "text": "dogs love kibble"},
        {"slot_id": "late-1", "text": "page text"},
        {"slot_id": "p-2-ad", "post_id": "p-2", "text": "news of the day"},
        {"slot_id": "late-2", "text": "page text"},
        {"slot_id": "p-3-ad", "post_id": "p-3", "text": "quiet thread"},
    ]}  # fmt: skip
    r = client.post("/dea/url/placements", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    validate(out, schemas.PLACEMENTS_RESPONSE)
    slots = out["placements"]
    assert [p["slot_id"] for p in slots] == ["p-1-ad", "late-1", "p-2-ad", "late-2", "p-3-ad"]
    assert slots[0]["ad"]["ad_id"] == "ad-dog" and slots[0]["post_id"] == "p-1"
    assert read(client, slots[0]["ad"]["impression_token"], "ugc").post_id == "p-1"
    assert [slots[1]["ad"]["ad_id"], slots[3]["ad"]["ad_id"]] == ["ad-1", "ad-2"]
    assert read(client, slots[1]["ad"]["impression_token"], "url").slot_id == "late-1"
    assert slots[2] == {"slot_id": "p-2-ad", "post_id": "p-2", "ad": None, "reason": "backoff",
                        "retry_after_seconds": 3600}  # fmt: skip
    assert slots[4]["reason"] == "suppressed"
    assert len(fake.requests) == 4  # the two late slots shared one match
    ugc = next(r for r in fake.requests if r.post_id == f"tag:{PUB}:p-1")
    assert ugc.thread_id == f"tag:{PUB}:p-1" and ugc.max_ads == 1


def test_counters_per_publisher_and_ad(client, monkeypatch):
    script(monkeypatch, {"Trail": matched("ad-1")})
    client.post("/dea/url/keywords", json=kw_body())
    pending = {(s, i, c): a for s, i, c, a in client.app.state.ctx.counters.take()}
    assert pending[("publisher", PUB, "requests")] == 2
    assert pending[("publisher", PUB, "matches")] == 1
    assert pending[("publisher", PUB, "no_matches")] == 1
    assert pending[("ad", "ad-1", "matches")] == 1


def test_text_plain_body_is_accepted(client, monkeypatch):
    import orjson

    script(monkeypatch, {"Trail": matched("ad-1")})
    r = client.post(
        "/dea/url/keywords", content=orjson.dumps(kw_body()), headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 200 and r.json()["placements"][0]["ad"]["ad_id"] == "ad-1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (kw_body(extra=1), "extra"),
        (kw_body(slots=None), "slots"),
        (kw_body(slots=[]), "slots"),
        (kw_body(slots=["a"] * 2), "slots[1]"),
        (kw_body(slots=[f"s{i}" for i in range(21)]), "slots"),
        (kw_body(slots=[""]), "slots[0]"),
        (kw_body(page_url="javascript:alert(1)"), "page_url"),
        (kw_body(text="x" * 20_001), "text"),
        (kw_body(v=3), "v"),
        (kw_body(publisher_id="has space"), "publisher_id"),
        ([1, 2], None),
    ],
)
def test_keywords_validation_names_the_field(client, body, field):
    err = assert_error_shape(client.post("/dea/url/keywords", json=body), 400)
    assert err.get("field") == field


@pytest.mark.parametrize(
    ("placements", "field"),
    [
        ([{"slot_id": "a", "text": "t", "color": "red"}], "placements[0].color"),
        ([{"slot_id": "a"}], "placements[0].text"),
        ([{"slot_id": "a", "text": "t"}, {"slot_id": "a", "text": "u"}], "placements[1].slot_id"),
        ([{"slot_id": "a", "text": "x" * 10_001}], "placements[0].text"),
        ([{"slot_id": "a", "text": "t", "post_id": 5}], "placements[0].post_id"),
    ],
)
def test_placements_validation_names_the_field(client, placements, field):
    body = {"publisher_id": PUB, "v": "1", "page_url": PAGE, "placements": placements}
    err = assert_error_shape(client.post("/dea/url/placements", json=body), 400)
    assert err["field"] == field


def test_bad_json_and_media_type(client):
    r = client.post("/dea/url/keywords", content=b"{nope", headers={"Content-Type": "text/plain"})
    assert_error_shape(r, 400)
    r = client.post("/dea/url/keywords", content=b"{}", headers={"Content-Type": "text/html"})
    assert_error_shape(r, 415)


def test_unknown_publisher_and_foreign_origin_are_refused(client, monkeypatch):
    script(monkeypatch, {"Trail": matched("ad-1")})
    err = assert_error_shape(
        client.post("/dea/url/keywords", json=kw_body(publisher_id="pub-x")),
        403,
        "unknown_publisher",
    )
    assert err["field"] == "publisher_id"
    register(client, "pub-2", "https://other.example")
    r = client.post(
        "/dea/url/keywords", json=kw_body(), headers={"Origin": "https://other.example"}
    )
    assert_error_shape(r, 403, "origin_not_allowed")


def test_matcher_failure_is_a_502(client, monkeypatch):
    from edge.errors import BadGateway

    async def broken(ctx, request, *, lane="partner"):
        raise BadGateway("down", headers={"Retry-After": "1"})

    monkeypatch.setattr("edge.matching.match", broken, raising=False)
    r = client.post("/dea/url/keywords", json=kw_body())
    assert_error_shape(r, 502)
    assert r.headers["retry-after"] == "1"
