"""POST /v1/ugc/process: body rules, geo, the three 200 shapes."""

from __future__ import annotations

import datetime as dt
import time
from urllib.parse import parse_qs, urlsplit

import httpx2 as httpx
import pytest
from starlette.testclient import TestClient

from edge.beacons import read_impression_token
from edge.qa.server import EdgeProcess
from edge.settings import RateLimit
from tests.conftest import assert_error_shape, issue_key
from tests.routes.conftest import cli_key, post_json

PATH = "/v1/ugc/process"
POST = {"post_id": "p-42", "message": "my pup will not touch his kibble"}


@pytest.fixture
def prod(make_client, script):
    client = make_client(matcher=script)
    return client, issue_key(client, "ugc")


def call(prod, body, **headers):
    client, key = prod
    return post_json(client, PATH, body, key, **headers)


# -- keys (401) ------------------------------------------------------------------------------------


@pytest.mark.parametrize("product", [None, "ai", "ad-manager", "bogus"])
def test_missing_invalid_or_wrong_product_key_is_401(prod, product, script):
    client, _ = prod
    key = {None: None, "bogus": "prod-ugc-nope"}.get(product) or (
        issue_key(client, product) if product else None
    )
    r = post_json(client, PATH, POST, key)
    err = assert_error_shape(r, 401, "unauthorized")
    assert err["field"] == "X-API-Key"
    assert r.headers["WWW-Authenticate"] == 'ApiKey header="X-API-Key"'  # RFC 9110's challenge
    assert script.requests == []  # nothing was matched for an unknown caller


def test_sandbox_key_is_401_in_production(prod):
    client, _ = prod
    key = issue_key(client, "ugc", env="sandbox")
    assert_error_shape(post_json(client, PATH, POST, key), 401)


# -- body rules (400) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": "hello"}, "post_id"),
        ({"post_id": "p", "message": ""}, "message"),
        ({"post_id": "p", "message": "   \n"}, "message"),
        ({"post_id": "p"}, "message"),
        ({"post_id": "p", "message": "x" * 10_001}, "message"),
        ({"post_id": "", "message": "hi"}, "post_id"),
        ({"post_id": 42, "message": "hi"}, "post_id"),
        ({"post_id": "p", "message": ["hi"]}, "message"),
        ({"post_id": "p", "message": "hi", "created_at": 1700000000}, "created_at"),
        ({"post_id": "p", "message": "hi", "geo_target": "US-CA"}, "geo_target"),
        ({"post_id": "p", "message": "hi", "geo_target": {"lat": "37"}}, "geo_target.lat"),
        ({"post_id": "p", "message": "hi", "geo_target": {"zipcode": 94107}}, "geo_target.zipcode"),
        ({"post_id": "p", "message": "hi", "geo_target": {"zip": "94107"}}, "geo_target.zip"),
        ({"post_id": "p", "message": "hi", "geo_tagret": {}}, "geo_tagret"),
        ({"post_id": "p", "message": "hi", "explain": True}, "explain"),  # sandbox only
        ([POST], "body"),
        ("just a string", "body"),
    ],
)
def test_invalid_bodies_are_400_naming_the_field(prod, body, field, script):
    err = assert_error_shape(call(prod, body), 400, "bad_request")
    assert err["field"] == field
    assert field.split(".")[-1] in err["message"]
    assert script.requests == []


def test_message_of_exactly_10000_characters_is_accepted(prod, script):
    r = call(prod, {"post_id": "p", "message": "é" * 10_000})  # characters, not bytes
    assert r.status_code == 200
    assert len(script.last.content) == 10_000


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"post_id": "p",}'])
def test_malformed_json_is_400(prod, raw):
    client, key = prod
    r = client.post(
        PATH, content=raw, headers={"X-API-Key": key, "Content-Type": "application/json"}
    )
    assert_error_shape(r, 400, "bad_request")


def test_wrong_content_type_is_415(prod):
    client, key = prod
    r = client.post(
        PATH, content=b"post_id=p", headers={"X-API-Key": key, "Content-Type": "text/plain"}
    )
    assert assert_error_shape(r, 415)["field"] == "Content-Type"


