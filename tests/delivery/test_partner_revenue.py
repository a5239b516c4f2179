"""Money a partner's serves earn is attributed to that partner: every billable event of an
ad a ``/v1`` partner API served (the UGC pixel's impression, a click on it, the AI render
and view beacons, an AI click, a conversion of such a click) moves the counters of the
partner's key row, in the same commit as the event. The row is the key's rotation family
(the id of its first key), so a rotated key's figures stay in one row. What the tag's own
routes serve is a publisher's traffic and moves no key row; a token or AI URL issued before
the partner was sealed in it counts for its ad and campaign and for no key."""

from __future__ import annotations

from typing import Any

import pytest

from edge.beacons import ai_beacon_urls, issue_impression_token
from edge.store import KeyRecord
from matcher.catalogue import load_catalogue
from matcher.types import PricingModel
from tests.conftest import AI_SCOPE
from tests.delivery.helpers import register, serve_ai
from tests.delivery.test_pricing_as_served import (
    CONVERSIONS,
    DOG,
    DOG_CAMPAIGN,
    DOG_SET,
    SHOE,
    SHOE_CAMPAIGN,
    click,
    doc,
    fire,
    load,
    serve_url,
    view,
)
from tests.routes.conftest import CATALOGUE, Script


@pytest.fixture
def client(make_client):
    client = make_client(matcher=Script(load_catalogue(CATALOGUE)))
    register(client)
    return client


def partner(client, product: str) -> tuple[str, KeyRecord]:
    ctx = client.app.state.ctx
    key, record = client.portal.call(ctx.keyring.issue, "production", product, "partner")
    return key, record


def key_row(client, family: str) -> dict[str, float]:
    """The key's report counters that moved (the flushed request counters included)."""
    ctx = client.app.state.ctx
    client.portal.call(ctx.counters.flush, ctx.store)
    rows = client.portal.call(ctx.store.counts)
    return {c: a for s, i, c, a in rows if (s, i) == ("key", family)}


def key_rows(client) -> dict[str, dict[str, float]]:
    ctx = client.app.state.ctx
    client.portal.call(ctx.counters.flush, ctx.store)
    out: dict[str, dict[str, float]] = {}
    for scope, sid, counter, amount in client.portal.call(ctx.store.counts):
        if scope == "key":
            out.setdefault(sid, {})[counter] = amount
    return out


def money(row: dict[str, float]) -> dict[str, Any]:
    """The row's delivery and money counters (the request counters left out)."""
    skip = ("requests", "matches", "empties", "no_matches")
    return {c: pytest.approx(a) for c, a in row.items() if c not in skip}


