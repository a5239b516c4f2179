"""CORS on /dea: registered publisher origins only, no credentials."""

import pytest

from edge.delivery import publishers
from tests.conftest import assert_error_shape
from tests.delivery.helpers import ORIGIN, PUB, register

POST_PATHS = ["/dea/url/keywords", "/dea/url/placements", "/dea/url/impression",
              "/dea/url/placements/failures", "/dea/url/hover", "/dea/ugc/impression"]  # fmt: skip


def preflight(client, path, origin=ORIGIN, method="POST", headers="content-type", **extra):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    h.update(extra)
    return client.options(path, headers=h)


@pytest.fixture
def client(make_client):
    c = make_client()
    register(c)
    return c


@pytest.mark.parametrize("path", POST_PATHS)
def test_preflight_grants_a_registered_origin(client, path):
    r = preflight(client, path)
    assert r.status_code == 204 and r.content == b""
    assert r.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"].lower() == "content-type"
    assert r.headers["access-control-max-age"] == "7200"
    assert "Origin" in r.headers["vary"]
    assert "access-control-allow-credentials" not in r.headers
    assert r.headers["x-content-type-options"] == "nosniff"


def test_origin_is_matched_in_canonical_form(make_client):
    client = make_client()
    register(client, "pub-9", "HTTPS://Shop.Example:443")
    r = preflight(client, "/dea/url/keywords", origin="https://shop.example")
    assert r.headers["access-control-allow-origin"] == "https://shop.example"


@pytest.mark.parametrize("sent", ["HTTPS://SHOP.example:443", "https://Shop.Example"])
def test_the_grant_names_the_registered_canonical_origin_not_the_one_sent(make_client, sent):
    client = make_client()
    register(client, "pub-9", "https://shop.example")
    r = preflight(client, "/dea/url/keywords", origin=sent)
    assert r.headers["access-control-allow-origin"] == "https://shop.example"
    r = client.post("/dea/url/hover", json={}, headers={"Origin": sent})
    assert r.headers["access-control-allow-origin"] == "https://shop.example"


@pytest.mark.parametrize(
    "origin",
    ["https://evil.example", "https://news.example.evil.example", "http://news.example",
     "https://news.example:8443", "null"],
)  # fmt: skip
def test_preflight_refuses_other_origins(client, origin):
    r = preflight(client, "/dea/url/hover", origin=origin)
    assert_error_shape(r, 403, "cors_origin_not_allowed")
    assert "access-control-allow-origin" not in r.headers
    assert "Origin" in r.headers["vary"]


@pytest.mark.parametrize("path", ["/dea/url/keywords", "/dea/url/placements"])
def test_an_unregistered_origin_can_read_why_the_match_routes_refuse_it(client, path):
    # A refused preflight is only "Failed to fetch" to the tag: on the match routes the
    # preflight passes (briefly cached), the route refuses, and the refusal is readable.
    other = "https://typo.example"
    r = preflight(client, path, origin=other)
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == other
    assert r.headers["access-control-max-age"] == "600"
    body = {"publisher_id": PUB, "v": "1.0.0", "page_url": "https://typo.example/a"}
    body |= (
        {"text": "trail", "slots": ["s1"]}
        if path.endswith("keywords")
        else {"placements": [{"slot_id": "s1", "text": "trail"}]}
    )
    refused = client.post(path, json=body, headers={"Origin": other})
    err = assert_error_shape(refused, 403, "origin_not_allowed")
    assert other in err["message"] and PUB in err["message"]
    assert refused.headers["access-control-allow-origin"] == other
    assert "access-control-expose-headers" not in refused.headers
    # The grant still checks method and headers; the beacons keep refusing at the preflight.
    assert_error_shape(preflight(client, path, origin=other, method="PUT"), 403)
    assert preflight(client, "/dea/url/impression", origin=other).status_code == 403


def test_preflight_refuses_other_methods_and_headers(client):
    assert_error_shape(preflight(client, "/dea/url/keywords", method="PUT"), 403)
    r = preflight(client, "/dea/url/keywords", headers="content-type, x-api-key")
    err = assert_error_shape(r, 403, "cors_headers_not_allowed")
    assert "x-api-key" in err["message"]
    assert preflight(client, "/dea/url/keywords", headers="").status_code == 204


def test_private_network_access_preflight(client):
    r = preflight(
        client, "/dea/url/impression", **{"Access-Control-Request-Private-Network": "true"}
    )
    assert r.headers["access-control-allow-private-network"] == "true"


