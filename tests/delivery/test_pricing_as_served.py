"""One view of an ad bills under the pricing model and bid its ad set had when the ad was
served: CPM on its viewable impression, CPC on its first valid click, CPA on the conversion
of that click, whatever the live catalogue says when those events arrive. An operator's
change of an ad set's pricing applies to the ads served after it. The campaign's gates stay
live: a campaign gone from the live catalogue, or at its budget, bills nothing."""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from edge.beacons import (
    ai_beacon_urls,
    ai_click_url,
    issue_impression_token,
    read_impression_token,
)
from matcher.catalogue import load_catalogue, parse_catalogue
from matcher.types import PricingModel
from tests.conftest import AI_SCOPE, issue_key
from tests.delivery.helpers import ORIGIN, PUB, register
from tests.delivery.helpers import serve_ai as serve_ai_as
from tests.routes.conftest import CATALOGUE, Script

DOG, DOG_SET, DOG_CAMPAIGN = "ad-dog-food", "as-pets", "cmp-pets"  # CPC $1.25 in the file
SHOE, SHOE_SET, SHOE_CAMPAIGN = "ad-trail-shoes", "as-run-ca", "cmp-run"  # CPM $12.50
CONVERSIONS = "/v1/ad-manager/conversions"
_PAGES = itertools.count()  # a page per serve: the page cache answers a page's repeats


def doc(**pricing: tuple[str, float]) -> dict[str, Any]:
    """The test catalogue with these ad sets' pricing models replaced."""
    raw = json.loads(CATALOGUE.read_text())
    for campaign in raw["campaigns"]:
        for ad_set in campaign["ad_sets"]:
            if ad_set["id"] in pricing:
                kind, bid = pricing.pop(ad_set["id"])
                ad_set["pricing_model"] = {"type": kind, "bid_amount": bid}
    assert not pricing, f"no such ad sets: {pricing}"
    return raw


def load(client, raw: dict[str, Any]) -> None:
    """The operator loads ``raw``: the live catalogue from now on."""
    client.app.state.ctx.matcher.catalogue = parse_catalogue(orjson.dumps(raw))


@pytest.fixture
def client(make_client):
    client = make_client(matcher=Script(load_catalogue(CATALOGUE)))
    register(client)
    return client


def serve_url(client, ad_id: str) -> str:
    """The tag's page match serves ``ad_id``: its impression token."""
    client.app.state.ctx.matcher.ad_ids = (ad_id,)
    body = {"publisher_id": PUB, "v": "1.0.0", "page_url": f"https://news.example/{next(_PAGES)}",
            "title": "Trail", "text": "dogs and their shoes", "slots": ["side"]}  # fmt: skip
    r = client.post("/dea/url/keywords", json=body, headers={"Origin": ORIGIN})
    assert r.status_code == 200, r.text
    ad = r.json()["placements"][0]["ad"]
    assert ad["ad_id"] == ad_id
    return str(ad["impression_token"])


