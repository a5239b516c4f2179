"""A database outage that a route does not answer itself is a 503 with Retry-After in the
error shape, never a 500: the operator page and the tag's manifest read the store too."""

from __future__ import annotations

from edge.store import StoreUnavailable
from tests.conftest import assert_error_shape, issue_key


def _down(*_args, **_kwargs):
    raise StoreUnavailable("cannot reach postgresql://edge@db/edge")


def test_the_reports_page_and_the_tag_manifest_answer_503_while_the_store_is_down(
    make_client, monkeypatch
):
    client = make_client()
    key = issue_key(client, "ad-manager")
    ctx = client.app.state.ctx
    ctx.keyring._cache.clear()  # the key is looked up again, in the store that is down
    monkeypatch.setattr(ctx.store, "key_by_lookup", _down)
    monkeypatch.setattr(ctx.store, "tag_versions", _down)
    ctx.tag_versions._listing = None  # not answered from the listing already read
    for path, headers in (("/reports", {"X-API-Key": key}), ("/dea/tag.json", {})):
        r = client.get(path, headers=headers)
        err = assert_error_shape(r, 503, "unavailable")
        assert r.headers["retry-after"] == "5" and "postgresql" not in err["message"]
    monkeypatch.undo()
    ctx.tag_versions._listing = None
    assert client.get("/dea/tag.json").status_code == 200  # back once the store is