def test_oversized_body_is_413(make_client, script):
    client = make_client(max_body_bytes=2048, matcher=script)
    key = issue_key(client, "ugc")
    r = post_json(client, PATH, {"post_id": "p", "message": "x" * 4000}, key)
    assert_error_shape(r, 413, "payload_too_large")


# -- created_at --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-05-01T12:30:00Z", "2026-05-01T12:30:00+00:00"),
        ("2026-05-01t12:30:00.250z", "2026-05-01T12:30:00.250+00:00"),
        ("2026-05-01T14:30:00+02:00", "2026-05-01T12:30:00+00:00"),
        ("2026-05-01T12:30:00", "2026-05-01T12:30:00+00:00"),  # no offset: UTC
        (None, None),
    ],
)
def test_created_at_is_parsed_as_rfc3339(prod, script, value, expected):
    assert call(prod, {**POST, "created_at": value}).status_code == 200
    want = None if expected is None else dt.datetime.fromisoformat(expected).timestamp()
    assert script.last.created_at == want


@pytest.mark.parametrize(
    "value", ["yesterday", "2026-05-01", "2026-13-01T00:00:00Z", "", "1700000000"]
)
def test_bad_created_at_is_400(prod, value):
    assert (
        assert_error_shape(call(prod, {**POST, "created_at": value}), 400)["field"] == "created_at"
    )


# -- geo (geo_target rules; X-Forwarded-For) --------------------------------------------------


def geo_of(prod, script, geo_target=None, **headers):
    body = dict(POST) if geo_target is None else {**POST, "geo_target": geo_target}
    r = call(prod, body, **headers)
    assert r.status_code == 200, r.text
    return script.last.geo


def test_any_one_signal_is_passed_on(prod, script):
    assert geo_of(prod, script, {"zipcode": "94107-1234"}).zipcode == "94107"
    assert geo_of(prod, script, {"state": "ca"}).state == "US-CA"
    assert geo_of(prod, script, {"state": "US-MN"}).state == "US-MN"
    assert geo_of(prod, script, {"dma": "807"}).dma == "807"
    city = geo_of(prod, script, {"city": "Austin", "state": "TX"})
    assert (city.city, city.state, city.country) == ("Austin", "US-TX", "US")
    abroad = geo_of(prod, script, {"state": "GB-ENG"})
    assert (abroad.state, abroad.country) == ("GB-ENG", "GB")  # the prefix names the country
    point = geo_of(prod, script, {"lat": 37.77, "lon": -122.42})
    assert (point.lat, point.lon) == (37.77, -122.42)


def test_country_only_and_lone_coordinates_are_no_signal(prod, script):
    assert geo_of(prod, script, {"country": "US"}) is None
    assert geo_of(prod, script, {"lat": 37.77}) is None
    assert geo_of(prod, script, {"lon": -122.42}) is None
    lone = geo_of(prod, script, {"lat": 37.77, "zipcode": "94107"})
    assert (lone.lat, lone.lon, lone.zipcode) == (None, None, "94107")


def test_a_null_geo_field_is_an_absent_one(prod, script):
    # Found by the fuzz test: the routes took null, the document said string (both now agree).
    geo = geo_of(prod, script, {"zipcode": None, "state": "CA", "lat": None, "lon": None})
    assert (geo.state, geo.zipcode, geo.lat) == ("US-CA", None, None)


@pytest.mark.parametrize(
    ("geo", "field"),
    [
        ({"lat": 91, "lon": 0}, "geo_target.lat"),
        ({"lat": -90.5, "lon": 0}, "geo_target.lat"),
        ({"lat": 0, "lon": 180.01}, "geo_target.lon"),
        ({"lat": True, "lon": 0}, "geo_target.lat"),
        ({"zipcode": "9410"}, "geo_target.zipcode"),
        ({"dma": "LA"}, "geo_target.dma"),
        ({"state": "California"}, "geo_target.state"),
        ({"country": "USA"}, "geo_target.country"),
        ({"state": "GB-ENG", "country": "US"}, "geo_target.state"),
    ],
)
def test_malformed_geo_values_are_400(prod, geo, field):
    assert assert_error_shape(call(prod, {**POST, "geo_target": geo}), 400)["field"] == field


