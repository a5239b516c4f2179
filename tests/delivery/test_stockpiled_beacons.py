"""What a partner was handed and kept back bills nothing once it should not: an AI beacon
URL fired more than a day after its serve is refused like an expired impression token, and
the events of a partner whose key family has no valid key left (revoked) are stored as
``key_revoked``, bill nothing and move nothing on its key row. A key rotated within its
family keeps the family's beacons counting. On SQLite and on PostgreSQL."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx2 as httpx
import pytest

from edge.beacons import AI_URL_MAX_AGE_SECONDS, CLOCK_SKEW_SECONDS
from matcher.catalogue import load_catalogue
from tests.conftest import US_CLIENT, assert_error_shape
from tests.delivery.helpers import register, serve_ai
from tests.delivery.test_partner_revenue import key_row, money, partner, serve_ugc
from tests.delivery.test_pricing_as_served import (
    DOG,
    DOG_CAMPAIGN,
    SHOE,
    SHOE_CAMPAIGN,
    billed,
    click,
    fire,
    serve_url,
    view,
)
from tests.routes.conftest import CATALOGUE, Script


@pytest.fixture(params=["sqlite", "postgres"])
def client(request, make_client):
    db = {}
    if request.param == "postgres":
        db["db"] = request.getfixturevalue("postgres").new_database()
    client = make_client(matcher=Script(load_catalogue(CATALOGUE)), **db)
    register(client)
    return client


def get(client, url: str, click_id: str | None = None):
    parts = urlsplit(url)
    extra = "" if click_id is None else f"&click_id={click_id}"
    return client.get(f"{parts.path}?{parts.query}{extra}")


def ad_row(client, ad_id: str) -> dict[str, float]:
    """The ad's delivery counters that moved (its serves, ``matches``, left out)."""
    ctx = client.app.state.ctx
    client.portal.call(ctx.counters.flush, ctx.store)
    rows = client.portal.call(ctx.store.counts)
    return {c: a for s, i, c, a in rows if (s, i) == ("ad", ad_id) and a and c != "matches"}


def revoke(client, key_id: str) -> None:
    ctx = client.app.state.ctx
    assert client.portal.call(ctx.keyring.revoke, key_id) is not None


# -- AI URLs expire ---------------------------------------------------------------------------


def test_an_ai_url_carries_its_issue_time(client):
    key, _ = partner(client, "ai")
    ad = serve_ai(client, key, DOG, "m-1")
    now = int(client.app.state.ctx.clock())
    for name in ("render_impression_url", "view_impression_url", "click_url"):
        query = urlsplit(ad[name]).query
        assert f"&issued_at={now}&sig=" in query, name


def test_an_ai_url_fired_after_its_max_age_bills_and_counts_nothing(client):
    key, record = partner(client, "ai")
    late = serve_ai(client, key, DOG, "m-1")
    client.app.state.ctx.clock.advance(AI_URL_MAX_AGE_SECONDS - 60)
    fresh = serve_ai(client, key, DOG, "m-2")
    client.app.state.ctx.clock.advance(61)  # the first serve is a day and a second old
    for name in ("render_impression_url", "view_impression_url", "click_url"):
        err = assert_error_shape(get(client, late[name]), 400, "invalid_token")
        assert err["field"] == "issued_at" and "expired" in err["message"]
    assert billed(client, DOG_CAMPAIGN) == {}
    assert ad_row(client, DOG) == {}
    # The second serve's URLs are within the day: counted and billed.
    fire(client, fresh["render_impression_url"])
    fire(client, fresh["click_url"])
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}
    assert money(key_row(client, record.family)) == {
        "impressions": 1, "clicks": 1, "billable_usd": 1.25, "billable_usd_cpc": 1.25,
    }  # fmt: skip


def test_an_ai_url_issued_too_far_in_the_future_is_refused(client):
    # A node whose clock ran ahead: a few minutes are taken, more are not.
    ctx = client.app.state.ctx
    key, _ = partner(client, "ai")
    ctx.clock.advance(CLOCK_SKEW_SECONDS)
    near = serve_ai(client, key, DOG, "m-1")
    ctx.clock.advance(1)
    ahead = serve_ai(client, key, DOG, "m-2")
    ctx.clock.advance(-CLOCK_SKEW_SECONDS - 1)  # the node taking the beacons
    err = assert_error_shape(get(client, ahead["render_impression_url"]), 400, "invalid_token")
    assert err["field"] == "issued_at"
    assert get(client, near["render_impression_url"]).status_code == 204
    assert ad_row(client, DOG) == {"impressions": 1}


# -- a revoked partner's events ---------------------------------------------------------------


def test_a_revoked_ai_partners_beacons_bill_nothing_and_leave_its_key_row_alone(client):
    key, record = partner(client, "ai")
    shoe, dog = serve_ai(client, key, SHOE, "m-1"), serve_ai(client, key, DOG, "m-2")
    before = money(key_row(client, record.family))
    revoke(client, record.key_id)
    for ad in (shoe, dog):
        for name in ("render_impression_url", "view_impression_url", "click_url"):
            assert get(client, ad[name]).status_code == 204, name  # answered as a valid one
    assert billed(client, DOG_CAMPAIGN) == {}
    assert money(key_row(client, record.family)) == before == {}
    # Stored with its reason for the ad and campaign, as other invalid traffic is.
    assert ad_row(client, SHOE) == {"invalid_key_revoked": 2, "invalid_clicks_key_revoked": 1}
    assert ad_row(client, DOG) == {"invalid_key_revoked": 2, "invalid_clicks_key_revoked": 1}


