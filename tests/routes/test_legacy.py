"""Earlier-described routes behind EDGE_LEGACY_API."""

from __future__ import annotations

import datetime as dt

import pytest

from edge.keys import SECONDARY_TTL_SECONDS
from edge.settings import RateLimit
from edge.store import StoreUnavailable
from tests.conftest import assert_error_shape, issue_key
from tests.routes.conftest import Script, post_json

DOG = "my pup will not touch his kibble, any ideas?"
ROUTES = [
    ("POST", "/ugc/process"),
    ("POST", "/ugc/disable"),
    ("POST", "/ugc/impression"),
    ("GET", "/keys/apiKey"),
]


@pytest.fixture
def legacy(make_client):
    client = make_client(legacy_api=True)
    return client, issue_key(client, "ugc")


@pytest.fixture
def scripted(make_client, script):
    client = make_client(legacy_api=True, matcher=script)
    return client, issue_key(client, "ugc")


@pytest.fixture
def serving(make_client, shared_matcher):
    """A scripted matcher over the bundled catalogue: tests choose what a match serves."""
    client = make_client(legacy_api=True, matcher=Script(shared_matcher.catalogue))
    return client, issue_key(client, "ugc")


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_off_by_default_404(make_client, method, path):
    client = make_client()
    key = issue_key(client, "ugc")
    r = client.request(method, path, json={}, headers={"X-API-Key": key})
    err = assert_error_shape(r, 404, "not_found")
    assert "EDGE_LEGACY_API=1" in err["message"]  # says how to turn it on
    assert path not in client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_needs_a_valid_key(legacy, method, path):
    client, _ = legacy
    for headers in ({}, {"X-API-Key": "prod-ugc-not-a-key"}):
        r = client.request(method, path, json={}, headers=headers)
        assert_error_shape(r, 401, "unauthorized")


# -- POST /ugc/process -------------------------------------------------------------------------


def test_process_ads_carry_the_earlier_fields(scripted, script):
    client, key = scripted
    script.ad_ids = ("ad-trail-shoes", "ad-dog-food")
    body = post_json(client, "/ugc/process", {"post_id": "p-1", "message": DOG}, key).json()
    assert body["post_id"] == "p-1"
    shoes, dog = body["ads"]
    assert shoes["ad_id"] == "ad-trail-shoes" and shoes["title"] == "Trail shoes that grip"
    assert shoes["pricing_model"] == {"type": "cpm", "bid_amount": 12.5}
    assert dog["pricing_model"] == {"type": "cpc", "bid_amount": 1.25}
    assert (shoes["relevancy_score"], dog["relevancy_score"]) == (0.9, 0.8)
    assert {"cta", "click_through_url", "advertiser_name", "ttl_seconds"} <= set(shoes)
    assert dog["pixel_trackers"] == [
        {"vendor": "acme", "tracker_type": "impression", "url": "https://px.example.com/i?ad=dog"}
    ]  # no edge pixel: this API reports impressions through POST /ugc/impression


@pytest.mark.parametrize("outcome", ["no_match", "empty"])
def test_process_answers_an_empty_array_when_nothing_passes(scripted, script, outcome):
    client, key = scripted
    script.outcome, script.retry_after = outcome, 3600
    body = post_json(client, "/ugc/process", {"post_id": "p-1", "message": DOG}, key).json()
    assert body == {"post_id": "p-1", "ads": []}


def test_process_meta_location_then_ip_geo(scripted, script):
    client, key = scripted
    body = {"post_id": "p", "message": DOG, "meta": {"location": "US-MN", "source": "app"}}
    post_json(client, "/ugc/process", body, key, **{"X-Forwarded-For": "8.8.8.8"})
    assert script.last.geo.state == "US-MN"
    post_json(
        client,
        "/ugc/process",
        {"post_id": "p", "message": DOG},
        key,
        **{"X-Forwarded-For": "8.8.8.8"},
    )
    assert (script.last.geo.state, script.last.geo.zipcode) == ("US-CA", "94043")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": DOG}, "post_id"),
        ({"post_id": "p", "message": ""}, "message"),
        ({"post_id": "p", "message": "x" * 10_001}, "message"),
        ({"post_id": "p", "message": DOG, "meta": "US-CA"}, "meta"),
        ({"post_id": "p", "message": DOG, "meta": {"location": "Minnesota"}}, "meta.location"),
        ({"post_id": "p", "message": DOG, "geo_target": {}}, "geo_target"),
    ],
)
def test_process_validation_is_400(scripted, body, field):
    client, key = scripted
    assert assert_error_shape(post_json(client, "/ugc/process", body, key), 400)["field"] == field