def serve_ugc(client, key: str, ad_id: str, post_id: str) -> str:
    client.app.state.ctx.matcher.ad_ids = (ad_id,)
    body = {"post_id": post_id, "message": "my pup will not touch his kibble"}
    r = client.post("/v1/ugc/process", json=body, headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    (ad,) = r.json()["ads"]
    pixel = str(ad["pixel_trackers"][-1]["url"])
    return pixel.split("t=", 1)[1]


def convert(client, click_id: str) -> float:
    key, _ = partner(client, "ad-manager")
    r = client.post(CONVERSIONS, json={"click_id": click_id}, headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    return float(r.json()["billed_usd"])


def test_a_ugc_pixel_impression_and_a_click_on_it_move_the_partners_key_row(client):
    # The shoe's ad set prices CPM $12.50, the dog's CPC $1.25.
    key, record = partner(client, "ugc")
    shoe, dog = serve_ugc(client, key, SHOE, "p-1"), serve_ugc(client, key, DOG, "p-2")
    view(client, shoe, "ugc", 1)
    assert money(key_row(client, record.family)) == {
        "impressions": 1, "viewable_impressions": 1,
        "billable_usd": 0.0125, "billable_usd_cpm": 0.0125,
    }  # fmt: skip
    view(client, dog, "ugc", 2)
    click(client, dog, "ugc", 2)
    assert money(key_row(client, record.family)) == {
        "impressions": 2, "viewable_impressions": 2, "clicks": 1,
        "billable_usd": 1.2625, "billable_usd_cpm": 0.0125, "billable_usd_cpc": 1.25,
    }  # fmt: skip
    # The serves themselves were counted for the same row.
    assert key_row(client, record.family)["requests"] == 2


def test_ai_views_clicks_and_conversions_move_the_partners_key_row(client):
    load(client, doc(**{DOG_SET: ("cpa", 18.0)}))
    key, record = partner(client, "ai")
    shoe, dog = serve_ai(client, key, SHOE, "m-1"), serve_ai(client, key, DOG, "m-2")
    fire(client, shoe["render_impression_url"])
    fire(client, shoe["view_impression_url"])
    assert money(key_row(client, record.family)) == {
        "impressions": 1, "viewable_impressions": 1,
        "billable_usd": 0.0125, "billable_usd_cpm": 0.0125,
    }  # fmt: skip
    fire(client, dog["view_impression_url"])
    fire(client, dog["click_url"], "clk-dog-00001")
    assert convert(client, "clk-dog-00001") == 18.0
    assert money(key_row(client, record.family)) == {
        "impressions": 1, "viewable_impressions": 2, "clicks": 1, "conversions": 1,
        "billable_usd": 18.0125, "billable_usd_cpm": 0.0125, "billable_usd_cpa": 18.0,
    }  # fmt: skip


def test_an_ai_click_that_bills_cpc_moves_the_key_row(client):
    key, record = partner(client, "ai")
    dog = serve_ai(client, key, DOG, "m-1")
    fire(client, dog["render_impression_url"])
    fire(client, dog["click_url"])
    assert money(key_row(client, record.family)) == {
        "impressions": 1, "clicks": 1, "billable_usd": 1.25, "billable_usd_cpc": 1.25,
    }  # fmt: skip


def test_an_invalid_partner_impression_counts_as_invalid_for_the_key(client):
    key, record = partner(client, "ugc")
    token = serve_ugc(client, key, SHOE, "p-1")
    r = client.get(
        "/dea/ugc/impression", params={"t": token}, headers={"User-Agent": "python-requests/2"}
    )
    assert r.status_code == 204
    assert money(key_row(client, record.family)) == {"invalid_bot_user_agent": 1}


def test_a_rotated_keys_events_land_in_the_same_row(client):
    ctx = client.app.state.ctx
    key, record = partner(client, "ugc")
    before = serve_ugc(client, key, SHOE, "p-1")
    rotation = client.portal.call(ctx.keyring.rotate, key)
    assert rotation.record.key_id != record.key_id
    after = serve_ugc(client, rotation.api_key, SHOE, "p-2")
    view(client, before, "ugc", 1)
    view(client, after, "ugc", 2)
    rows = key_rows(client)
    assert list(rows) == [record.key_id]  # the family: the first key's id
    assert rows[record.key_id]["impressions"] == 2
    assert rows[record.key_id]["requests"] == 2


def test_tokens_and_ai_urls_issued_before_the_partner_was_sealed_count_for_no_key(client):
    ctx = client.app.state.ctx
    # A pixel token of the previous release: no partner in it.
    token, claims = issue_impression_token(
        ctx.signer, surface="ugc", env="production", ad_id=SHOE, campaign_id=SHOE_CAMPAIGN,
        now=ctx.clock(), cpm_usd=12.5, pricing=PricingModel("cpm", 12.5), post_id="p-1",
    )  # fmt: skip
    assert claims.key_family is None
    view(client, token, "ugc", 1)
    # An AI URL of the previous release: scope and pricing, no partner.
    number = ctx.matcher.catalogue.ad_number(DOG)
    _render, view_url = ai_beacon_urls(
        ctx.signer, "http://testserver", number, "m-1", "c-1", scope=AI_SCOPE,
        pricing=PricingModel("cpc", 1.25),
    )  # fmt: skip
    fire(client, view_url)
    assert key_rows(client) == {}
    rows = client.portal.call(ctx.store.counts)
    views = {i: a for s, i, c, a in rows if s == "campaign" and c == "viewable_impressions"}
    assert views == {SHOE_CAMPAIGN: 1, DOG_CAMPAIGN: 1}


def test_the_tags_own_serves_move_no_key_row(client):
    token = serve_url(client, SHOE)
    view(client, token, "url", 1)
    click(client, token, "url", 1)
    assert key_rows(client) == {}
