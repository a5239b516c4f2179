"""Routes that take no query parameters refuse any, naming it: the /dea POSTs (in the
beacon lane's direct form as on the stack) with 400, the /v1 POSTs with the route's
validation status (400; 422 on /v1/ai/process). A stray parameter is never ignored."""

from __future__ import annotations

import pytest

from edge.routes import dea
from tests.conftest import assert_error_shape, issue_key
from tests.delivery.helpers import ORIGIN, register
from tests.delivery.test_events import imp_body, stored, token

DEA_POSTS = [
    dea.KEYWORDS,
    dea.PLACEMENTS,
    dea.URL_IMPRESSION,
    dea.UGC_IMPRESSION,
    dea.HOVER,
    dea.FAILURES,
    dea.URL_CLICK,
    dea.UGC_CLICK,
]
# (make_client overrides, key product, path, status, a body the route accepts)
V1_POSTS = [
    ({}, "ugc", "/v1/ugc/process", 400, {"post_id": "p-1", "message": "dog food"}),
    ({}, "ai", "/v1/ai/process", 422, {"message_id": "m-1", "content": "dog food"}),
    ({}, "ad-manager", "/v1/ad-manager/conversions", 400, {"click_id": "clk-00000001"}),
    ({"env": "sandbox"}, "ugc", "/ugc/v1/process", 400, {"post_id": "p-1", "message": "x"}),
    ({"env": "sandbox"}, "ugc", "/v1/ugc/process", 400, {"post_id": "p-1", "message": "x"}),
]


@pytest.fixture
def client(make_client):
    c = make_client()
    register(c)
    c.headers["Origin"] = ORIGIN
    return c


@pytest.mark.parametrize("path", DEA_POSTS)
@pytest.mark.parametrize("query", ["x=1", "debug", "v=1&x=1", "=1"])
def test_a_dea_post_refuses_any_query_parameter(client, path, query):
    surface = "ugc" if path.startswith("/dea/ugc/") else "url"
    body = imp_body(token(client, surface), "imp-00000042")
    r = client.post(f"{path}?{query}", json=body)
    name = query.split("&")[0].split("=")[0]
    err = assert_error_shape(r, 400, "bad_request")
    assert err["field"] == name
    assert err["message"] == f"unknown query parameter {name!r} (this route takes none)"
    assert stored(client) == 0


def test_the_lane_refuses_a_query_and_counts_nothing(client):
    lane = client.app.lane
    before = lane.handled[dea.URL_IMPRESSION]
    body = imp_body(token(client), "imp-00000042")
    r = client.post(dea.URL_IMPRESSION, params={"x": "1"}, json=body)
    assert assert_error_shape(r, 400)["field"] == "x"
    assert lane.handled[dea.URL_IMPRESSION] == before + 1  # answered by the direct form
    assert stored(client) == 0
    ok = client.post(dea.URL_IMPRESSION, json=body)  # the same beacon, no query: counted
    assert ok.json() == {"acknowledged": True, "counted": True}
    # An empty query ("?" alone, or only separators) names no parameter.
    for n, empty in enumerate(("?", "?&")):
        again = imp_body(token(client), f"imp-0000005{n}")
        r = client.post(f"{dea.URL_IMPRESSION}{empty}", json=again)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(("config", "product", "path", "status", "body"), V1_POSTS, ids=str)
def test_a_v1_post_refuses_any_query_parameter(make_client, config, product, path, status, body):
    client = make_client(**config)
    headers = {"X-API-Key": issue_key(client, product)}
    r = client.post(f"{path}?debug=1", json=body, headers=headers)
    err = assert_error_shape(r, status)
    assert err["field"] == "debug"
    assert err["message"] == "unknown query parameter 'debug' (this route takes none)"
    if product != "ad-manager":  # no click to convert: 404 without the query
        assert client.post(path, json=body, headers=headers).status_code == 200