def test_process_rate_limit_is_429(make_client, script):
    client = make_client(legacy_api=True, rate_limit_ugc=RateLimit(1, 5.0), matcher=script)
    key = issue_key(client, "ugc")
    body = {"post_id": "p", "message": DOG}
    assert post_json(client, "/ugc/process", body, key).status_code == 200
    r = post_json(client, "/ugc/process", body, key)
    assert_error_shape(r, 429, "rate_limited")
    assert r.headers["Retry-After"] == "5" and "RateLimit" in r.headers


def test_process_matching_failure_is_502(scripted, script):
    client, key = scripted
    script.error = RuntimeError("downstream")
    r = post_json(client, "/ugc/process", {"post_id": "p", "message": DOG}, key)
    assert_error_shape(r, 502)
    assert "Retry-After" in r.headers


# -- POST /ugc/disable -------------------------------------------------------------------------


def top_ad(client, key, post_id):
    ads = post_json(client, "/ugc/process", {"post_id": post_id, "message": DOG}, key).json()["ads"]
    return [a["ad_id"] for a in ads]


def test_disable_is_thread_scoped_and_idempotent(legacy):
    client, key = legacy
    served = top_ad(client, key, "thread-1")
    assert served, "the sandbox catalogue has dog-food demand"
    pairs = [{"post_id": "thread-1", "ad_id": served[0], "meta_data": {"reason": "user hid it"}}]
    for _ in range(2):  # idempotent: the same disable twice is still a success
        r = post_json(client, "/ugc/disable", pairs, key)
        assert r.status_code == 200 and r.json() == {"success": True}
    assert served[0] not in top_ad(client, key, "thread-1")
    assert served[0] in top_ad(client, key, "thread-2")  # another thread still gets it


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"post_id": "p", "ad_id": "a"}, "body"),
        ([], "body"),
        ([{"post_id": "p"}], "[0].ad_id"),
        ([{"post_id": "p", "ad_id": "a"}, {"post_id": 3, "ad_id": "a"}], "[1].post_id"),
        ([{"post_id": "p", "ad_id": "a", "meta_data": "x"}], "[0].meta_data"),
        ([{"post_id": "p", "ad_id": "a"}] * 101, "body"),
    ],
)
def test_disable_validation_is_400(legacy, body, field):
    client, key = legacy
    assert assert_error_shape(post_json(client, "/ugc/disable", body, key), 400)["field"] == field


def test_disable_store_outage_is_503(legacy, monkeypatch):
    client, key = legacy

    async def down(*args):
        raise StoreUnavailable("disk full")

    monkeypatch.setattr(client.app.state.ctx.store, "disable_ads", down)
    r = post_json(client, "/ugc/disable", [{"post_id": "p", "ad_id": "a"}], key)
    assert_error_shape(r, 503)
    assert r.headers["Retry-After"] == "5"


# -- POST /ugc/impression ----------------------------------------------------------------------


def run(client, fn, *args):
    return client.portal.call(fn, *args)


def serve(client, key, post_id, *ad_ids):
    """The partner's match of ``post_id`` served these ads (a scripted matcher's)."""
    script = client.app.state.ctx.matcher
    script.ad_ids = ad_ids
    r = post_json(client, "/ugc/process", {"post_id": post_id, "message": DOG}, key)
    assert [a["ad_id"] for a in r.json()["ads"]] == list(ad_ids)


def counts(client) -> dict:
    ctx = client.app.state.ctx
    return {(s, i, c): a for s, i, c, a in run(client, ctx.store.counts)}


BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
BROWSER = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)


def test_a_bots_impression_is_stored_invalid_and_billed_nothing(serving):
    client, key = serving
    serve(client, key, "p-9", "ad-gps-watch")
    body = {"post_id": "p-9", "ad_id": "ad-gps-watch"}
    for _ in range(3):
        r = post_json(client, "/ugc/impression", body, key, **{"X-Device-User-Agent": BOT})
        assert r.status_code == 200 and r.json() == {"post_id": "p-9", "acknowledged": True}
    c = counts(client)
    assert c[("ad", "ad-gps-watch", "invalid_bot_user_agent")] == 3
    assert ("ad", "ad-gps-watch", "impressions") not in c
    assert ("ad", "ad-gps-watch", "billable_usd") not in c
    assert "cmp-stride" not in run(client, client.app.state.ctx.store.spend_by_campaign)


