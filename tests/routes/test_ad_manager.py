"""GET /v1/ad-manager/campaigns and /ad-sets: keys, fields, paging."""

from __future__ import annotations

import base64

import pytest

from edge.settings import RateLimit
from edge.store import StoreUnavailable
from tests.conftest import assert_error_shape, issue_key

CAMPAIGNS = "/v1/ad-manager/campaigns"
AD_SETS = "/v1/ad-manager/ad-sets"


@pytest.fixture
def am(make_client, script):
    client = make_client(matcher=script)
    return client, {"X-API-Key": issue_key(client, "ad-manager")}


def all_pages(client, path, headers, name, **params):
    items, cursor, pages = [], None, 0
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = client.get(path, params=query, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        items += body[name]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return items, pages


@pytest.mark.parametrize("path", [CAMPAIGNS, AD_SETS])
@pytest.mark.parametrize("product", [None, "ugc", "ai"])
def test_needs_an_ad_manager_key(am, path, product):
    client, _ = am
    headers = {"X-API-Key": issue_key(client, product)} if product else {}
    assert_error_shape(client.get(path, headers=headers), 401, "unauthorized")


def test_campaigns_have_the_catalogue_fields(am, test_catalogue):
    client, headers = am
    r = client.get(CAMPAIGNS, headers=headers)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    body = r.json()
    assert body["next_cursor"] is None
    assert [c["id"] for c in body["campaigns"]] == ["cmp-ai", "cmp-pets", "cmp-run"]
    run = body["campaigns"][2]
    assert run == {
        **test_catalogue.placement("ad-trail-shoes").campaign.as_dict(),
        "ad_sets": run["ad_sets"],
    }
    assert run["advertiser_name"] == "Trailhead Running" and run["budget_usd"] is None
    assert run["ad_sets"][0]["pricing_model"] == {"type": "cpm", "bid_amount": 12.5}
    assert run["ad_sets"][0]["geo"]["states"] == ["US-CA"]
    assert run["ad_sets"][0]["ads"][0]["keywords"] == ["trail running", "running shoes"]


def test_ad_sets_name_their_campaign_and_can_be_filtered(am):
    client, headers = am
    sets = client.get(AD_SETS, headers=headers).json()["ad_sets"]
    assert [(s["campaign_id"], s["id"]) for s in sets] == [
        ("cmp-ai", "as-ai"),
        ("cmp-pets", "as-pets"),
        ("cmp-run", "as-run-ca"),
        ("cmp-run", "as-run-mn"),
    ]
    assert sets[1]["products"] == ["ugc", "ai"] and sets[1]["geo"] is None
    only = client.get(AD_SETS, params={"campaign_id": "cmp-run"}, headers=headers).json()
    assert [s["id"] for s in only["ad_sets"]] == ["as-run-ca", "as-run-mn"]
    none = client.get(AD_SETS, params={"campaign_id": "nope"}, headers=headers).json()
    assert none == {"ad_sets": [], "next_cursor": None}


@pytest.mark.parametrize(
    ("path", "name", "total"), [(CAMPAIGNS, "campaigns", 3), (AD_SETS, "ad_sets", 4)]
)
def test_pages_cover_everything_once(am, path, name, total):
    client, headers = am
    items, pages = all_pages(client, path, headers, name, limit=1)
    ids = [i["id"] for i in items]
    assert len(ids) == total == len(set(ids)) and ids == sorted(ids) and pages == total
    items, pages = all_pages(client, path, headers, name, limit=3)
    assert [i["id"] for i in items] == ids and pages == -(-total // 3)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "%%%"}, "cursor"),
        ({"cursor": "AA"}, "cursor"),  # base64url of a NUL: no id this API returns
        ({"cursor": "Y21wLWF"}, "cursor"),  # "cmp-a", but not the form this API writes
        ({"page": "2"}, "page"),
        ([("limit", "5"), ("limit", "10")], "limit"),  # which one? a guess either way
    ],
)
def test_bad_paging_parameters_are_400(am, params, field):
    client, headers = am
    err = assert_error_shape(client.get(CAMPAIGNS, params=params, headers=headers), 400)
    assert err["field"] == field


def test_a_cursor_is_refused_by_the_other_listing(am):
    # An ad-set cursor on the campaigns listing (or the reverse) read as a position there
    # would restart the walk silently or end it early: a 400 says the client mixed them up.
    client, headers = am
    first = {
        p: client.get(p, params={"limit": 1}, headers=headers).json() for p in (CAMPAIGNS, AD_SETS)
    }
    for here, there in ((CAMPAIGNS, AD_SETS), (AD_SETS, CAMPAIGNS)):
        cursor = first[there]["next_cursor"]
        assert cursor is not None
        r = client.get(here, params={"limit": 1, "cursor": cursor}, headers=headers)
        assert assert_error_shape(r, 400)["field"] == "cursor"
        assert client.get(there, params={"cursor": cursor}, headers=headers).status_code == 200
    # A cursor of the form before listings were named in it (the bare id) is refused too.
    bare = base64.urlsafe_b64encode(b"cmp-ai").rstrip(b"=").decode()
    r = client.get(CAMPAIGNS, params={"cursor": bare}, headers=headers)
    assert assert_error_shape(r, 400)["field"] == "cursor"


def test_sandbox_serves_the_same_paths_with_sandbox_keys(make_client, shared_matcher):
    client = make_client(env="sandbox")
    headers = {"X-API-Key": issue_key(client, "ad-manager")}
    campaigns, _ = all_pages(client, CAMPAIGNS, headers, "campaigns", limit=200)
    assert [c["id"] for c in campaigns] == sorted(c.id for c in shared_matcher.catalogue.campaigns)
    sets, _ = all_pages(client, AD_SETS, headers, "ad_sets", limit=200)
    assert len(sets) == sum(len(c.ad_sets) for c in shared_matcher.catalogue.campaigns)
    prod_key = {"X-API-Key": issue_key(client, "ad-manager", env="production")}
    assert_error_shape(client.get(CAMPAIGNS, headers=prod_key), 401)


def test_ad_manager_has_its_own_rate(make_client, script):
    client = make_client(rate_limit_ad_manager=RateLimit(1, 10.0), matcher=script)
    headers = {"X-API-Key": issue_key(client, "ad-manager")}
    assert client.get(CAMPAIGNS, headers=headers).headers["RateLimit-Policy"] == (
        '"ad-manager";q=1;w=10'
    )
    r = client.get(AD_SETS, headers=headers)
    assert_error_shape(r, 429)
    assert r.headers["Retry-After"] == "10"


def test_a_key_store_outage_is_502_not_500(am, monkeypatch):
    client, headers = am
    ctx = client.app.state.ctx

    async def down(lookup):
        raise StoreUnavailable("database is locked")

    monkeypatch.setattr(ctx.store, "key_by_lookup", down)
    ctx.keyring._cache.clear()
    r = client.get(CAMPAIGNS, headers=headers)
    assert_error_shape(r, 502, "upstream_unavailable")
    assert r.headers["Retry-After"] == "5"
