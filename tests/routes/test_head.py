"""HEAD never counts anything and never rotates a key: every beacon answers it 405."""

from __future__ import annotations

import pytest

from edge.beacons import ai_beacon_urls
from tests.conftest import AI_SCOPE, issue_key
from tests.delivery.test_events import stored, token


@pytest.mark.parametrize("kind", ["render", "view"])
def test_head_on_an_ai_beacon_counts_nothing_and_the_get_still_counts(make_client, kind):
    client = make_client()
    ctx = client.app.state.ctx
    urls = dict(
        zip(
            ("render", "view"),
            ai_beacon_urls(ctx.signer, "", 42, "m-1", "c-1", scope=AI_SCOPE),
            strict=True,
        )
    )
    head = client.head(urls[kind])
    assert head.status_code == 405 and "GET" in head.headers["allow"]
    assert "HEAD" not in head.headers["allow"]
    assert stored(client) == 0
    assert client.get(urls[kind]).status_code == 204
    assert stored(client) == 1


@pytest.mark.parametrize(
    "path", ["/dea/ugc/impression", "/dea/url/impression", "/dea/url/hover",
             "/dea/url/placements/failures", "/dea/ai/impressions/render"],
)  # fmt: skip
def test_every_beacon_answers_head_405(make_client, path):
    client = make_client()
    query = f"?t={token(client, 'ugc')}" if path == "/dea/ugc/impression" else ""
    r = client.head(path + query)
    assert r.status_code == 405, r.status_code
    assert stored(client) == 0


def test_head_on_the_ugc_pixel_counts_nothing(make_client):
    client = make_client()
    tok = token(client, "ugc")
    assert client.head(f"/dea/ugc/impression?t={tok}").status_code == 405
    assert stored(client) == 0
    assert client.get(f"/dea/ugc/impression?t={tok}").status_code == 204
    assert stored(client) == 1


def test_head_on_key_rotation_rotates_nothing(make_client):
    client = make_client(legacy_api=True)
    key = issue_key(client, "ugc")
    r = client.head("/keys/apiKey", headers={"X-API-Key": key})
    assert r.status_code == 405
    ctx = client.app.state.ctx
    records = client.portal.call(ctx.store.list_keys)
    assert [r.status(ctx.clock()) for r in records] == ["active"]
    assert client.get("/keys/apiKey", headers={"X-API-Key": key}).status_code == 200