def test_a_partner_server_is_judged_by_the_reader_it_names_never_by_its_own_agent(serving):
    # The impression is fired by the partner's server, whose HTTP library is on the crawler
    # list. The earlier API never asked partners to name the reader, so a call that names
    # none counts (judging the library's agent would void every impression of a partner
    # that changed nothing); X-Device-User-Agent names the reader's browser, which is judged.
    client, key = serving
    serve(client, key, "p-9", "ad-gps-watch")
    body = {"post_id": "p-9", "ad_id": "ad-gps-watch"}
    server = {"User-Agent": "python-requests/2.32.3"}
    post_json(client, "/ugc/impression", body, key, **server)
    post_json(client, "/ugc/impression", body, key, **{"User-Agent": ""})
    post_json(client, "/ugc/impression", body, key, **server, **{"X-Device-User-Agent": BOT})
    post_json(client, "/ugc/impression", body, key, **server, **{"X-Device-User-Agent": BROWSER})
    c = counts(client)
    assert c[("ad", "ad-gps-watch", "invalid_bot_user_agent")] == 1
    assert c[("ad", "ad-gps-watch", "impressions")] == 3


def test_an_ad_not_served_for_the_post_to_this_partner_is_invalid_and_billed_nothing(
    serving,
):
    client, key = serving
    other = issue_key(client, "ugc")  # another partner
    serve(client, key, "p-9", "ad-gps-watch")
    serve(client, other, "p-7", "ad-dog-food")
    never = [
        {"post_id": "never-served", "ad_id": "ad-gps-watch"},  # a post never matched
        {"post_id": "p-9", "ad_id": "ad-dog-food"},  # an ad its match did not serve
        {"post_id": "p-7", "ad_id": "ad-dog-food"},  # served, but to another partner
    ]
    for body in never:
        r = post_json(client, "/ugc/impression", body, key)
        assert r.status_code == 200 and r.json()["acknowledged"] is True  # nothing told
    c = counts(client)
    assert c[("ad", "ad-gps-watch", "invalid_not_served")] == 1
    assert c[("ad", "ad-dog-food", "invalid_not_served")] == 2
    assert run(client, client.app.state.ctx.store.spend_by_campaign) == {}
    post_json(client, "/ugc/impression", {"post_id": "p-9", "ad_id": "ad-gps-watch"}, key)
    post_json(client, "/ugc/impression", {"post_id": "p-7", "ad_id": "ad-dog-food"}, other)
    c = counts(client)
    assert c[("ad", "ad-gps-watch", "impressions")] == 1
    assert c[("ad", "ad-dog-food", "impressions")] == 1  # (a CPC ad: billed per click)
    assert run(client, client.app.state.ctx.store.spend_by_campaign)["cmp-stride"] > 0


def test_a_serve_of_the_key_before_its_rotation_counts_for_the_new_key(serving):
    client, key = serving
    serve(client, key, "p-9", "ad-gps-watch")
    new = client.get("/keys/apiKey", headers={"X-API-Key": key}).json()["apiKey"]
    post_json(client, "/ugc/impression", {"post_id": "p-9", "ad_id": "ad-gps-watch"}, new)
    assert counts(client)[("ad", "ad-gps-watch", "impressions")] == 1


def test_impression_is_stored_and_billed_once_per_idempotency_key(serving):
    client, key = serving
    store = client.app.state.ctx.store
    serve(client, key, "p-9", "ad-gps-watch")
    body = {"post_id": "p-9", "ad_id": "ad-gps-watch"}  # a CPM ad set of the catalogue
    first = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
    assert first.status_code == 200 and first.json() == {"post_id": "p-9", "acknowledged": True}
    assert "Idempotent-Replayed" not in first.headers
    replay = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
    assert replay.json() == {"post_id": "p-9", "acknowledged": True}
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert run(client, store.impression_count, "legacy") == 1
    bid = client.app.state.ctx.matcher.catalogue.placement("ad-gps-watch").ad_set.pricing_model
    assert run(client, store.spend_by_campaign)["cmp-stride"] == pytest.approx(
        bid.bid_amount / 1000
    )
    post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-2"})
    post_json(client, "/ugc/impression", body, key)  # no key: each call is a new impression
    post_json(client, "/ugc/impression", body, key)
    assert run(client, store.impression_count, "legacy") == 4
    assert counts(client)[("ad", "ad-gps-watch", "impressions")] == 4  # each one valid


