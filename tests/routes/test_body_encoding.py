"""JSON is UTF-8: a body whose bytes are not is refused with the route's validation status
(400; 422 on /v1/ai/process) and a message saying so, whatever charset Content-Type names,
on every route that reads a JSON body; never a 500."""

from __future__ import annotations

import pytest

from tests.conftest import assert_error_shape, issue_key

NOT_UTF8 = [
    b'{"\xff\xfe":"x"}',  # the first key: read before any field is judged
    b'{"post_id":"x","message":"\xff\xfe"}',  # bytes no UTF-8 text holds
    b'{"post_id":"x","message":"caf\xe9"}',  # latin-1
    b'{"post_id":"x","message":"\xed\xa0\x80"}',  # a surrogate, encoded
    b'{"post_id":"x","message":"\xc3"}',  # a sequence cut short
]
CTYPES = ["application/json", "application/json; charset=latin-1"]

# (make_client overrides, key product, path, status)
ROUTES = [
    ({}, "ugc", "/v1/ugc/process", 400),
    ({}, "ai", "/v1/ai/process", 422),
    ({}, "ad-manager", "/v1/ad-manager/conversions", 400),
    ({"env": "sandbox"}, "ugc", "/ugc/v1/process", 400),
    ({"env": "sandbox"}, "ugc", "/v1/ugc/process", 400),
    ({"legacy_api": True}, "ugc", "/ugc/process", 400),
    ({"legacy_api": True}, "ugc", "/ugc/disable", 400),
    ({"legacy_api": True}, "ugc", "/ugc/impression", 400),
    ({}, None, "/dea/url/keywords", 400),
    ({}, None, "/dea/url/placements", 400),
    ({}, None, "/dea/url/impression", 400),
    ({}, None, "/dea/ugc/impression", 400),
    ({}, None, "/dea/url/hover", 400),
    ({}, None, "/dea/url/placements/failures", 400),
    ({}, None, "/dea/url/click", 400),
    ({}, None, "/dea/ugc/click", 400),
]
CODES = {400: "bad_request", 422: "validation_error"}


def _post(client, path, product, raw, ctype):
    headers = {"Content-Type": ctype}
    if product is not None:
        headers["X-API-Key"] = issue_key(client, product)
    return client.post(path, content=raw, headers=headers)


@pytest.mark.parametrize(("config", "product", "path", "status"), ROUTES, ids=lambda v: str(v))
def test_a_body_that_is_not_utf8_is_refused_as_such(make_client, config, product, path, status):
    client = make_client(**config)
    for raw in NOT_UTF8:
        for ctype in CTYPES:
            r = _post(client, path, product, raw, ctype)
            err = assert_error_shape(r, status, CODES[status])
            assert err["field"] == "body", (raw, ctype)
            assert "not valid UTF-8" in err["message"], (raw, ctype)
            assert "surrogate" not in err["message"], err["message"]


@pytest.mark.parametrize(("config", "product", "path", "status"), ROUTES, ids=lambda v: str(v))
@pytest.mark.parametrize(
    "raw",
    [
        b'{"post_id":"x","message":"\\ud800"}',
        b'{"post_id":"x","message":"\\udc00 x"}',
        b'{"post_id":"x","message":"\\ud800\\u0041"}',
    ],
)
def test_a_lone_surrogate_escape_is_not_valid_json(make_client, config, product, path, status, raw):
    # JSON's grammar admits "\ud800", but it names no character: both parsers refuse it, and
    # the answer says where, in the same words on every route.
    client = make_client(**config)
    r = _post(client, path, product, raw, "application/json")
    err = assert_error_shape(r, status, CODES[status])
    assert err["message"].startswith("the body is not valid JSON: "), err["message"]
    assert err["field"] == "body", err
    assert "surrogate" in err["message"], err["message"]
    assert "truncated" not in err["message"], err["message"]


def test_utf8_under_another_charset_is_read_as_utf8(make_client):
    # JSON has one encoding whatever the header says: UTF-8 bytes are read as such.
    client = make_client(env="sandbox")
    key = issue_key(client, "ugc")
    body = '{"post_id":"p-1","message":"café au lait, dog food"}'.encode()
    r = client.post(
        "/v1/ugc/process",
        content=body,
        headers={"X-API-Key": key, "Content-Type": "application/json; charset=latin-1"},
    )
    assert r.status_code == 200, r.text


def test_bytes_in_skipped_keys_are_checked_too(make_client):
    # The earlier /ugc/process ignores meta's other keys, so msgspec skips them unread.
    client = make_client(legacy_api=True)
    headers = {"X-API-Key": issue_key(client, "ugc"), "Content-Type": "application/json"}
    raw = b'{"post_id":"p","message":"dog food","meta":{"ref":"caf\xe9"}}'
    at = raw.index(b"\xe9")
    err = assert_error_shape(client.post("/ugc/process", content=raw, headers=headers), 400)
    assert (err["field"], err["message"]) == (
        "body",
        f"the body is not valid UTF-8 (byte {at}); JSON must be sent as UTF-8",
    )
    ok = raw.replace(b"caf\xe9", "café".encode())
    assert client.post("/ugc/process", content=ok, headers=headers).status_code == 200


@pytest.mark.parametrize(("config", "product", "path", "status"), ROUTES, ids=lambda v: str(v))
@pytest.mark.parametrize("raw", [b"", b'{"post_id": ', b"NaN", b'\xef\xbb\xbf{"post_id":"x"}'])
def test_a_body_that_is_no_json_document_names_the_body(
    make_client, config, product, path, status, raw
):
    # Empty, cut short, a bare NaN, a byte-order mark: each is refused with the field a
    # partner's error handling keys on, as a body that is not UTF-8 is.
    client = make_client(**config)
    err = assert_error_shape(
        _post(client, path, product, raw, "application/json"), status, CODES[status]
    )
    assert err["field"] == "body", err