def serve_ugc(client, ad_id: str) -> str:
    """A partner's /v1/ugc/process serves ``ad_id``: the token of the edge's pixel in it."""
    client.app.state.ctx.matcher.ad_ids = (ad_id,)
    key = issue_key(client, "ugc")
    body = {"post_id": "p-42", "message": "my pup will not touch his kibble"}
    r = client.post("/v1/ugc/process", json=body, headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    (ad,) = r.json()["ads"]
    pixel = ad["pixel_trackers"][-1]["url"]
    return parse_qs(urlsplit(pixel).query)["t"][0]


def view(client, token: str, surface: str, n: int) -> None:
    if surface == "ugc":  # the partner fires the edge's pixel
        r = client.get("/dea/ugc/impression", params={"t": token})
        assert r.status_code == 204
        return
    body = {"impression_token": token, "impression_id": f"imp-{n:08d}", "v": "1.0.0"}
    assert client.post(f"/dea/{surface}/impression", json=body).json()["counted"] is True


def click(client, token: str, surface: str, n: int) -> None:
    body = {"impression_token": token, "click_id": f"clk-{n:08d}", "v": "1.0.0"}
    assert client.post(f"/dea/{surface}/click", json=body).json()["counted"] is True
    client.app.state.ctx.clock.advance(3601)  # past the per-client click rates


def billed(client, campaign_id: str) -> dict[str, float]:
    """The campaign's billed USD by pricing model (only those billed)."""
    ctx = client.app.state.ctx
    rows = client.portal.call(ctx.store.counts)
    return {
        counter.removeprefix("billable_usd_"): amount
        for scope, sid, counter, amount in rows
        if scope == "campaign" and sid == campaign_id and counter.startswith("billable_usd_")
    }


def counted(client, campaign_id: str, counter: str) -> int:
    ctx = client.app.state.ctx
    rows = client.portal.call(ctx.store.counts)
    return sum(int(a) for s, i, c, a in rows if (s, i, c) == ("campaign", campaign_id, counter))


@pytest.mark.parametrize("surface", ["url", "ugc"])
def test_a_pricing_model_swapped_after_the_serve_bills_each_view_as_it_was_served(client, surface):
    # Served: the shoe's ad set CPM $12.50, the dog's CPC $1.25. Then the operator swaps
    # them: the shoe's to CPC $1.00, the dog's to CPM $5. The views served before bill as
    # served: the shoe its impression only, the dog its click only.
    serve = serve_url if surface == "url" else serve_ugc
    shoe, dog = serve(client, SHOE), serve(client, DOG)
    load(client, doc(**{SHOE_SET: ("cpc", 1.0), DOG_SET: ("cpm", 5.0)}))
    for n, token in enumerate((shoe, dog)):
        view(client, token, surface, n)
        click(client, token, surface, n)
    assert billed(client, SHOE_CAMPAIGN) == {"cpm": pytest.approx(0.0125)}
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}
    assert counted(client, SHOE_CAMPAIGN, "clicks") == 1
    # Served after the change: the new pricing.
    shoe, dog = serve(client, SHOE), serve(client, DOG)
    for n, token in enumerate((shoe, dog), start=2):
        view(client, token, surface, n)
        click(client, token, surface, n)
    assert billed(client, SHOE_CAMPAIGN) == {
        "cpm": pytest.approx(0.0125), "cpc": pytest.approx(1.0),
    }  # fmt: skip
    assert billed(client, DOG_CAMPAIGN) == {
        "cpc": pytest.approx(1.25), "cpm": pytest.approx(0.005),
    }  # fmt: skip


def test_a_token_issued_before_pricing_was_sealed_bills_its_click_at_the_live_bid(client):
    # A token of the previous release carries the CPM bid (for its impression) but not the
    # pricing model: its click is priced from the live catalogue, as that release did, so
    # an upgrade loses no click of a CPC ad.
    ctx = client.app.state.ctx
    token, claims = issue_impression_token(
        ctx.signer, surface="url", env="production", ad_id=DOG, campaign_id=DOG_CAMPAIGN,
        now=ctx.clock(), publisher_id=PUB, slot_id="side",
    )  # fmt: skip
    assert claims.pricing is None
    load(client, doc(**{DOG_SET: ("cpc", 2.0)}))
    view(client, token, "url", 1)
    click(client, token, "url", 1)
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(2.0)}


def test_a_sealed_price_still_bills_nothing_once_its_campaign_is_gone_or_spent(client):
    # The campaign's gates are the live campaign's: the shoe's campaign was removed, the
    # dog's has spent its $5,000 budget. Their views served before count and bill nothing.
    dog, shoe = serve_url(client, DOG), serve_url(client, SHOE)
    raw = doc()
    raw["campaigns"] = [c for c in raw["campaigns"] if c["id"] != SHOE_CAMPAIGN]
    load(client, raw)
    ctx = client.app.state.ctx
    ctx.spend.add(DOG_CAMPAIGN, 5000.0, ctx.clock())
    for n, token in enumerate((dog, shoe)):
        view(client, token, "url", n)
        click(client, token, "url", n)
    assert counted(client, DOG_CAMPAIGN, "clicks") == 1
    assert counted(client, SHOE_CAMPAIGN, "viewable_impressions") == 1
    assert billed(client, DOG_CAMPAIGN) == {} and billed(client, SHOE_CAMPAIGN) == {}