@pytest.mark.parametrize(
    "other",
    [{"post_id": "p-10", "ad_id": "ad-gps-watch"}, {"post_id": "p-9", "ad_id": "ad-dog-food"}],
)
def test_an_idempotency_key_reused_with_another_body_is_422(legacy, other):
    # A retry is the same call: the key sent with another impression is a mistake to
    # report, neither counted nor acknowledged as a replay of what it is not.
    client, key = legacy
    store = client.app.state.ctx.store
    body = {"post_id": "p-9", "ad_id": "ad-gps-watch"}
    first = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
    assert first.status_code == 200
    r = post_json(client, "/ugc/impression", other, key, **{"Idempotency-Key": "imp-1"})
    err = assert_error_shape(r, 422, "idempotency_key_reused")
    assert err["field"] == "Idempotency-Key"
    assert "Idempotent-Replayed" not in r.headers and "RateLimit" in r.headers
    assert run(client, store.impression_count, "legacy") == 1
    retry = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
    assert retry.status_code == 200 and retry.headers["Idempotent-Replayed"] == "true"
    assert run(client, store.impression_count, "legacy") == 1


def test_a_key_reused_by_a_concurrent_call_with_another_body_is_422(legacy):
    # Two first calls with one key race: both find the key unused, one is counted. The
    # other carried another body, so it is the 422 of a reuse, not a replay's 200.
    client, key = legacy
    store = client.app.state.ctx.store
    body = {"post_id": "p-9", "ad_id": "ad-gps-watch"}
    other = {"post_id": "p-10", "ad_id": "ad-gps-watch"}
    first = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
    assert first.status_code == 200
    stored = store.stored_impression
    checks: list[str] = []

    async def unused_at_first(dedupe_key: str):
        # The first check of each call sees the key before the other call's commit.
        checks.append(dedupe_key)
        return None if len(checks) == 1 else await stored(dedupe_key)

    store.stored_impression = unused_at_first
    try:
        r = post_json(client, "/ugc/impression", other, key, **{"Idempotency-Key": "imp-1"})
        assert_error_shape(r, 422, "idempotency_key_reused")
        checks.clear()
        same = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
        assert same.status_code == 200 and same.headers["Idempotent-Replayed"] == "true"
    finally:
        store.stored_impression = stored
    assert run(client, store.impression_count, "legacy") == 1


def test_legacy_impressions_respect_the_budget_and_count_toward_spend(serving):
    # The earlier beacon bills like the others: the campaign's spend sees it at once, and
    # past the budget it is stored unbilled.
    client, key = serving
    ctx = client.app.state.ctx
    p = next(
        p
        for p in ctx.matcher.catalogue.placements
        if p.ad_set.pricing_model.type == "cpm" and p.campaign.budget_usd
    )
    cid = p.campaign.id
    serve(client, key, "p-9", p.ad.id)
    body = {"post_id": "p-9", "ad_id": p.ad.id}
    post_json(client, "/ugc/impression", body, key)
    spent = ctx.spend.current().total[cid]
    assert spent > 0  # counted toward spend before any refresh from the store
    ctx.spend.add(cid, p.campaign.budget_usd - spent, ctx.clock())
    post_json(client, "/ugc/impression", body, key)
    assert run(client, ctx.store.impression_count, "legacy") == 2
    assert run(client, ctx.store.spend_by_campaign)[cid] == pytest.approx(spent)


@pytest.mark.parametrize(
    ("body", "headers", "field"),
    [
        ({"post_id": "p"}, {}, "ad_id"),
        ({"ad_id": "ad-gps-watch"}, {}, "post_id"),
        ({"post_id": "p", "ad_id": "ad-nope"}, {}, "ad_id"),
        (
            {"post_id": "p", "ad_id": "ad-gps-watch"},
            {"Idempotency-Key": "x" * 256},
            "Idempotency-Key",
        ),
    ],
)
def test_impression_validation_is_400(legacy, body, headers, field):
    client, key = legacy
    r = post_json(client, "/ugc/impression", body, key, **headers)
    assert assert_error_shape(r, 400)["field"] == field
    assert run(client, client.app.state.ctx.store.impression_count, "legacy") == 0


def test_impression_store_outage_is_503_and_not_acknowledged(legacy, monkeypatch):
    client, key = legacy

    async def down(*args):
        raise StoreUnavailable("locked")

    monkeypatch.setattr(client.app.state.ctx.store, "save_impression", down)
    r = post_json(client, "/ugc/impression", {"post_id": "p", "ad_id": "ad-gps-watch"}, key)
    assert_error_shape(r, 503)
    assert r.headers["Retry-After"] == "5" and "acknowledged" not in r.text


