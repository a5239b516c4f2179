"""GET /dea/tag.js, the versioned URL, the manifest and the demo page (edge/routes/tag.py)."""

import base64
import hashlib

import brotli
import pytest

import edge.context
from edge.routes.tag import negotiate
from tag import build_tag
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
    assert "/dea/tag.json" in err["message"]
    assert_error_shape(client.get("/dea/tag.%2e%2e%2fx.js"), 404, "not_found")
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


def _builds_a_different_tag(origin, **options):
    return build_tag(origin, "pub-a", **options)  # a default publisher: other bytes


def test_a_pinned_version_survives_an_upgrade_until_its_retention_ends(
    make_client, clock, monkeypatch
):
    # Version A: an edge whose tag bytes differ (a default publisher built in).
    monkeypatch.setattr(edge.context, "build_tag", _builds_a_different_tag)
    before = make_client()
    old = before.app.state.ctx.tag
    monkeypatch.undo()
    clock.advance(3600)
    after = make_client()  # the upgraded edge, same database
    new = after.app.state.ctx.tag
    assert old.version != new.version and old.js != new.js

    r = after.get(f"/dea/tag.{old.version}.js", headers={"Accept-Encoding": "br"})
    assert r.status_code == 200 and r.content == old.js
    assert r.headers["content-encoding"] == "br"
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    # What a browser checks against the page's integrity= attribute.
    assert "sha384-" + base64.b64encode(hashlib.sha384(r.content).digest()).decode() == old.sri

    manifest = after.get("/dea/tag.json").json()
    assert manifest["version"] == new.version and manifest["retention_days"] == 180
    listed = {v["version"]: v for v in manifest["versions"]}
    assert [v["version"] for v in manifest["versions"]] == [new.version, old.version]
    assert listed[new.version]["expires"] is None
    assert listed[old.version]["integrity"] == old.sri
    assert listed[old.version]["url"].endswith(f"/dea/tag.{old.version}.js")
    assert listed[old.version]["built_at"] < listed[new.version]["built_at"]
    assert listed[old.version]["expires"] is not None

    clock.advance(180 * 86_400 - 1)  # retention counts from the upgrade's first build
    assert after.get(f"/dea/tag.{old.version}.js").status_code == 200
    clock.advance(1)
    gone = assert_error_shape(after.get(f"/dea/tag.{old.version}.js"), 410, "tag_version_expired")
    assert gone["field"] == "version" and "/dea/tag.json" in gone["message"]
    assert [v["version"] for v in after.get("/dea/tag.json").json()["versions"]] == [new.version]
    assert after.get(f"/dea/tag.{new.version}.js").content == new.js  # the running one stays


def test_retention_zero_serves_only_the_running_version(make_client, clock, monkeypatch):
    monkeypatch.setattr(edge.context, "build_tag", _builds_a_different_tag)
    old = make_client().app.state.ctx.tag
    monkeypatch.undo()
    clock.advance(60)
    after = make_client(tag_retention_days=0)
    assert_error_shape(after.get(f"/dea/tag.{old.version}.js"), 410, "tag_version_expired")
    assert len(after.get("/dea/tag.json").json()["versions"]) == 1


def test_debug_build_and_stylesheet_are_served_like_the_latest_tag(client):
    ctx = client.app.state.ctx
    debug = client.get("/dea/tag.debug.js", headers={"Accept-Encoding": "br"})
    assert debug.status_code == 200 and debug.content == ctx.tag_debug.js
    assert debug.headers["content-type"] == "text/javascript; charset=utf-8"
    assert debug.headers["access-control-allow-origin"] == "*"  # loaded as a module: CORS
    assert "max-age=300" in debug.headers["cache-control"]
    css = client.get("/dea/tag.css", headers={"Accept-Encoding": "gzip"})
    assert css.status_code == 200 and css.content == ctx.tag_css.js
    assert css.headers["content-type"] == "text/css; charset=utf-8"
    assert (
        css.headers["content-encoding"] == "gzip"
        and css.headers["x-content-type-options"] == "nosniff"
    )
    assert "max-age=300" in css.headers["cache-control"]
    again = client.get(
        "/dea/tag.css", headers={"Accept-Encoding": "gzip", "If-None-Match": css.headers["etag"]}
    )
    assert again.status_code == 304
    manifest = client.get("/dea/tag.json").json()
    assert manifest["debug_url"].endswith("/dea/tag.debug.js")
    assert manifest["stylesheet"] == {
        "url": ctx.settings.base_url + "/dea/tag.css",
        "integrity": ctx.tag_css.sri,
    }
    paths = client.get("/openapi.json").json()["paths"]
    assert "get" in paths["/dea/tag.debug.js"] and "get" in paths["/dea/tag.css"]