def test_a_revoked_ugc_partners_pixel_and_its_click_bill_nothing(client):
    key, record = partner(client, "ugc")
    dog = serve_ugc(client, key, DOG, "p-1")
    revoke(client, record.key_id)
    assert client.get("/dea/ugc/impression", params={"t": dog}).status_code == 204
    body = {"impression_token": dog, "click_id": "clk-00000001", "v": "1.0.0"}
    assert client.post("/dea/ugc/click", json=body).json() == {
        "acknowledged": True, "counted": True,
    }  # fmt: skip
    assert billed(client, DOG_CAMPAIGN) == {}
    assert money(key_row(client, record.family)) == {}
    assert ad_row(client, DOG) == {"invalid_key_revoked": 1, "invalid_clicks_key_revoked": 1}


def post_to_stack(client, path: str, body: dict[str, str]):
    """POST ``body`` to the Starlette stack behind the beacon lane, in the app's own event
    loop (a PostgreSQL pool answers there only)."""
    lane = client.app.lane

    async def stack(scope, receive, send):
        scope["app"] = client.app
        await lane.app(scope, receive, send)

    async def send():
        transport = httpx.ASGITransport(app=stack, client=US_CLIENT)
        agent = {"User-Agent": client.headers["user-agent"]}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers=agent
        ) as http:
            return await http.post(path, json=body)

    return client.portal.call(send)


@pytest.mark.parametrize("path", ["lane", "stack"])
def test_a_revoked_partners_pixel_token_posted_to_the_tags_beacon_bills_nothing(client, path):
    # The tag's POST beacon takes a UGC token too: the partner's family is checked there,
    # in the beacon lane's direct form and in the route behind it alike.
    key, record = partner(client, "ugc")
    shoe = serve_ugc(client, key, SHOE, "p-1")  # CPM $12.50
    revoke(client, record.key_id)
    body = {"impression_token": shoe, "impression_id": "imp-00000001", "v": "1.0.0"}
    if path == "lane":
        r = client.post("/dea/ugc/impression", json=body)
    else:
        r = post_to_stack(client, "/dea/ugc/impression", body)
    assert r.json() == {"acknowledged": True, "counted": True}
    assert billed(client, SHOE_CAMPAIGN) == {}
    assert money(key_row(client, record.family)) == {}
    assert ad_row(client, SHOE) == {"invalid_key_revoked": 1}


def test_the_tags_own_tokens_cost_no_family_lookup(client, monkeypatch):
    ctx = client.app.state.ctx

    async def looked_up(family):
        raise AssertionError(f"looked up {family}")

    monkeypatch.setattr(ctx.keyring, "family_live", looked_up)
    token = serve_url(client, SHOE)
    view(client, token, "url", 1)
    click(client, token, "url", 1)
    assert billed(client, SHOE_CAMPAIGN) == {"cpm": pytest.approx(0.0125)}


def test_a_key_rotated_within_its_family_keeps_the_family_billing(client):
    ctx = client.app.state.ctx
    key, record = partner(client, "ai")
    dog = serve_ai(client, key, DOG, "m-1")
    rotation = client.portal.call(ctx.keyring.rotate, key)
    revoke(client, record.key_id)  # the old key, now a secondary: the new one is active
    fire(client, dog["render_impression_url"])
    fire(client, dog["click_url"])
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}
    assert money(key_row(client, record.family))["billable_usd_cpc"] == pytest.approx(1.25)
    # Once the family's last valid key goes, so does its billing.
    revoke(client, rotation.record.key_id)
    counted = ad_row(client, DOG)
    assert get(client, dog["view_impression_url"]).status_code == 204
    assert ad_row(client, DOG) == {**counted, "invalid_key_revoked": 1}


def test_a_revocation_made_by_another_process_applies_within_the_key_cache_time(client):
    # The operator's `edge keys revoke` writes the store; on SQLite nothing is announced, so
    # this process sees it when its cached view of the family is older than the key cache.
    ctx = client.app.state.ctx
    key, record = partner(client, "ai")
    first, second = serve_ai(client, key, DOG, "m-1"), serve_ai(client, key, DOG, "m-2")
    fire(client, first["render_impression_url"])  # the family is live, and cached so
    assert client.portal.call(ctx.store.revoke_key, record.key_id, ctx.clock())
    ctx.clock.advance(ctx.settings.key_cache_seconds)
    fire(client, second["render_impression_url"])
    fire(client, second["click_url"])
    assert billed(client, DOG_CAMPAIGN) == {}
    assert money(key_row(client, record.family)) == {"impressions": 1}
    assert ad_row(client, DOG) == {
        "impressions": 1, "invalid_key_revoked": 1, "invalid_clicks_key_revoked": 1,
    }  # fmt: skip
