"""Safe headers: nosniff everywhere, CORP and no-store on /dea, Timing-Allow-Origin where useful."""

import pytest

from tests.delivery.helpers import register


@pytest.fixture
def client(make_client):
    c = make_client()
    register(c)
    return c


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/dea/url/impression"), ("GET", "/dea/ugc/impression"), ("POST", "/dea/url/hover"),
     ("GET", "/dea/health"), ("POST", "/dea/url/keywords")],
)  # fmt: skip
def test_dea_answers_are_never_cached_and_cross_origin_loadable(client, method, path):
    r = client.request(method, path)
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cross-origin-resource-policy"] == "cross-origin"


def test_timing_allow_origin_on_match_routes_and_tag_only(client):
    assert client.post("/dea/url/keywords").headers["timing-allow-origin"] == "*"
    assert "timing-allow-origin" not in client.post("/dea/url/impression").headers


def test_tag_script_keeps_its_own_cache_policy(client):
    r = client.get("/dea/tag.js")
    assert r.status_code == 200
    assert r.headers["cache-control"] != "no-store"
    assert r.headers["cross-origin-resource-policy"] == "cross-origin"
    assert r.headers["timing-allow-origin"] == "*"
    assert r.headers["x-content-type-options"] == "nosniff"


def test_partner_api_gets_nosniff_but_no_dea_headers(client):
    r = client.get("/v1/ugc/health")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "cross-origin-resource-policy" not in r.headers