@pytest.mark.parametrize(
    "change", ["paused", "archived", "ended"], ids=lambda c: f"{c}-then-budget-0"
)
def test_a_paused_or_ended_campaign_bills_what_it_delivered_until_its_budget_is_0(client, change):
    # Pausing, archiving or ending stops serving, not the billing of ads served before:
    # their clicks bill within the budget. A budget of 0 stops all billing at once.
    before_pause, before_budget_cut = serve_url(client, DOG), serve_url(client, DOG)
    raw = doc()
    dog = next(c for c in raw["campaigns"] if c["id"] == DOG_CAMPAIGN)
    if change == "ended":
        dog["start_at"], dog["end_at"] = "2020-01-01T00:00:00Z", "2020-02-01T00:00:00Z"
    else:
        dog["status"] = change
    load(client, raw)
    view(client, before_pause, "url", 1)
    click(client, before_pause, "url", 1)
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}
    dog["budget_usd"] = 0
    load(client, raw)
    view(client, before_budget_cut, "url", 2)
    click(client, before_budget_cut, "url", 2)
    assert counted(client, DOG_CAMPAIGN, "clicks") == 2
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}


@pytest.mark.parametrize("form", ["binary", "json"])
def test_both_token_forms_seal_the_pricing(client, form):
    ctx = client.app.state.ctx
    token, _ = issue_impression_token(
        ctx.signer, surface="url", env="production", ad_id=DOG, campaign_id=DOG_CAMPAIGN,
        now=ctx.clock(), pricing=PricingModel("cpa", 18.0), form=form,
    )  # fmt: skip
    claims = read_impression_token(
        ctx.signer, token, surface="url", env="production", now=ctx.clock()
    )
    assert claims.served_pricing == PricingModel("cpa", 18.0)


def convert(client, n: int) -> float:
    key = issue_key(client, "ad-manager")
    r = client.post(CONVERSIONS, json={"click_id": f"clk-{n:08d}"}, headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    return float(r.json()["billed_usd"])


@pytest.mark.parametrize("surface", ["url", "ugc"])
def test_a_conversion_bills_cpa_only_when_its_view_was_served_as_cpa(client, surface):
    # Served while the dog's ad set was CPA $18, then CPC $1; the other way round for a
    # second view. Each click and conversion bill as its view was served.
    serve = serve_url if surface == "url" else serve_ugc
    load(client, doc(**{DOG_SET: ("cpa", 18.0)}))
    as_cpa = serve(client, DOG)
    load(client, doc(**{DOG_SET: ("cpc", 1.0)}))
    as_cpc = serve(client, DOG)
    load(client, doc(**{DOG_SET: ("cpa", 30.0)}))
    for n, token in enumerate((as_cpa, as_cpc)):
        view(client, token, surface, n)
        click(client, token, surface, n)
    load(client, doc(**{DOG_SET: ("cpc", 2.0)}))
    assert convert(client, 0) == 18.0
    load(client, doc(**{DOG_SET: ("cpa", 40.0)}))
    assert convert(client, 1) == 0.0
    assert billed(client, DOG_CAMPAIGN) == {"cpa": pytest.approx(18.0), "cpc": pytest.approx(1.0)}
    assert counted(client, DOG_CAMPAIGN, "conversions") == 2


def test_a_click_stored_before_clicks_kept_their_pricing_converts_at_the_live_bid(client):
    # A click row of the previous release has no pricing: its conversion is priced from
    # the live catalogue, as that release did.
    token = serve_url(client, DOG)
    view(client, token, "url", 1)
    click(client, token, "url", 1)
    ctx = client.app.state.ctx

    def forget(conn):
        conn.execute("UPDATE clicks SET pricing_model = NULL, bid_usd = NULL")

    client.portal.call(ctx.store.write, forget)
    load(client, doc(**{DOG_SET: ("cpa", 12.0)}))
    assert convert(client, 1) == 12.0


# -- the AI product: its signed beacon URLs carry the pricing ----------------------------------


def serve_ai(client, ad_id: str, message_id: str) -> dict[str, Any]:
    """/v1/ai/process serves ``ad_id`` for the message to a new partner: its ad, beacon
    URLs and all."""
    return serve_ai_as(client, issue_key(client, "ai"), ad_id, message_id)


def fire(client, url: str, click_id: str | None = None) -> None:
    parts = urlsplit(url)
    extra = "" if click_id is None else f"&click_id={click_id}"
    assert client.get(f"{parts.path}?{parts.query}{extra}").status_code == 204


def test_ai_beacons_bill_each_view_as_it_was_served(client):
    shoe, dog = serve_ai(client, SHOE, "m-1"), serve_ai(client, DOG, "m-2")
    load(client, doc(**{SHOE_SET: ("cpc", 1.0), DOG_SET: ("cpm", 5.0)}))
    for n, ad in enumerate((shoe, dog)):
        fire(client, ad["render_impression_url"])
        fire(client, ad["view_impression_url"])
        fire(client, ad["click_url"], f"clk-{n:08d}")
    assert billed(client, SHOE_CAMPAIGN) == {"cpm": pytest.approx(0.0125)}
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}
    # Served after the change: the new pricing.
    shoe, dog = serve_ai(client, SHOE, "m-3"), serve_ai(client, DOG, "m-4")
    for n, ad in enumerate((shoe, dog), start=2):
        fire(client, ad["view_impression_url"])
        fire(client, ad["click_url"], f"clk-{n:08d}")
    assert billed(client, SHOE_CAMPAIGN) == {
        "cpm": pytest.approx(0.0125), "cpc": pytest.approx(1.0),
    }  # fmt: skip
    assert billed(client, DOG_CAMPAIGN) == {
        "cpc": pytest.approx(1.25), "cpm": pytest.approx(0.005),
    }  # fmt: skip