def test_actual_responses_carry_the_grant_only_for_registered_origins(client):
    ok = client.post("/dea/url/impression", json={}, headers={"Origin": ORIGIN})
    assert ok.status_code == 400  # the error is readable by the tag: it has the grant
    assert ok.headers["access-control-allow-origin"] == ORIGIN
    assert ok.headers["access-control-expose-headers"] == "Retry-After"
    assert "Origin" in ok.headers["vary"]
    other = client.post("/dea/url/impression", json={}, headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers and "Origin" in other.headers["vary"]


def test_partner_api_gets_no_cors(client):
    r = client.options(
        "/v1/ugc/process",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in r.headers


def test_cli_registration_reaches_a_running_edge_without_restart(
    make_client, tmp_path, monkeypatch
):
    from edge.cli import main

    client = make_client()
    assert preflight(client, "/dea/url/hover", origin="https://late.example").status_code == 403
    # Another process (the CLI) writes the store; the edge's refresh task picks it up.
    assert main(["publishers", "add", "pub-late", "--origin", "https://late.example",
                 "--db", str(tmp_path / "edge.db")]) == 0  # fmt: skip
    reg = client.app.state.ctx.publishers
    assert reg.get("pub-late") is None  # not yet: the cache is read every few seconds
    client.portal.call(reg.refresh)  # what the background task does every REFRESH_SECONDS
    assert preflight(client, "/dea/url/hover", origin="https://late.example").status_code == 204


def test_refresh_task_runs_in_the_background(make_client, monkeypatch):
    import time

    monkeypatch.setattr(publishers, "REFRESH_SECONDS", 0.05)
    client = make_client()
    ctx = client.app.state.ctx
    client.portal.call(ctx.store.upsert_publisher, "pub-bg", ["https://bg.example"], 1.0)
    deadline = time.monotonic() + 5
    while ctx.publishers.get("pub-bg") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert preflight(client, "/dea/url/hover", origin="https://bg.example").status_code == 204


def test_options_that_is_not_a_preflight_says_why(client):
    r = client.options("/dea/url/keywords", headers={"Origin": ORIGIN})
    err = assert_error_shape(r, 400)
    assert err["field"] == "Access-Control-Request-Method"


def test_public_tag_script_keeps_its_own_wildcard_grant(client):
    r = client.get("/dea/tag.js", headers={"Origin": ORIGIN})
    assert r.headers["access-control-allow-origin"] == "*"
    assert "Origin" not in r.headers.get("vary", "")


def test_grant_headers_edit_raw_headers_as_starlettes_mutable_headers_do():
    """``grant_headers`` works on raw lists (no Headers object per beacon); on any list it
    gives what Starlette's ``MutableHeaders`` rules (add_vary_header, __setitem__) give."""
    import random

    from starlette.datastructures import MutableHeaders

    from edge.middleware.cors import EXPOSE_HEADERS, grant_headers

    def reference(raw, granted):
        out = MutableHeaders(raw=raw)
        if "access-control-allow-origin" in out:
            return
        out.add_vary_header("Origin")
        if granted is not None:
            out["Access-Control-Allow-Origin"] = granted
            out["Access-Control-Expose-Headers"] = EXPOSE_HEADERS

    names = [b"vary", b"content-type", b"access-control-expose-headers", b"x-a",
             b"access-control-allow-origin"]  # fmt: skip
    rng = random.Random(7)
    for _ in range(5000):
        raw = [
            (rng.choice(names), rng.choice([b"a", b"b, c", b"*"])) for _ in range(rng.randint(0, 5))
        ]
        granted = rng.choice([None, "https://news.example"])
        expected, got = list(raw), list(raw)
        reference(expected, granted)
        grant_headers(got, granted)
        assert got == expected, (raw, granted)


@pytest.mark.parametrize("seed", range(20))
def test_a_header_read_from_the_scope_is_what_starlette_reads(seed):
    import random

    from starlette.datastructures import Headers

    from edge.http import header

    rnd = random.Random(seed)
    names = [b"origin", b"user-agent", b"content-type", b"x-forwarded-for", b"vary"]
    raw = [(rnd.choice(names), rnd.choice([b"", b"a", b"\xe9t\xe9", b"x, y"]))
           for _ in range(rnd.randrange(6))]  # fmt: skip
    scope = {"type": "http", "headers": raw}
    for name in names:
        assert header(scope, name) == Headers(scope=scope).get(name.decode())
