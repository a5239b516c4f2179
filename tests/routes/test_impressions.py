"""GET /v1/ad-manager/impressions: what the edge recorded for the tag's impression ids, read
with an Ad Manager key (the QA kit's way in to a staging edge)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from edge import ledger
from edge.routes.impressions import _VALUE_PATTERN
from edge.store import Impression
from tests.conftest import assert_error_shape, issue_key

PATH = "/v1/ad-manager/impressions"


def record(
    client: Any,
    iid: str,
    *,
    slot: str = "sidebar",
    ad: str = "ad-dog-food",
    invalid: str | None = None,
) -> None:
    ctx = client.app.state.ctx
    imp = Impression(
        kind="url",
        dedupe_keys=(f"tok:t-{iid}", f"iid:{iid}"),
        env="production",
        ad_id=ad,
        campaign_id="cmp-dogs",
        at=ctx.clock(),
        publisher_id="pub-1",
        slot_id=slot,
        invalid_reason=invalid,
    )
    client.portal.call(ledger.record_impression, ctx.store, imp)


@pytest.fixture
def edge(make_client: Any) -> tuple[Any, str]:
    client = make_client()
    return client, issue_key(client, "ad-manager")


def test_recorded_ids_come_back_with_their_slot_and_ad(edge: tuple[Any, str]) -> None:
    client, key = edge
    record(client, "iid-aaaa-1111", slot="top")
    record(client, "iid-bbbb-2222", slot="sidebar", ad="ad-trail-shoes")
    r = client.get(
        PATH,
        params=[
            ("impression_id", "iid-bbbb-2222,iid-never-seen"),
            ("impression_id", "iid-aaaa-1111"),
        ],
        headers={"X-API-Key": key},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [i["impression_id"] for i in body["impressions"]] == ["iid-bbbb-2222", "iid-aaaa-1111"]
    first = body["impressions"][0]
    assert (first["slot_id"], first["ad_id"], first["kind"]) == ("sidebar", "ad-trail-shoes", "url")
    assert first["publisher_id"] == "pub-1" and first["recorded_at"].endswith("+00:00")
    assert first["invalid_reason"] is None
    assert body["missing"] == ["iid-never-seen"]
    assert r.headers["Cache-Control"] == "no-store"


def test_a_replayed_beacon_is_still_one_impression(edge: tuple[Any, str]) -> None:
    client, key = edge
    record(client, "iid-once-3333")
    ctx = client.app.state.ctx
    again = Impression(
        kind="url", dedupe_keys=("tok:other", "iid:iid-once-3333"), env="production",
        ad_id="ad-dog-food", campaign_id="cmp-dogs", at=ctx.clock(), slot_id="sidebar",
    )  # fmt: skip
    assert not client.portal.call(ledger.record_impression, ctx.store, again)
    r = client.get(PATH, params={"impression_id": "iid-once-3333"}, headers={"X-API-Key": key})
    assert len(r.json()["impressions"]) == 1


@pytest.mark.parametrize(
    "params",
    [{}, {"impression_id": "short"}, {"impression_id": "bad id!!"}, {"other": "x"},
     {"impression_id": ",".join(f"iid-{i:08d}" for i in range(51))},
     {"impression_id": ""}, {"impression_id": "iid-aaaa-1111,"}],
    ids=["none", "too-short", "bad-chars", "unknown-param", "too-many", "empty",
         "empty-part"],
)  # fmt: skip
def test_bad_queries_are_400(edge: tuple[Any, str], params: dict[str, str]) -> None:
    client, key = edge
    assert_error_shape(client.get(PATH, params=params, headers={"X-API-Key": key}), 400)


@pytest.mark.parametrize("product", [None, "ugc"])
def test_only_an_ad_manager_key_reads(edge: tuple[Any, str], product: str | None) -> None:
    client, _ = edge
    headers = {"X-API-Key": issue_key(client, product)} if product else {}
    r = client.get(PATH, params={"impression_id": "iid-aaaa-1111"}, headers=headers)
    assert_error_shape(r, 401)


def test_the_sandbox_answers_too(make_client: Any) -> None:
    client = make_client(env="sandbox")
    key = issue_key(client, "ad-manager")
    r = client.get(PATH, params={"impression_id": "iid-aaaa-1111"}, headers={"X-API-Key": key})
    assert r.status_code == 200 and r.json() == {"impressions": [], "missing": ["iid-aaaa-1111"]}


def test_invalid_traffic_is_reported_as_such(edge: tuple[Any, str]) -> None:
    client, key = edge
    record(client, "iid-bot-4444", invalid="known_bot")
    r = client.get(PATH, params={"impression_id": "iid-bot-4444"}, headers={"X-API-Key": key})
    assert r.json()["impressions"][0]["invalid_reason"] == "known_bot"


def test_the_documented_pattern_refuses_what_the_route_refuses() -> None:
    # An OpenAPI pattern matches anywhere in a value: unanchored, it allowed values the route
    # refuses (an empty part, a bad character beside a good id), so clients and fuzzers were
    # told those requests were valid.
    value = re.compile(_VALUE_PATTERN)
    assert value.search("iid-aaaa-1111") and value.search("iid-aaaa-1111,iid-bbbb-2222")
    for bad in ("", "iid-aaaa-1111,", ",iid-aaaa-1111", "x!iid-aaaa-1111", "iid-aaaa-1111 "):
        assert not value.search(bad), bad
