"""What a partner was handed and kept back bills nothing once it should not: an AI beacon
URL fired more than a day after its serve is refused like an expired impression token. On
SQLite and on PostgreSQL."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from edge.beacons import AI_URL_MAX_AGE_SECONDS, CLOCK_SKEW_SECONDS
from matcher.catalogue import load_catalogue
from tests.conftest import assert_error_shape
from tests.delivery.helpers import register, serve_ai
from tests.delivery.test_partner_revenue import key_row, money, partner
from tests.delivery.test_pricing_as_served import DOG, DOG_CAMPAIGN, billed, fire
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
    ctx = client.app.state.ctx
    rows = client.portal.call(ctx.store.counts)
    return {c: a for s, i, c, a in rows if (s, i) == ("ad", ad_id) and a}


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