def test_a_code_too_long_for_its_shape_is_told_the_shape(prod):
    # "Illinois" is refused for its shape, not only for its length.
    err = assert_error_shape(call(prod, {**POST, "geo_target": {"state": "Illinois"}}), 400)
    assert err["message"] == (
        "geo_target.state must be ISO 3166-2 (US-CA) or a bare code (CA) (got 8 characters)"
    )


def test_x_forwarded_for_is_the_end_users_location(prod, script):
    geo = geo_of(prod, script, **{"X-Forwarded-For": "8.8.8.8"})
    assert (geo.state, geo.zipcode, geo.country) == ("US-CA", "94043", "US")
    geo = geo_of(prod, script, **{"X-Forwarded-For": "128.101.101.101, 10.0.0.1"})
    assert geo.state == "US-MN"  # the leftmost hop is the originating client
    assert geo_of(prod, script, **{"X-Forwarded-For": "not-an-ip"}) is None
    assert geo_of(prod, script) is None


def test_geo_target_wins_over_x_forwarded_for_unless_it_carries_no_signal(prod, script):
    xff = {"X-Forwarded-For": "8.8.8.8"}
    assert geo_of(prod, script, {"state": "US-MN"}, **xff).state == "US-MN"
    assert geo_of(prod, script, {"country": "US"}, **xff).state == "US-CA"


# -- the three 200 shapes ------------------------------------------------


