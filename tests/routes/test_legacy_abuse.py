"""The earlier-described routes under abuse: rotation chains, deep meta_data, idempotency
across a rotation, and the headers of an unexpected 500."""

from __future__ import annotations

import pytest

from edge.settings import RateLimit
from tests.conftest import assert_error_shape, issue_key
from tests.routes.conftest import post_json

DOG = "my pup will not touch his kibble, any ideas?"


def _rotate(client, key: str) -> str:
    r = client.get("/keys/apiKey", headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    return r.json()["apiKey"]


def _valid(client) -> list[str]:
    ctx = client.app.state.ctx
    now = ctx.clock()
    return [k.status(now) for k in client.portal.call(ctx.store.list_keys) if k.is_valid(now)]


def test_rotating_again_and_again_keeps_at_most_one_secondary(make_client):
    client = make_client(legacy_api=True)
    keys = [issue_key(client, "ugc")]
    for _ in range(5):
        keys.append(_rotate(client, keys[-1]))
    assert sorted(_valid(client)) == ["active", "secondary"]
    for old in keys[:-2]:  # every older secondary ended with the next rotation
        r = post_json(client, "/ugc/process", {"post_id": "p", "message": DOG}, old)
        assert_error_shape(r, 401)
    for live in keys[-2:]:
        r = post_json(client, "/ugc/process", {"post_id": "p", "message": DOG}, live)
        assert r.status_code == 200, r.text


def test_a_key_and_its_secondary_share_one_rate_bucket(make_client, script):
    client = make_client(legacy_api=True, rate_limit_ugc=RateLimit(4, 60.0), matcher=script)
    first = issue_key(client, "ugc")
    second = _rotate(client, first)  # spends one request of the family's bucket
    body = {"post_id": "p", "message": DOG}
    statuses = [post_json(client, "/ugc/process", body, k).status_code for k in (first, second) * 3]
    assert statuses.count(200) == 3 and statuses.count(429) == 3, statuses


def test_idempotency_key_is_scoped_to_the_key_family(make_client):
    client = make_client(legacy_api=True)
    store = client.app.state.ctx.store
    key = issue_key(client, "ugc")
    body = {"post_id": "p-9", "ad_id": "ad-gps-watch"}
    first = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    new_key = _rotate(client, key)
    replay = post_json(client, "/ugc/impression", body, new_key, **{"Idempotency-Key": "imp-1"})
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert client.portal.call(store.impression_count, "legacy") == 1
    other = issue_key(client, "ugc")  # another partner's key: its own scope
    r = post_json(client, "/ugc/impression", body, other, **{"Idempotency-Key": "imp-1"})
    assert "Idempotent-Replayed" not in r.headers
    assert client.portal.call(store.impression_count, "legacy") == 2


def test_deeply_nested_meta_data_is_400(make_client):
    client = make_client(legacy_api=True)
    key = issue_key(client, "ugc")
    meta: dict = {}
    for _ in range(300):
        meta = {"a": meta}
    r = post_json(client, "/ugc/disable", [{"post_id": "p", "ad_id": "a", "meta_data": meta}], key)
    err = assert_error_shape(r, 400)
    assert err["field"] == "[0].meta_data"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    shallow = {"a": {"b": {"c": [1, {"d": 2}]}}}
    r = post_json(
        client, "/ugc/disable", [{"post_id": "p", "ad_id": "a", "meta_data": shallow}], key
    )
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("path", "product", "body", "status"),
    [
        ("/v1/ugc/process", "ugc", {"post_id": "p"}, 400),
        ("/v1/ai/process", "ai", {"message_id": "m"}, 422),
        ("/ugc/disable", "ugc", {"not": "an array"}, 400),
        ("/ugc/impression", "ugc", {"post_id": "p"}, 400),
    ],
)
def test_errors_after_the_key_check_carry_ratelimit_headers(
    make_client, path, product, body, status
):
    client = make_client(legacy_api=True)
    key = issue_key(client, product)
    r = post_json(client, path, body, key)
    assert_error_shape(r, status)
    assert r.headers["RateLimit-Policy"].startswith(f'"{product}"')
    assert "RateLimit" in r.headers
    r = post_json(client, path, body, None)  # before the key check: no quota was spent
    assert_error_shape(r, 401)
    assert "RateLimit" not in r.headers