def test_an_ai_conversion_bills_cpa_only_when_its_view_was_served_as_cpa(client):
    load(client, doc(**{DOG_SET: ("cpa", 18.0)}))
    as_cpa = serve_ai(client, DOG, "m-1")
    load(client, doc(**{DOG_SET: ("cpc", 1.0)}))
    as_cpc = serve_ai(client, DOG, "m-2")
    load(client, doc(**{DOG_SET: ("cpa", 30.0)}))
    for n, ad in enumerate((as_cpa, as_cpc)):
        fire(client, ad["view_impression_url"])
        fire(client, ad["click_url"], f"clk-{n:08d}")
    assert convert(client, 0) == 18.0 and convert(client, 1) == 0.0
    assert billed(client, DOG_CAMPAIGN) == {"cpa": pytest.approx(18.0), "cpc": pytest.approx(1.0)}


def test_ai_urls_issued_before_pricing_was_sealed_bill_at_the_live_bid(client):
    ctx = client.app.state.ctx
    number = ctx.matcher.catalogue.ad_number(DOG)
    base = ctx.settings.base_url
    _, view_url = ai_beacon_urls(ctx.signer, base, number, "m-1", "c-1", scope=AI_SCOPE)
    click_url = ai_click_url(ctx.signer, base, number, "m-1", "c-1", scope=AI_SCOPE)
    assert "pricing=" not in view_url + click_url
    load(client, doc(**{DOG_SET: ("cpc", 2.0)}))
    fire(client, view_url)
    fire(client, click_url, "clk-00000001")
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(2.0)}


@pytest.mark.parametrize(
    "tamper",
    [
        lambda q: q.replace("pricing=cpc%3A1.25", "pricing=cpc%3A9.25"),
        lambda q: q.replace("pricing=cpc%3A1.25", "pricing=cpa%3A1.25"),
        lambda q: "&".join(p for p in q.split("&") if not p.startswith("pricing=")),
        lambda q: "&".join(p for p in q.split("&") if not p.startswith("scope=")),
    ],
)
def test_an_ai_urls_pricing_is_signed(client, tamper):
    ad = serve_ai(client, DOG, "m-1")
    parts = urlsplit(ad["click_url"])
    assert "pricing=cpc%3A1.25" in parts.query
    r = client.get(f"{parts.path}?{tamper(parts.query)}")
    assert r.status_code == 400
    assert client.portal.call(client.app.state.ctx.store.click_count, None) == 0


