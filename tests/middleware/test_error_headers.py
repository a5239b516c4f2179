"""Every answer carries the safe headers, an unexpected 500 included."""

from __future__ import annotations

from tests.conftest import assert_error_shape, issue_key
from tests.routes.conftest import post_json

DOG = "my pup will not touch his kibble, any ideas?"


def test_an_unexpected_500_carries_the_security_headers(make_client):
    client = make_client()
    key = issue_key(client, "ugc")
    ctx = client.app.state.ctx

    def boom(*args, **kwargs):
        raise RuntimeError("a bug")

    ctx.counters.add = boom  # fails inside the route, after the key check
    r = post_json(client, "/v1/ugc/process", {"post_id": "p", "message": DOG}, key)
    assert_error_shape(r, 500, "internal_error")
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert "a bug" not in r.text
