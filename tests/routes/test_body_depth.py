"""JSON nested deeper than the edge reads is refused with the route's validation status
(400; 422 on /v1/ai/process) in the one error shape, on every route that reads a JSON body;
never a 500. The limit is ``parse_json``'s on every route, whichever decoder reads the body."""

from __future__ import annotations

import pytest

from tests.conftest import assert_error_shape, issue_key
from tests.routes.test_body_encoding import CODES, ROUTES

UGC = b'{"post_id":"p","message":"dog food","geo_target":%s}'
# Each route's body with the nested value where the route reads a field (``%s``).
BODIES = {
    "/v1/ugc/process": UGC,
    "/ugc/v1/process": UGC,
    "/v1/ai/process": b'{"message_id":"m","content":"dog food","location":%s}',
    "/v1/ad-manager/conversions": b'{"click_id":%s}',
    "/ugc/process": b'{"post_id":"p","message":"dog food","meta":{"location":%s}}',
    "/ugc/disable": b'[{"post_id":"p","ad_id":"a","meta_data":{"k":%s}}]',
    "/ugc/impression": b'{"post_id":"p","ad_id":%s}',
}
DEA = b'{"v":%s}'


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _post(client, path, product, raw):
    headers = {"Content-Type": "application/json"}
    if product is not None:
        headers["X-API-Key"] = issue_key(client, product)
    return client.post(path, content=raw, headers=headers)


@pytest.mark.parametrize(("config", "product", "path", "status"), ROUTES, ids=lambda v: str(v))
@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deep_nesting_is_the_routes_validation_error(
    make_client, config, product, path, status, depth
):
    # 1,000 levels is past what msgspec can recurse from a request's stack, within orjson's
    # limit; 100,000 is past both.
    client = make_client(**config)
    raw = BODIES.get(path, DEA) % nested(depth)
    err = assert_error_shape(_post(client, path, product, raw), status, CODES[status])
    if depth > 1024:
        assert err["message"].startswith("the body is not valid JSON: depth limit exceeded")


def test_a_deep_meta_data_is_refused_by_its_own_limit(make_client):
    client = make_client(legacy_api=True)
    raw = BODIES["/ugc/disable"] % nested(1000)
    err = assert_error_shape(_post(client, "/ugc/disable", "ugc", raw), 400, "bad_request")
    assert (err["field"], err["message"]) == (
        "[0].meta_data",
        "[0].meta_data must be nested at most 16 levels deep",
    )


def test_deep_partner_keys_of_the_legacy_meta_are_still_ignored(make_client):
    # The other keys of `meta` are the partner's own: skipped unread, at any depth the
    # shared limit admits.
    client = make_client(legacy_api=True)
    raw = b'{"post_id":"p","message":"dog food","meta":{"ref":%s}}' % nested(1000)
    assert _post(client, "/ugc/process", "ugc", raw).status_code == 200
    raw = b'{"post_id":"p","message":"dog food","meta":{"ref":%s}}' % nested(100_000)
    err = assert_error_shape(_post(client, "/ugc/process", "ugc", raw), 400, "bad_request")
    assert err["message"].startswith("the body is not valid JSON: depth limit exceeded")


def test_a_field_refused_beside_a_deep_value_is_named_with_its_value(make_client):
    client = make_client()
    raw = b'{"post_id":"%s","message":"dog food","geo_target":{"zip":%s}}' % (
        b"p" * 300,
        nested(1000),
    )
    err = assert_error_shape(_post(client, "/v1/ugc/process", "ugc", raw), 400, "bad_request")
    assert (err["field"], err["message"]) == (
        "post_id",
        "post_id must be at most 256 characters (got 300)",
    )