def test_one_ai_view_bills_one_price_whichever_serves_urls_are_fired(client):
    # The partner asks again for the same message across a pricing change: two sets of URLs
    # name one view. Its view fired from the CPM serve bills the view; the click fired from
    # the CPC serve, and its conversion from a CPA one, then bill nothing.
    key = issue_key(client, "ai")
    load(client, doc(**{DOG_SET: ("cpm", 5.0)}))
    as_cpm = serve_ai_as(client, key, DOG, "m-1")
    load(client, doc(**{DOG_SET: ("cpc", 1.0)}))
    as_cpc = serve_ai_as(client, key, DOG, "m-1")
    load(client, doc(**{DOG_SET: ("cpa", 20.0)}))
    as_cpa = serve_ai_as(client, key, DOG, "m-1")
    fire(client, as_cpm["view_impression_url"])
    fire(client, as_cpc["click_url"], "clk-00000001")
    assert billed(client, DOG_CAMPAIGN) == {"cpm": pytest.approx(0.005)}
    fire(client, as_cpa["click_url"], "clk-00000002")  # a replay of the view's one click
    assert convert(client, 1) == 0.0
    assert billed(client, DOG_CAMPAIGN) == {"cpm": pytest.approx(0.005)}


def test_an_ai_ad_gone_from_the_live_catalogue_bills_nothing_on_every_process(client):
    # Its campaign is still live, but an AI URL names only the ad's number: whether a
    # process remembers which campaign it was in must not decide whether it bills.
    ad = serve_ai(client, DOG, "m-1")
    raw = doc()
    for campaign in raw["campaigns"]:
        for ad_set in campaign["ad_sets"]:
            for a in ad_set["ads"]:
                if a["id"] == DOG:
                    a["id"] = DOG + "-2"  # the campaign stays, with another ad
    ctx = client.app.state.ctx
    retired = ctx.live_catalogue.retired
    number = ctx.matcher.catalogue.ad_number(DOG)
    load(client, raw)
    retired[number] = (DOG, DOG_CAMPAIGN)  # this process served it: it remembers
    fire(client, ad["view_impression_url"])
    fire(client, ad["click_url"], "clk-00000001")
    assert billed(client, DOG_CAMPAIGN) == {}
    assert (
        counted(client, DOG_CAMPAIGN, "impressions")
        + counted(client, DOG_CAMPAIGN, "viewable_impressions")
        >= 1
    )


def test_one_ai_view_bills_one_price_when_its_click_comes_first(client):
    # The click of the CPC serve, fired before the view of the CPM serve: the click billed
    # the view's one price, so the view bills nothing. A CPM serve's click before its own
    # view leaves the view to bill, as usual.
    key = issue_key(client, "ai")
    load(client, doc(**{DOG_SET: ("cpc", 1.25)}))
    as_cpc = serve_ai_as(client, key, DOG, "m-1")
    load(client, doc(**{DOG_SET: ("cpm", 5.0)}))
    as_cpm = serve_ai_as(client, key, DOG, "m-1")
    fire(client, as_cpc["render_impression_url"])
    fire(client, as_cpc["click_url"], "clk-00000001")
    fire(client, as_cpm["view_impression_url"])
    assert billed(client, DOG_CAMPAIGN) == {"cpc": pytest.approx(1.25)}
    plain = serve_ai_as(client, key, DOG, "m-2")  # CPM throughout
    fire(client, plain["render_impression_url"])
    fire(client, plain["click_url"], "clk-00000002")
    fire(client, plain["view_impression_url"])
    assert billed(client, DOG_CAMPAIGN) == {
        "cpc": pytest.approx(1.25), "cpm": pytest.approx(0.005),
    }  # fmt: skip