def test_matched_ads_carry_the_spec_fields_and_the_edge_pixel(prod, script):
    script.ad_ids = ("ad-dog-food", "ad-trail-shoes")
    r = call(prod, POST)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    body = r.json()
    assert set(body) == {"post_id", "ads"} and body["post_id"] == "p-42"
    dog, shoes = body["ads"]
    assert set(dog) == {
        "ad_id", "title", "cta", "click_through_url", "advertiser_name", "ttl_seconds",
        "pixel_trackers", "click_url",
    }  # fmt: skip
    assert dog["ad_id"] == "ad-dog-food"
    assert dog["title"] == "Dinner your dog will finish"
    assert dog["click_through_url"] == "https://pets.example.com/kibble?utm_source=edge&x=1"
    assert dog["advertiser_name"] == "Happy Paws Pet Food" and dog["ttl_seconds"] == 900
    acme, edge_pixel = dog["pixel_trackers"]
    assert acme == {
        "vendor": "acme",
        "tracker_type": "impression",
        "url": "https://px.example.com/i?ad=dog",
    }
    assert edge_pixel["tracker_type"] == "impression"
    url = urlsplit(edge_pixel["url"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == "http://127.0.0.1:8000/dea/ugc/impression"
    ctx = prod[0].app.state.ctx
    claims = read_impression_token(
        ctx.signer, parse_qs(url.query)["t"][0], surface="ugc", env="production", now=ctx.clock()
    )
    assert (claims.ad_id, claims.post_id, claims.cpm_usd) == ("ad-dog-food", "p-42", None)
    shoe_token = parse_qs(urlsplit(shoes["pixel_trackers"][-1]["url"]).query)["t"][0]
    shoe = read_impression_token(
        ctx.signer, shoe_token, surface="ugc", env="production", now=ctx.clock()
    )
    assert shoe.cpm_usd == 12.5  # a CPM ad set bills per impression in production


def test_match_request_is_scoped_to_the_post(prod, script):
    call(prod, POST)
    req = script.last
    # The partner's own post: scoped to its key family (edge.threads).
    assert req.product == "ugc" and req.post_id == req.thread_id
    assert req.thread_id.startswith("ugc:key_") and req.thread_id.endswith(":p-42")
    assert req.content == POST["message"] and req.max_ads == 3


def test_empty_is_post_id_and_an_empty_ads_array(prod, script):
    script.outcome, script.reason = "empty", "suppressed"
    assert call(prod, POST).json() == {"post_id": "p-42", "ads": []}


def test_no_match_is_the_retry_window_only(prod, script):
    script.outcome, script.retry_after, script.reason = "no_match", 7200, "unsafe"
    assert call(prod, POST).json() == {"no_ad_retry_after_seconds": 7200}


def test_outcomes_are_counted_per_key_and_ad(prod, script):
    client, _ = prod
    call(prod, POST)
    script.outcome, script.retry_after = "no_match", 600
    call(prod, {**POST, "post_id": "p-43"})  # another post: the same one would be a retry
    rows = {(s, c): n for s, _i, c, n in client.app.state.ctx.counters.take()}
    assert rows[("key", "requests")] == 2
    assert rows[("key", "matches")] == 1 and rows[("key", "no_matches")] == 1
    assert rows[("ad", "matches")] == 1


# -- 429 and 502 -------------------------------------------------------------------


def test_rate_limit_is_per_key_with_ietf_headers(make_client, script):
    client = make_client(rate_limit_ugc=RateLimit(2, 60.0), matcher=script)
    key, other = issue_key(client, "ugc"), issue_key(client, "ugc")
    first = post_json(client, PATH, POST, key)
    assert first.headers["RateLimit-Policy"] == '"ugc";q=2;w=60'
    assert first.headers["RateLimit"] == '"ugc";r=1;t=30'
    assert post_json(client, PATH, POST, key).status_code == 200
    r = post_json(client, PATH, POST, key)
    assert_error_shape(r, 429, "rate_limited")
    assert r.headers["Retry-After"] == "30" and r.headers["RateLimit"].startswith('"ugc";r=0')
    assert post_json(client, PATH, POST, other).status_code == 200
    client.app.state.ctx.clock.advance(30)
    assert post_json(client, PATH, POST, key).status_code == 200


def test_matcher_failure_is_502_with_retry_after(prod, script):
    script.error = RuntimeError("index corrupted")
    r = call(prod, POST)
    assert_error_shape(r, 502, "upstream_unavailable")
    assert int(r.headers["Retry-After"]) >= 1
    assert "index corrupted" not in r.text


def test_matcher_past_its_deadline_is_502_not_a_hang(make_client, script):
    client = make_client(match_timeout_ms=50, matcher=script)
    script.delay = 5.0
    started = time.monotonic()
    r = post_json(client, PATH, POST, issue_key(client, "ugc"))
    assert time.monotonic() - started < 2.0
    assert_error_shape(r, 502, "upstream_unavailable")
    assert int(r.headers["Retry-After"]) >= 1


# -- geofence (403 for non-US callers in production) ----------------------------------------

GB_CLIENT = ("81.2.69.160", 40000)  # GB in the bundled test geo database


@pytest.mark.parametrize(
    ("path", "product"),
    [(PATH, "ugc"), ("/v1/ai/process", "ai"), ("/ugc/process", "ugc")],
)
def test_non_us_caller_is_403_in_production(make_client, script, path, product):
    client = make_client(legacy_api=True, matcher=script)
    key = issue_key(client, product)
    body = {**POST, "message_id": "m", "content": "x"} if product == "ai" else POST
    abroad = TestClient(client.app, client=GB_CLIENT, raise_server_exceptions=False)
    assert_error_shape(post_json(abroad, path, body, key), 403)
    assert script.requests == []
    # The end user's X-Forwarded-For is targeting, not the caller's address.
    r = post_json(client, PATH, POST, issue_key(client, "ugc"), **{"X-Forwarded-For": GB_CLIENT[0]})
    assert r.status_code == 200


def test_sandbox_has_no_geofence(make_client, script):
    client = make_client(env="sandbox", matcher=script)
    abroad = TestClient(client.app, client=GB_CLIENT, raise_server_exceptions=False)
    r = post_json(
        abroad, "/ugc/v1/process", {"post_id": "x-1", "message": "hi"}, issue_key(client, "ugc")
    )
    assert r.status_code == 200


# -- path rules ------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/ugc/process", "/ugc/v1/process", "/v1/ugc/processes"])
def test_other_paths_are_404_in_production(prod, path):
    assert_error_shape(post_json(prod[0], path, POST, prod[1]), 404)


def test_get_is_405(prod):
    client, key = prod
    assert_error_shape(client.get(PATH, headers={"X-API-Key": key}), 405)


# -- geo rules end to end, on the real matcher and the bundled catalogue ----------------------
# The catalogue's e-bike ad targets US-CA, the houseplants ad Brooklyn ZIP codes and the
# delivery ad the San Francisco DMA and a 25 km radius around the city.

EBIKE = "thinking of getting an electric bike to commute to work instead of driving"
PLANTS = "looking to buy some houseplants for my apartment"
DINNER = "too tired to cook tonight, want food delivered from a local restaurant"
SF = {"lat": 37.77, "lon": -122.42}


@pytest.fixture
def live(make_client):
    client = make_client()
    key = issue_key(client, "ugc")
    posts = iter(range(1000))

    def ads(message, geo=None, xff=None):
        body = {"post_id": f"geo-{next(posts)}", "message": message}
        if geo is not None:
            body["geo_target"] = geo
        r = post_json(client, PATH, body, key, **({"X-Forwarded-For": xff} if xff else {}))
        assert r.status_code == 200, r.text
        return [a["ad_id"] for a in r.json().get("ads", [])]

    return ads


@pytest.mark.parametrize(
    ("message", "geo", "xff", "ad", "shown"),
    [
        (EBIKE, None, None, "ad-ebike", False),  # targeted demand needs a location
        (EBIKE, {"state": "CA"}, None, "ad-ebike", True),  # any one signal is enough
        (EBIKE, {"dma": "807"}, None, "ad-ebike", True),  # a DMA inside the state
        (EBIKE, {"state": "US-MN"}, None, "ad-ebike", False),
        (EBIKE, None, "8.8.8.8", "ad-ebike", True),  # end user's IP: Mountain View, CA
        (EBIKE, None, "128.101.101.101", "ad-ebike", False),  # Minneapolis
        (EBIKE, {"country": "US"}, None, "ad-ebike", False),  # country alone: no signal
        (EBIKE, {"country": "US"}, "8.8.8.8", "ad-ebike", True),  # ... so the IP is used
        (EBIKE, {"lat": 37.77}, "8.8.8.8", "ad-ebike", True),  # lone lat: no signal
        (EBIKE, {"zipcode": "11201", "state": "CA"}, None, "ad-ebike", False),  # ZIP > state
        (PLANTS, {"zipcode": "11201", "state": "CA"}, None, "ad-houseplants", True),
        (PLANTS, {"state": "NY"}, None, "ad-houseplants", False),  # state is coarser
        (DINNER, SF, None, "ad-bay-delivery", True),
        (DINNER, {**SF, "zipcode": "11201"}, None, "ad-bay-delivery", True),  # lat+lon > ZIP
        (DINNER, {"lat": 37.77, "zipcode": "11201"}, None, "ad-bay-delivery", False),
    ],
)
def test_geo_rules_end_to_end(live, message, geo, xff, ad, shown):
    assert (ad in live(message, geo, xff)) is shown


# -- through a real uvicorn process ---------------------------------------------------------


@pytest.mark.slow
def test_partner_routes_through_real_http(tmp_path):
    db = tmp_path / "edge.db"
    ugc, ai = cli_key(db, "production", "ugc"), cli_key(db, "production", "ai")
    settings = {"EDGE_ALLOW_PRIVATE_IPS": "1", "EDGE_CACHE_DIR": str(tmp_path / "cache")}
    with EdgeProcess(db=db, settings=settings) as edge, httpx.Client(base_url=edge.url) as http:
        r = http.post(PATH, json={**POST, "post_id": "real-1"}, headers={"X-API-Key": ugc})
        assert r.status_code == 200, edge.output()
        assert r.json()["ads"][0]["ad_id"] in {"ad-dog-food", "ad-dog-treats"}
        assert r.headers["ratelimit-policy"] == '"ugc";q=50;w=1'
        body = {"post_id": "real-2", "message": EBIKE}
        r = http.post(PATH, json=body, headers={"X-API-Key": ugc, "X-Forwarded-For": "8.8.8.8"})
        assert "ad-ebike" in [a["ad_id"] for a in r.json()["ads"]]
        assert_error_shape(http.post(PATH, json=POST), 401)
        assert_error_shape(http.post(PATH, json={}, headers={"X-API-Key": ugc}), 400)
        r = http.post("/v1/ai/process", json={"content": "x"}, headers={"X-API-Key": ai})
        assert assert_error_shape(r, 422)["field"] == "message_id"
        assert_error_shape(http.post("/ugc/process", json=POST, headers={"X-API-Key": ugc}), 404)
