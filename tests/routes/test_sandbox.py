"""The sandbox host: /ugc/v1/process (and production's /v1/ugc/process) on the static
catalogue, 1 in 5 no-match by post_id, 400/401, no billing, no AI, explain."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx2 as httpx
import pytest

from edge.beacons import read_impression_token
from edge.partner.flow import sandbox_no_match
from edge.qa.server import EdgeProcess
from edge.settings import SettingsError
from tests.conftest import assert_error_shape, issue_key
from tests.routes.conftest import cli_key, post_json

PATH = "/ugc/v1/process"
DOG = "my pup will not touch his kibble, any ideas?"
# post_ids the sandbox answers with matches (and one it answers with no-match), found once
MATCHING_IDS = [f"post-{i}" for i in range(40) if not sandbox_no_match(f"post-{i}")]
NO_MATCH_ID = next(f"post-{i}" for i in range(40) if sandbox_no_match(f"post-{i}"))


@pytest.fixture
def sandbox(make_client):
    client = make_client(env="sandbox")
    return client, issue_key(client, "ugc")


def call(sandbox, body):
    client, key = sandbox
    return post_json(client, PATH, body, key)


def test_top_semantic_matches_in_the_production_schema(sandbox):
    r = call(sandbox, {"post_id": MATCHING_IDS[0], "message": DOG})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"post_id", "ads"} and body["post_id"] == MATCHING_IDS[0]
    assert body["ads"] and body["ads"][0]["ad_id"] in {"ad-dog-food", "ad-dog-treats"}
    for ad in body["ads"]:
        assert set(ad) == {
            "ad_id", "title", "cta", "click_through_url", "advertiser_name", "ttl_seconds",
            "pixel_trackers", "click_url",
        }  # fmt: skip


def test_about_one_post_in_five_is_no_match_by_a_hash_of_post_id(sandbox):
    share = sum(sandbox_no_match(f"partner-post-{i}") for i in range(2000)) / 2000
    assert 0.17 <= share <= 0.23
    body = {"post_id": NO_MATCH_ID, "message": DOG}
    first, again = call(sandbox, body), call(sandbox, body)
    assert first.json() == again.json() == {"no_ad_retry_after_seconds": 900}


def test_the_same_post_gets_the_same_answer(sandbox):
    body = {"post_id": MATCHING_IDS[1], "message": "which trail shoes grip on wet rock?"}
    first, again = call(sandbox, body).json(), call(sandbox, body).json()
    assert [a["ad_id"] for a in first["ads"]] == [a["ad_id"] for a in again["ads"]]


def test_unsafe_content_gets_no_ad_in_the_sandbox_too(sandbox):
    body = {"post_id": MATCHING_IDS[2], "message": "Breaking: earthquake kills dozens downtown"}
    r = call(sandbox, body).json()
    assert set(r) == {"no_ad_retry_after_seconds"}


def test_explain_says_why(sandbox):
    matched = call(sandbox, {"post_id": MATCHING_IDS[3], "message": DOG, "explain": True}).json()
    why = matched["explain"]
    assert why["outcome"] == "matched"
    assert why["ads"][0]["ad_id"] == matched["ads"][0]["ad_id"]
    assert 0 < why["ads"][0]["relevancy_score"] <= 1
    assert why["matcher"]  # the matcher's own account: safety, location, gates, scores
    sampled = call(sandbox, {"post_id": NO_MATCH_ID, "message": DOG, "explain": True}).json()
    assert sampled["no_ad_retry_after_seconds"] == 900
    assert sampled["explain"]["reason"] == "sandbox_sample"
    plain = call(sandbox, {"post_id": MATCHING_IDS[3], "message": DOG, "explain": False}).json()
    assert "explain" not in plain


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": DOG}, "post_id"),
        ({"post_id": "p", "message": ""}, "message"),
        ({"post_id": "p", "message": "x" * 10_001}, "message"),
        ({"post_id": "p", "message": DOG, "explain": "yes"}, "explain"),
        ({"post_id": "p", "message": DOG, "geo_target": {"lat": 100, "lon": 0}}, "geo_target.lat"),
    ],
)
def test_malformed_body_is_400(sandbox, body, field):
    assert assert_error_shape(call(sandbox, body), 400)["field"] == field


def test_unparsable_body_is_400(sandbox):
    client, key = sandbox
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    assert_error_shape(client.post(PATH, content=b'{"post_id":', headers=headers), 400)


@pytest.mark.parametrize("kind", ["none", "production", "ai"])
def test_without_a_valid_sandbox_ugc_key_is_401(sandbox, kind):
    client, _ = sandbox
    key = {
        "none": None,
        "production": issue_key(client, "ugc", env="production"),
        "ai": issue_key(client, "ai"),
    }[kind]
    assert_error_shape(post_json(client, PATH, {"post_id": "p", "message": DOG}, key), 401)


def test_no_billing_from_sandbox_pixels(make_client, script):
    client = make_client(env="sandbox", matcher=script)
    script.ad_ids = ("ad-trail-shoes",)  # a CPM ad set: it would bill in production
    post_id = MATCHING_IDS[4]
    ad = post_json(client, PATH, {"post_id": post_id, "message": "x"}, issue_key(client, "ugc"))
    pixel = ad.json()["ads"][0]["pixel_trackers"][-1]["url"]
    ctx = client.app.state.ctx
    token = parse_qs(urlsplit(pixel).query)["t"][0]
    claims = read_impression_token(ctx.signer, token, surface="ugc", env="sandbox", now=ctx.clock())
    assert claims.env == "sandbox" and claims.cpm_usd is None


def test_the_production_path_is_the_same_route(sandbox):
    # Moving from the sandbox to production changes only the host and the key.
    client, key = sandbox
    for post_id in (MATCHING_IDS[2], NO_MATCH_ID):
        body = {"post_id": post_id, "message": DOG, "explain": True}
        here, there = (post_json(client, p, body, key) for p in (PATH, "/v1/ugc/process"))
        assert here.status_code == there.status_code == 200
        a, b = here.json(), there.json()
        assert set(a) == set(b) and a["explain"]["outcome"] == b["explain"]["outcome"]
        assert [ad["ad_id"] for ad in a.get("ads", [])] == [ad["ad_id"] for ad in b.get("ads", [])]
    assert_error_shape(post_json(client, "/v1/ugc/process", {"post_id": "p"}, key), 400)
    assert_error_shape(post_json(client, "/v1/ugc/process", {"post_id": "p"}, None), 401)


def test_sandbox_paths_only(make_client, sandbox, tmp_path):
    client, _key = sandbox
    body = {"post_id": "p", "message": DOG}
    assert_error_shape(post_json(client, "/v1/ai/process", body, issue_key(client, "ai")), 404)
    assert client.get("/ugc/health").status_code == 200
    prod = make_client(db=tmp_path / "production.db")
    assert_error_shape(post_json(prod, PATH, body, issue_key(prod, "ugc")), 404)


def test_a_database_serves_one_environment(make_client, tmp_path):
    # On one database the sandbox's test traffic would count in production's reports, and
    # a sandbox key would read them: the second environment is refused at start.
    make_client(env="production", db=tmp_path / "edge.db")
    with pytest.raises(
        SettingsError,
        match=r"^EDGE_DB \(--db\): this database serves the "
        r"production environment; a sandbox edge needs a database of its own",
    ):
        make_client(env="sandbox", db=tmp_path / "edge.db")
    make_client(env="production", db=tmp_path / "edge.db")  # its own environment: served
    make_client(env="sandbox", db=tmp_path / "sandbox.db")


@pytest.mark.slow
def test_sandbox_through_real_http(tmp_path):
    db = tmp_path / "edge.db"
    key = cli_key(db, "sandbox", "ugc")
    prod_key = cli_key(db, "production", "ugc")
    settings = {"EDGE_CACHE_DIR": str(tmp_path / "cache")}
    with (
        EdgeProcess(db=db, env="sandbox", settings=settings) as edge,
        httpx.Client(base_url=edge.url, headers={"X-API-Key": key}) as http,
    ):
        assert http.get("/ugc/health").status_code == 200
        r = http.post(PATH, json={"post_id": MATCHING_IDS[0], "message": DOG})
        assert r.status_code == 200, edge.output()
        assert r.json()["ads"][0]["ad_id"] in {"ad-dog-food", "ad-dog-treats"}
        r = http.post(PATH, json={"post_id": NO_MATCH_ID, "message": DOG})
        assert r.json() == {"no_ad_retry_after_seconds": 900}
        r = http.post("/v1/ugc/process", json={"post_id": MATCHING_IDS[0], "message": DOG})
        assert r.status_code == 200 and r.json()["ads"][0]["ad_id"] in {
            "ad-dog-food",
            "ad-dog-treats",
        }
        assert_error_shape(
            http.post(PATH, content=b"{", headers={"Content-Type": "application/json"}), 400
        )
        r = http.post(PATH, json={"post_id": "p", "message": DOG}, headers={"X-API-Key": prod_key})
        assert_error_shape(r, 401)
        assert_error_shape(http.post("/v1/ai/process", json={}), 404)
        assert http.get("/v1/ad-manager/campaigns").status_code == 401  # a UGC key
