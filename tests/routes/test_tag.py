"""GET /dea/tag.js, the versioned URL, the manifest and the demo page (edge/routes/tag.py)."""

import brotli
import pytest

from edge.routes.tag import negotiate
from tests.conftest import assert_error_shape


@pytest.fixture
def client(make_client):
    return make_client()


@pytest.fixture
def build(client):
    return client.app.state.ctx.tag


@pytest.mark.parametrize(
    ("header", "coding"),
    [
        (None, "identity"),
        ("", "identity"),
        ("gzip, deflate, br, zstd", "br"),
        ("gzip", "gzip"),
        ("br;q=0.5, gzip;q=0.8", "gzip"),
        ("br;q=0, gzip;q=0", "identity"),
        ("*", "br"),
        ("*;q=0.1, gzip", "gzip"),
        ("identity", "identity"),
        ("deflate", "identity"),
        ("BR", "br"),
        ("br;q=bogus, gzip", "gzip"),
        ("identity;q=0, *;q=0", "identity"),  # nothing acceptable: identity anyway
    ],
)
def test_negotiation(header, coding):
    assert negotiate(header) == coding


def test_tag_is_served_precompressed_by_accept_encoding(client, build):
    for enc, body in (("br", build.br), ("gzip", build.gzip)):
        r = client.get("/dea/tag.js", headers={"Accept-Encoding": enc})
        assert r.status_code == 200 and r.headers["content-encoding"] == enc
        assert r.content == build.js  # the client decoded exactly our precompressed bytes
        assert r.headers["content-length"] == str(len(body))
    r = client.get("/dea/tag.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in r.headers and r.content == build.js
    assert r.headers["content-type"] == "text/javascript; charset=utf-8"
    assert r.headers["vary"].startswith("Accept-Encoding")


def test_brotli_on_the_wire_is_the_built_file(client, build):
    with client.stream("GET", "/dea/tag.js", headers={"Accept-Encoding": "br"}) as r:
        raw = b"".join(r.iter_raw())
    assert raw == build.br and brotli.decompress(raw) == build.js


def test_strong_etag_per_representation_and_304(client):
    tags = {}
    for enc in ("br", "gzip", "identity"):
        r = client.get("/dea/tag.js", headers={"Accept-Encoding": enc})
        etag = r.headers["etag"]
        assert etag.startswith('"') and not etag.startswith("W/")
        tags[enc] = etag
        again = client.get(
            "/dea/tag.js", headers={"Accept-Encoding": enc, "If-None-Match": f'"x", {etag}'}
        )
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == etag
    assert len(set(tags.values())) == 3
    stale = client.get("/dea/tag.js", headers={"If-None-Match": '"not-it"'})
    assert stale.status_code == 200


def test_latest_is_short_lived_and_versioned_is_immutable(client, build):
    latest = client.get("/dea/tag.js")
    assert "max-age=300" in latest.headers["cache-control"]
    assert latest.headers["x-tag-version"] == build.version
    pinned = client.get(f"/dea/tag.{build.version}.js", headers={"Accept-Encoding": "br"})
    assert pinned.status_code == 200 and pinned.content == build.js
    assert pinned.headers["cache-control"] == "public, max-age=31536000, immutable"
    # SRI on a cross-origin <script crossorigin> needs CORS on the script itself.
    assert pinned.headers["access-control-allow-origin"] == "*"


def test_unknown_version_is_404_in_the_error_shape(client):
    err = assert_error_shape(client.get("/dea/tag.0.0.0-nope.js"), 404, "not_found")
    assert err.get("field") == "version"


def test_manifest_names_version_urls_and_integrity(client, build):
    body = client.get("/dea/tag.json").json()
    assert body["version"] == build.version and body["integrity"] == build.sri
    assert body["versioned_url"].endswith(f"/dea/tag.{build.version}.js")
    assert body["sizes"]["br"] == len(build.br)


def test_tag_is_built_once_per_process(client, build):
    for _ in range(3):
        client.get("/dea/tag.js")
    assert client.app.state.ctx.tag is build


def test_demo_page_pins_the_tag_under_a_strict_csp(client, build):
    r = client.get("/demo")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert f'integrity="{build.sri}"' in html and f"/dea/tag.{build.version}.js" in html
    assert 'data-publisher="demo"' in html and "data-ugc-post-id" in html
    assert html.count("data-ad-slot=") >= 4
    csp = r.headers["content-security-policy"]
    assert "require-trusted-types-for 'script'" in csp and "unsafe-inline" not in csp
    base = client.app.state.ctx.settings.base_url
    assert f"connect-src 'self' {base}" in csp
    for asset in ("/demo/demo.css", "/demo/demo.js"):
        assert client.get(asset).status_code == 200


def test_openapi_documents_the_tag_routes(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/dea/tag.js", "/dea/tag.{version}.js", "/dea/tag.json", "/demo"):
        assert "get" in paths[path], path