def test_an_idempotency_key_the_store_cannot_look_up_is_503(legacy, monkeypatch):
    client, key = legacy

    async def down(*args):
        raise StoreUnavailable("locked")

    monkeypatch.setattr(client.app.state.ctx.store, "stored_impression", down)
    body = {"post_id": "p", "ad_id": "ad-gps-watch"}
    r = post_json(client, "/ugc/impression", body, key, **{"Idempotency-Key": "imp-1"})
    assert_error_shape(r, 503)
    assert r.headers["Retry-After"] == "5"


# -- GET /keys/apiKey --------------------------------------------------------------------------


def rotate(client, key):
    return client.get("/keys/apiKey", headers={"X-API-Key": key})


def test_rotation_returns_the_new_key_and_keeps_the_old_one_24_hours(legacy, clock, monkeypatch):
    client, old = legacy
    ctx = client.app.state.ctx
    calls = []
    real = ctx.keyring.rotate

    async def spy(key):  # the operator's code path (edge keys rotate), not a copy of it
        calls.append(key)
        return await real(key)

    monkeypatch.setattr(ctx.keyring, "rotate", spy)
    r = rotate(client, old)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    body = r.json()
    assert set(body) == {"apiKey", "secondaryKey", "secondaryKeyExpiresAt"} and calls == [old]
    new = body["apiKey"]
    assert body["secondaryKey"] == old and new.startswith("prod-ugc-") and new != old
    expires = dt.datetime.fromisoformat(body["secondaryKeyExpiresAt"])
    assert expires.timestamp() == int(clock.now + SECONDARY_TTL_SECONDS)
    ping = {"post_id": "p", "ad_id": "ad-gps-watch"}
    assert post_json(client, "/ugc/impression", ping, new).status_code == 200
    assert post_json(client, "/ugc/impression", ping, old).status_code == 200
    assert_error_shape(rotate(client, old), 409)  # rotate its replacement instead
    clock.advance(SECONDARY_TTL_SECONDS)
    client.app.state.ctx.keyring._cache.clear()
    assert_error_shape(post_json(client, "/ugc/impression", ping, old), 401)
    assert post_json(client, "/ugc/impression", ping, new).status_code == 200


@pytest.mark.parametrize("product", ["ai", "ad-manager"])
def test_any_product_key_can_rotate_itself(legacy, product):
    client, _ = legacy
    r = rotate(client, issue_key(client, product))
    assert r.status_code == 200 and r.json()["apiKey"].startswith(f"prod-{product}-")


def test_rotation_with_an_invalid_key_is_401(legacy):
    client, key = legacy
    assert_error_shape(client.get("/keys/apiKey"), 401)
    assert_error_shape(rotate(client, key[:-1] + ("A" if key[-1] != "A" else "B")), 401)
    assert_error_shape(rotate(client, issue_key(client, "ugc", env="sandbox")), 401)
    ctx = client.app.state.ctx
    client.portal.call(ctx.keyring.revoke, key)
    assert_error_shape(rotate(client, key), 401)


def test_rotation_store_outage_is_502_with_retry_after(legacy, monkeypatch):
    client, key = legacy

    async def down(*args):
        raise StoreUnavailable("cannot commit")

    monkeypatch.setattr(client.app.state.ctx.store, "rotate_key", down)
    r = rotate(client, key)
    assert_error_shape(r, 502, "upstream_unavailable")
    assert r.headers["Retry-After"] == "5"
    monkeypatch.undo()
    assert rotate(client, key).status_code == 200  # nothing was half-done: it still rotates


def test_an_earlier_api_impression_counts_for_the_partners_key_row(serving):
    client, key = serving
    serve(client, key, "p-9", "ad-gps-watch")
    body = {"post_id": "p-9", "ad_id": "ad-gps-watch"}
    post_json(client, "/ugc/impression", body, key, **{"User-Agent": BROWSER})
    post_json(client, "/ugc/impression", body, key, **{"X-Device-User-Agent": BOT})
    ctx = client.app.state.ctx
    family = run(client, ctx.keyring.find, key).family
    c = counts(client)
    assert c[("key", family, "impressions")] == 1
    assert c[("key", family, "invalid_bot_user_agent")] == 1
    assert c[("key", family, "billable_usd")] == c[("ad", "ad-gps-watch", "billable_usd")] > 0
