"""A partner's UGC ad carries a ``click_url`` beside its edge pixel: the partner fires it when
a person clicks the ad, perhaps from its own server for many users, as it fires the pixel.
Its clicks are judged as the AI click URL's are (no per-client click rate, the user's
browser named in ``X-Device-User-Agent``), so a CPC ad served through ``/v1/ugc/process``
bills its bid once per viewed ad, and a CPA ad converts through the id its
``{click_id}`` macro received."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from edge.beacons import issue_impression_token, read_impression_token, ugc_derived_click_id
from matcher.catalogue import load_catalogue
from tests.delivery.helpers import PUB, at_once, register
from tests.delivery.test_partner_revenue import key_row, money, partner
from tests.delivery.test_pricing_as_served import (
    CONVERSIONS,
    DOG,
    DOG_CAMPAIGN,
    DOG_SET,
    billed,
    counted,
    doc,
    load,
)
from tests.routes.conftest import CATALOGUE, Script

SERVER = {"User-Agent": "python-requests/2.32"}  # the partner's server, firing for its users
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36"
FOR_USER = {**SERVER, "X-Device-User-Agent": BROWSER}


@pytest.fixture
def client(make_client):
    client = make_client(matcher=Script(load_catalogue(CATALOGUE)))
    register(client)
    return client


def serve(client, key: str, ad_id: str, post_id: str) -> dict[str, Any]:
    client.app.state.ctx.matcher.ad_ids = (ad_id,)
    body = {"post_id": post_id, "message": "my pup will not touch his kibble"}
    r = client.post("/v1/ugc/process", json=body, headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    (ad,) = r.json()["ads"]
    return dict(ad)


def pixel(ad: dict[str, Any]) -> str:
    return str(ad["pixel_trackers"][-1]["url"])


def fire(client, url: str, headers: dict[str, str] = FOR_USER, **params: str) -> None:
    if params:
        url = f"{url}&{urlencode(params)}"
    r = client.get(url, headers=headers)
    assert r.status_code == 204, r.text


def test_one_server_clicking_for_many_users_bills_each_cpc_click(client):
    # The dog's ad set prices CPC $1.25. The tag's own clicks allow one a minute per
    # client; a partner's server fires every user's clicks from one address.
    key, record = partner(client, "ugc")
    for n in range(3):
        ad = serve(client, key, DOG, f"p-{n}")
        assert urlsplit(ad["click_url"]).path == "/dea/ugc/click"
        fire(client, pixel(ad))
        fire(client, ad["click_url"])
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(3.75)}
    assert money(key_row(client, record.family)) == {
        "impressions": 3, "viewable_impressions": 3, "clicks": 3,
        "billable_usd": 3.75, "billable_usd_cpc": 3.75,
    }  # fmt: skip


def test_copies_of_click_urls_at_once_take_no_budget_from_the_genuine_ones(client):
    # $2.75 left, a $1.25 CPC bid, three viewed ads whose click URLs a partner fires four
    # times each at once: $1.25, $1.25 and the $0.25 left. A copy, or a second id on the
    # same view, holds no charge that only one click of the view can bill.
    ctx = client.app.state.ctx
    key, _ = partner(client, "ugc")
    ads = [serve(client, key, DOG, f"p-{n}") for n in range(3)]
    for ad in ads:
        fire(client, pixel(ad))
    ctx.spend.add(DOG_CAMPAIGN, 5_000.0 - 2.75, ctx.clock())  # the dog's budget is $5,000
    copies = [
        (
            "GET",
            ad["click_url"] + (f"&click_id=partner-{n}-{c}" if c == 3 else ""),
            {"headers": FOR_USER},
        )
        for n, ad in enumerate(ads)
        for c in range(4)
    ]
    answers = at_once(client, copies)
    assert [r.status_code for r in answers] == [204] * 12
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(2.75)}
    assert counted(client, DOG_CAMPAIGN, "clicks") == 3
    assert counted(client, DOG_CAMPAIGN, "invalid_clicks_duplicate") == 3


def test_a_refired_click_url_is_a_replay_and_a_second_id_a_duplicate(client):
    key, _ = partner(client, "ugc")
    ad = serve(client, key, DOG, "p-1")
    fire(client, pixel(ad))
    fire(client, ad["click_url"])
    fire(client, ad["click_url"])  # the same derived id: counts nothing
    fire(client, ad["click_url"], click_id="partner-click-0002")  # another id, same view
    assert counted(client, DOG_CAMPAIGN, "clicks") == 1
    assert counted(client, DOG_CAMPAIGN, "invalid_clicks_duplicate") == 1
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}


@pytest.mark.parametrize(
    ("headers", "reason"),
    [(FOR_USER, "click_before_impression"), (SERVER, "bot_user_agent")],
    ids=["before-the-pixel", "no-device-header"],
)
def test_an_invalid_click_is_stored_and_bills_nothing(client, headers, reason):
    key, _ = partner(client, "ugc")
    ad = serve(client, key, DOG, "p-1")
    if reason != "click_before_impression":
        fire(client, pixel(ad))
    fire(client, ad["click_url"], headers)
    assert counted(client, DOG_CAMPAIGN, f"invalid_clicks_{reason}") == 1
    assert billed(client, DOG_CAMPAIGN) == {}


def test_a_cpa_ad_converts_through_the_id_its_click_id_macro_received(client):
    raw = doc(**{DOG_SET: ("cpa", 18.0)})
    for campaign in raw["campaigns"]:
        for ad_set in campaign["ad_sets"]:
            for ad in ad_set["ads"]:
                if ad["id"] == DOG:
                    ad["click_through_url"] = "https://pets.example.com/kibble?c={click_id}"
    load(client, raw)
    key, record = partner(client, "ugc")
    ad = serve(client, key, DOG, "p-1")
    token = parse_qs(urlsplit(ad["click_url"]).query)["t"][0]
    click_id = ugc_derived_click_id(token_id_of(client, token))
    assert ad["click_through_url"] == f"https://pets.example.com/kibble?c={click_id}"
    fire(client, pixel(ad))
    fire(client, ad["click_url"])
    manager, _ = partner(client, "ad-manager")
    r = client.post(CONVERSIONS, json={"click_id": click_id}, headers={"X-API-Key": manager})
    assert r.status_code == 200, r.text
    assert r.json()["billed_usd"] == 18.0
    assert key_row(client, record.family)["conversions"] == 1
    # Another serve of the same ad gets another id.
    again = serve(client, key, DOG, "p-2")
    assert again["click_through_url"] != ad["click_through_url"]


def test_the_edges_own_click_ids_cannot_be_filed_from_another_url(client):
    # A UGC ad's derived click id is computable from its public token: filed as a second
    # valid click elsewhere, it made the partner's conversion ambiguous and billed nothing.
    raw = doc(**{DOG_SET: ("cpa", 18.0)})
    load(client, raw)
    key, _ = partner(client, "ugc")
    ad = serve(client, key, DOG, "p-1")
    token = parse_qs(urlsplit(ad["click_url"]).query)["t"][0]
    click_id = ugc_derived_click_id(token_id_of(client, token))
    fire(client, pixel(ad))
    fire(client, ad["click_url"], click_id=click_id)  # its own derived id, named: accepted
    other = serve(client, key, DOG, "p-2")
    fire(client, pixel(other))
    stolen = client.get(
        f"{other['click_url']}&{urlencode({'click_id': click_id})}", headers=FOR_USER
    )
    assert stolen.status_code == 400 and stolen.json()["error"]["field"] == "click_id"
    tag = {"impression_token": token, "click_id": click_id, "v": "1.0.0"}
    r = client.post("/dea/ugc/click", json=tag, headers=FOR_USER)
    assert r.status_code == 400 and r.json()["error"]["field"] == "click_id"
    assert "edge's own" in r.json()["error"]["message"]
    manager, _ = partner(client, "ad-manager")
    r = client.post(CONVERSIONS, json={"click_id": click_id}, headers={"X-API-Key": manager})
    assert r.status_code == 200, r.text
    assert r.json()["billed_usd"] == 18.0


def token_id_of(client, token: str) -> str:
    ctx = client.app.state.ctx
    return read_impression_token(
        ctx.signer, token, surface="ugc", env="production", now=ctx.clock()
    ).token_id


def test_a_revoked_partners_click_counts_on_no_key_row(client):
    ctx = client.app.state.ctx
    key, record = partner(client, "ugc")
    ad = serve(client, key, DOG, "p-1")
    fire(client, pixel(ad))
    client.portal.call(ctx.keyring.revoke, record.key_id)
    fire(client, ad["click_url"])
    assert counted(client, DOG_CAMPAIGN, "invalid_clicks_key_revoked") == 1
    assert billed(client, DOG_CAMPAIGN) == {}
    assert "clicks" not in key_row(client, record.family)


def test_a_token_the_tag_was_given_reports_its_clicks_through_the_tags_route(client):
    # Bound to the browser it was issued to: the partner's rules must not apply to it.
    ctx = client.app.state.ctx
    token, _ = issue_impression_token(
        ctx.signer, surface="ugc", env="production", ad_id=DOG, campaign_id=DOG_CAMPAIGN,
        now=ctx.clock(), publisher_id=PUB, post_id="p-1", client="a-browser-binding",
    )  # fmt: skip
    r = client.get("/dea/ugc/click", params={"t": token}, headers=FOR_USER)
    assert r.status_code == 400 and r.json()["error"]["field"] == "t"
    assert "POST /dea/ugc/click" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "t"),
        ({"t": "not-a-token"}, "t"),
        ({"t": "TOKEN", "click_id": "short"}, "click_id"),
        ({"t": "TOKEN", "click_id": "has space in it"}, "click_id"),
        ({"t": "TOKEN", "at": "1"}, "at"),
    ],
    ids=["no-token", "forged", "short-id", "bad-id", "unknown-parameter"],
)
def test_a_bad_click_url_is_a_400_naming_the_field(client, params, field):
    key, _ = partner(client, "ugc")
    token = parse_qs(urlsplit(serve(client, key, DOG, "p-1")["click_url"]).query)["t"][0]
    query = {k: (token if v == "TOKEN" else v) for k, v in params.items()}
    r = client.get("/dea/ugc/click", params=query, headers=FOR_USER)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field
    assert counted(client, DOG_CAMPAIGN, "clicks") == 0
