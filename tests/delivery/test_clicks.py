"""Clicks and conversions through HTTP: stored before the 2xx, one billable click per
impression, CPC billed once per valid click, CPA billed on an authenticated conversion."""

import re
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

from edge import ledger
from edge.beacons import ai_beacon_urls, ai_click_url, issue_impression_token
from edge.store import Impression
from matcher.catalogue import SANDBOX_CATALOGUE, parse_catalogue
from tests.conftest import AI_SCOPE, assert_error_shape, issue_key
from tests.delivery.helpers import PUB, at_once, register

CPC_AD, CPC_CAMPAIGN, CPC_BID = "ad-dog-food", "cmp-happy-hound", 1.4  # bundled catalogue
CPA_AD, CPA_CAMPAIGN, CPA_BID = "ad-meal-kit", "cmp-weeknight", 18.0
CONVERSIONS = "/v1/ad-manager/conversions"


def token(client, ad_id=CPC_AD, campaign_id=CPC_CAMPAIGN, surface="url"):
    ctx = client.app.state.ctx
    return issue_impression_token(
        ctx.signer, surface=surface, env=ctx.settings.env, ad_id=ad_id,
        campaign_id=campaign_id, now=ctx.clock(), publisher_id=PUB, slot_id="side",
    )[0]  # fmt: skip


def seen(client, tok, iid, surface="url"):
    body = {"impression_token": tok, "impression_id": iid, "v": "1.0.0"}
    assert client.post(f"/dea/{surface}/impression", json=body).json()["counted"] is True


def click(client, tok, click_id, surface="url", **kw):
    body = {"impression_token": tok, "click_id": click_id, "v": "1.0.0"}
    answer = client.post(f"/dea/{surface}/click", json=body, **kw)
    # An hour later: one client may click at most once a minute and 10 times an hour
    # (invalid-traffic rules); these tests click from one address.
    client.app.state.ctx.clock.advance(3601)
    return answer


def counts(client) -> dict:
    ctx = client.app.state.ctx
    return {(s, i, c): a for s, i, c, a in client.portal.call(ctx.store.counts)}


def charges(client) -> list:
    ctx = client.app.state.ctx

    def rows(conn):
        return conn.execute("SELECT pricing, ad_id, amount_usd FROM charges ORDER BY id").fetchall()

    return [tuple(r) for r in client.portal.call(ctx.store.read, rows)]


@pytest.fixture
def client(make_client):
    client = make_client()
    register(client)
    return client


@pytest.mark.parametrize("surface", ["url", "ugc"])
def test_a_cpc_ad_bills_its_bid_once_per_valid_click(client, surface):
    tok = token(client, surface=surface)
    seen(client, tok, "imp-00000001", surface)
    r = click(client, tok, "clk-00000001", surface)
    assert r.status_code == 200 and r.json() == {"acknowledged": True, "counted": True}
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)]  # durable when the answer came
    c = counts(client)
    assert c[("ad", CPC_AD, "clicks")] == 1 and c[("campaign", CPC_CAMPAIGN, "clicks")] == 1
    assert c[("campaign", CPC_CAMPAIGN, "billable_usd_cpc")] == pytest.approx(CPC_BID)
    assert client.app.state.ctx.spend.current().total[CPC_CAMPAIGN] == pytest.approx(CPC_BID)
    # A second ad's valid click bills again: once per valid click, not once per ad.
    other = token(client, surface=surface)
    seen(client, other, "imp-00000002", surface)
    assert click(client, other, "clk-00000002", surface).json()["counted"] is True
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)] * 2


def test_a_double_click_bills_once(client):
    tok = token(client)
    seen(client, tok, "imp-00000001")
    assert click(client, tok, "clk-00000001").json()["counted"] is True
    # The same click resent (sendBeacon after a failed fetch) counts nothing ...
    assert click(client, tok, "clk-00000001").json()["counted"] is False
    # ... and another click id on the same impression is stored, invalid, never billed.
    assert click(client, tok, "clk-00000002").json()["counted"] is True
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)]
    c = counts(client)
    assert c[("ad", CPC_AD, "clicks")] == 1
    assert c[("ad", CPC_AD, "invalid_clicks_duplicate")] == 1
    ctx = client.app.state.ctx
    assert client.portal.call(ctx.store.click_count, None) == 2


def test_a_click_without_a_stored_impression_is_invalid_and_never_billed(client):
    tok = token(client)
    assert click(client, tok, "clk-00000001").json()["counted"] is True
    assert charges(client) == []
    c = counts(client)
    assert c[("ad", CPC_AD, "invalid_clicks_click_before_impression")] == 1
    assert ("ad", CPC_AD, "clicks") not in c
    # It did not record the impression either: a later viewable beacon is the first one.
    seen(client, tok, "imp-00000001")


def test_a_click_on_an_impression_stored_as_invalid_is_invalid_and_never_billed(client):
    # The tag reported the ad barely in view: the impression is stored, not viewable. A
    # click on it cannot make it valid, nor bill.
    tok = token(client)
    body = {
        "impression_token": tok, "impression_id": "imp-00000001", "v": "1.0.0",
        "visible_ratio": 0.05, "visible_ms": 10,
    }  # fmt: skip
    assert client.post("/dea/url/impression", json=body).json()["counted"] is True
    assert click(client, tok, "clk-00000001").json()["counted"] is True
    assert charges(client) == []
    c = counts(client)
    assert c[("ad", CPC_AD, "invalid_not_viewable")] == 1
    assert c[("ad", CPC_AD, "invalid_clicks_impression_invalid")] == 1
    assert ("ad", CPC_AD, "clicks") not in c


def test_a_text_plain_click_is_taken_as_sendbeacon_sends_it(client):
    tok = token(client)
    seen(client, tok, "imp-00000001")
    body = orjson.dumps({"impression_token": tok, "click_id": "clk-00000001", "v": "1.0.0"})
    r = client.post("/dea/url/click", content=body, headers={"Content-Type": "text/plain"})
    assert r.json()["counted"] is True and charges(client) == [("cpc", CPC_AD, CPC_BID)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"impression_token": "forged.token", "click_id": "clk-00000001", "v": "1"}, None),
        ({"impression_token": "t", "click_id": "short", "v": "1"}, "click_id"),
        ({"impression_token": "t", "click_id": "clk-00000001"}, "v"),
    ],
)
def test_bad_clicks_are_400_and_store_nothing(client, body, field):
    r = client.post("/dea/url/click", json=body)
    err = assert_error_shape(r, 400)
    if field:
        assert err["field"] == field
    ctx = client.app.state.ctx
    assert client.portal.call(ctx.store.click_count, None) == 0


def test_a_token_of_the_other_surface_is_refused(client):
    tok = token(client, surface="ugc")
    assert_error_shape(click(client, tok, "clk-00000001", "url"), 400)


def test_a_cpc_click_past_the_budget_is_stored_but_not_billed(client):
    ctx = client.app.state.ctx
    ctx.spend.add(CPC_CAMPAIGN, 20_000.0, ctx.clock())  # its whole budget
    tok = token(client)
    seen(client, tok, "imp-00000001")
    assert click(client, tok, "clk-00000001").json()["counted"] is True
    assert charges(client) == [] and counts(client)[("ad", CPC_AD, "clicks")] == 1


def test_a_restarted_edge_knows_what_was_spent_before_its_first_match(make_client):
    # The budget was spent before the restart. The new process bills a click (its
    # first request, no match has run) against what the store holds, not against an
    # empty ledger.
    first = make_client()
    ctx = first.app.state.ctx
    spent = Impression(
        dedupe_keys=("tok:spent",), kind="url", env="production", ad_id=CPC_AD,
        campaign_id=CPC_CAMPAIGN, at=ctx.clock(), cpm_usd=20_000.0 * 1000,
    )  # fmt: skip
    assert first.portal.call(ledger.record_impression, ctx.store, spent)
    first.__exit__(None, None, None)
    client = make_client()
    register(client)
    tok = token(client)
    seen(client, tok, "imp-00000001")
    assert click(client, tok, "clk-00000001").json()["counted"] is True
    assert charges(client) == [] and counts(client)[("ad", CPC_AD, "clicks")] == 1


# -- conversions -------------------------------------------------------------------------------


def clicked(client, ad_id, campaign_id, click_id):
    tok = token(client, ad_id, campaign_id)
    seen(client, tok, "imp-" + click_id)
    assert click(client, tok, click_id).json()["counted"] is True


def convert(client, click_id, key, **extra):
    return client.post(
        CONVERSIONS, json={"click_id": click_id, **extra}, headers={"X-API-Key": key}
    )


def test_a_cpa_conversion_bills_its_bid_once(client):
    key = issue_key(client, "ad-manager")
    clicked(client, CPA_AD, CPA_CAMPAIGN, "clk-00000001")
    assert charges(client) == []  # a CPA click bills nothing
    r = convert(client, "clk-00000001", key, value_usd=42.5)
    assert r.status_code == 200
    assert r.json() == {"acknowledged": True, "counted": True, "billed_usd": CPA_BID}
    assert charges(client) == [("cpa", CPA_AD, CPA_BID)]
    again = convert(client, "clk-00000001", key)
    assert again.json() == {"acknowledged": True, "counted": False, "billed_usd": 0.0}
    c = counts(client)
    assert c[("ad", CPA_AD, "conversions")] == 1
    assert c[("campaign", CPA_CAMPAIGN, "billable_usd_cpa")] == pytest.approx(CPA_BID)


def test_a_conversion_after_the_attribution_window_is_refused(client):
    # 30 days by default: a conversion reported later is not this click's to bill.
    key = issue_key(client, "ad-manager")
    clicked(client, CPA_AD, CPA_CAMPAIGN, "clk-00000001")
    clicked(client, CPA_AD, CPA_CAMPAIGN, "clk-00000002")
    clock = client.app.state.ctx.clock
    clock.advance(30 * 86_400 - 2 * 3601 - 60)  # the first click is 30 days old less a minute
    first = convert(client, "clk-00000001", key)
    assert first.json()["counted"] is True
    clock.advance(3601 + 120)  # the second click is 30 days and a minute old
    r = convert(client, "clk-00000002", key)
    err = assert_error_shape(r, 422, "conversion_window_closed")
    assert err["field"] == "click_id"
    assert charges(client) == [("cpa", CPA_AD, CPA_BID)]
    assert counts(client)[("ad", CPA_AD, "conversions")] == 1


def test_conversions_one_after_another_never_bill_past_the_budget(client):
    # $8,000 budget with $20 left and an $18 bid: the first conversion bills $18, the
    # second the $2 left, the third nothing; the campaign's spend is its budget exactly.
    key = issue_key(client, "ad-manager")
    ctx = client.app.state.ctx
    ctx.spend.add(CPA_CAMPAIGN, 7_980.0, ctx.clock())
    billed = []
    for n in range(3):
        clicked(client, CPA_AD, CPA_CAMPAIGN, f"clk-0000000{n}")
        billed.append(convert(client, f"clk-0000000{n}", key).json()["billed_usd"])
    assert billed == [CPA_BID, pytest.approx(2.0), 0.0]
    assert ctx.spend.current().total[CPA_CAMPAIGN] == pytest.approx(8_000.0)
    assert counts(client)[("campaign", CPA_CAMPAIGN, "conversions")] == 3


def test_the_last_click_before_the_budget_bills_what_is_left(client):
    ctx = client.app.state.ctx
    ctx.spend.add(CPC_CAMPAIGN, 20_000.0 - 0.5, ctx.clock())  # $0.50 left, a $1.40 bid
    for n in range(2):
        tok = token(client)
        seen(client, tok, f"imp-0000000{n}")
        assert click(client, tok, f"clk-0000000{n}").json()["counted"] is True
    assert charges(client) == [("cpc", CPC_AD, pytest.approx(0.5))]
    assert counts(client)[("ad", CPC_AD, "clicks")] == 2


def test_conversions_at_once_never_bill_past_the_budget(client):
    # $40 left of the $8,000 budget, an $18 bid, ten conversions reported at once (one
    # Ad Manager key's burst): $18, $18 and the $4 left, then nothing. Each decision sees
    # the charges still being written beside it, not only the committed ones.
    key = issue_key(client, "ad-manager")
    ctx = client.app.state.ctx
    ids = [f"clk-{n:08d}" for n in range(10)]
    for click_id in ids:
        clicked(client, CPA_AD, CPA_CAMPAIGN, click_id)
    ctx.spend.add(CPA_CAMPAIGN, 7_960.0, ctx.clock())
    headers = {"X-API-Key": key}
    reports = [("POST", CONVERSIONS, {"headers": headers, "json": {"click_id": c}}) for c in ids]
    answers = at_once(client, reports)
    assert [r.status_code for r in answers] == [200] * 10
    billed = sorted(r.json()["billed_usd"] for r in answers)
    assert billed == [0.0] * 7 + [pytest.approx(4.0), CPA_BID, CPA_BID]
    assert sum(amount for _p, _ad, amount in charges(client)) == pytest.approx(40.0)
    assert ctx.spend.current().total[CPA_CAMPAIGN] == pytest.approx(8_000.0)
    assert counts(client)[("campaign", CPA_CAMPAIGN, "conversions")] == 10


def test_copies_of_conversions_at_once_take_no_budget_from_the_genuine_ones(client):
    # $40 left, an $18 bid, three clicks each reported three times at once (an advertiser
    # retrying): the three conversions bill $18, $18 and the $4 left. Copies that will
    # count nothing must not hold budget the genuine reports then cannot bill.
    key = issue_key(client, "ad-manager")
    ctx = client.app.state.ctx
    ids = [f"clk-{n:08d}" for n in range(3)]
    for click_id in ids:
        clicked(client, CPA_AD, CPA_CAMPAIGN, click_id)
    ctx.spend.add(CPA_CAMPAIGN, 7_960.0, ctx.clock())
    headers = {"X-API-Key": key}
    reports = [
        ("POST", CONVERSIONS, {"headers": headers, "json": {"click_id": c}})
        for c in ids
        for _copy in range(3)
    ]
    answers = at_once(client, reports)
    assert [r.status_code for r in answers] == [200] * 9  # within the key's 10 a second
    assert sum(r.json()["counted"] for r in answers) == 3
    billed = sorted(r.json()["billed_usd"] for r in answers)
    assert billed == [0.0] * 6 + [pytest.approx(4.0), CPA_BID, CPA_BID]
    assert ctx.spend.current().total[CPA_CAMPAIGN] == pytest.approx(8_000.0)
    # A report after they committed is a replay, as before.
    assert convert(client, ids[0], key).json()["counted"] is False


def test_clicks_and_conversions_of_a_campaign_gone_from_the_live_catalogue_bill_nothing(client):
    # The tokens name a campaign the live catalogue no longer has (their ads are filed
    # under other campaigns now): no budget to check them against, so the click and the
    # conversion are counted, never billed.
    key = issue_key(client, "ad-manager")
    clicked(client, CPC_AD, "cmp-gone", "clk-00000001")
    clicked(client, CPA_AD, "cmp-gone", "clk-00000002")
    assert convert(client, "clk-00000002", key).json() == {
        "acknowledged": True, "counted": True, "billed_usd": 0.0,
    }  # fmt: skip
    assert charges(client) == []
    c = counts(client)
    assert c[("campaign", "cmp-gone", "clicks")] == 2
    assert c[("campaign", "cmp-gone", "conversions")] == 1


def test_a_conversion_of_a_cpc_click_counts_but_bills_nothing_more(client):
    key = issue_key(client, "ad-manager")
    clicked(client, CPC_AD, CPC_CAMPAIGN, "clk-00000001")
    assert convert(client, "clk-00000001", key).json()["billed_usd"] == 0.0
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)]


@pytest.mark.parametrize("click_id", ["clk-forged-0001", "never-stored-click-id"])
def test_a_conversion_with_a_forged_or_unknown_click_id_is_refused(client, click_id):
    key = issue_key(client, "ad-manager")
    clicked(client, CPA_AD, CPA_CAMPAIGN, "clk-00000001")
    err = assert_error_shape(convert(client, click_id, key), 404)
    assert err["code"] == "unknown_click"
    assert charges(client) == []


def test_a_click_id_not_in_its_form_is_a_400_that_states_the_rule(client):
    key = issue_key(client, "ad-manager")
    err = assert_error_shape(convert(client, "short", key), 400)
    assert err["field"] == "click_id"
    assert err["message"] == "click_id must match ^[A-Za-z0-9_\\-]{8,64}$"


def test_a_conversion_of_an_invalid_click_is_refused(client):
    key = issue_key(client, "ad-manager")
    click(client, token(client, CPA_AD, CPA_CAMPAIGN), "clk-00000001")  # no impression
    err = assert_error_shape(convert(client, "clk-00000001", key), 422)
    assert err["code"] == "invalid_click"
    assert charges(client) == []


def test_a_conversion_needs_an_ad_manager_key(client):
    clicked(client, CPA_AD, CPA_CAMPAIGN, "clk-00000001")
    assert_error_shape(convert(client, "clk-00000001", issue_key(client, "ugc")), 401)
    assert_error_shape(client.post(CONVERSIONS, json={"click_id": "clk-00000001"}), 401)
    assert charges(client) == []


def test_conversions_do_not_exist_on_the_sandbox(make_client):
    client = make_client(env="sandbox")
    key = issue_key(client, "ad-manager")
    err = assert_error_shape(convert(client, "clk-00000001", key), 404)
    assert "production only" in err["message"]
    for path in ("/v1/ai/process", "/dea/ai/click"):
        assert "production only" in client.get(path).json()["error"]["message"]
    assert client.get("/v1/nothing").json()["error"]["message"] == "no route for /v1/nothing"


# -- the AI product's signed click URL -----------------------------------------------------------


def ai_urls(client, message_id="m-1", conversation_id="c-1", ad_id=CPC_AD, scope=AI_SCOPE):
    ctx = client.app.state.ctx
    number = ctx.matcher.catalogue.ad_number(ad_id)
    base, conv = ctx.settings.base_url, conversation_id
    _, view = ai_beacon_urls(ctx.signer, base, number, message_id, conv, scope=scope)
    clk = ai_click_url(ctx.signer, base, number, message_id, conv, scope=scope)
    return urlsplit(view), urlsplit(clk)


def test_ai_click_after_its_view_bills_once(client):
    view, clk = ai_urls(client)
    assert client.get(f"{view.path}?{view.query}").status_code == 204
    for _ in range(3):  # refired by the partner: one click
        assert client.get(f"{clk.path}?{clk.query}").status_code == 204
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)]
    # A partner-named click id is the id a conversion reports.
    _, clk2 = ai_urls(client, "m-2")
    assert client.get(f"{clk2.path}?{clk2.query}&click_id=partner-click-1").status_code == 204
    c = counts(client)
    assert c[("ad", CPC_AD, "clicks")] == 1
    assert (
        c[("ad", CPC_AD, "invalid_clicks_click_before_impression")] == 1
    )  # m-2 was never rendered


def test_an_ai_click_after_a_bots_view_is_invalid_unless_a_valid_render_was_stored(client):
    view, clk = ai_urls(client)
    bot = {"User-Agent": "Googlebot/2.1 (+http://www.google.com/bot.html)"}
    assert client.get(f"{view.path}?{view.query}", headers=bot).status_code == 204
    assert client.get(f"{clk.path}?{clk.query}").status_code == 204
    assert charges(client) == []
    assert counts(client)[("ad", CPC_AD, "invalid_clicks_impression_invalid")] == 1
    # Another message: its render by a bot, its view by the user's browser. One valid
    # impression is enough for its click.
    ctx = client.app.state.ctx
    number = ctx.matcher.catalogue.ad_number(CPC_AD)
    render, view2 = (
        urlsplit(u)
        for u in ai_beacon_urls(
            ctx.signer, ctx.settings.base_url, number, "m-2", "c-1", scope=AI_SCOPE
        )
    )
    _, clk2 = ai_urls(client, "m-2")
    assert client.get(f"{render.path}?{render.query}", headers=bot).status_code == 204
    assert client.get(f"{view2.path}?{view2.query}").status_code == 204
    assert client.get(f"{clk2.path}?{clk2.query}").status_code == 204
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)]


def test_ai_beacons_of_an_ad_gone_from_the_live_catalogue_count_under_it_and_bill_nothing(
    client,
):
    # An AI URL names its ad by number only. Fired after the operator removed the ad's
    # campaign, its view and click still count under that ad and campaign (the numbers
    # of the catalogue the edge served before), billing nothing.
    ctx = client.app.state.ctx
    view, clk = ai_urls(client)
    raw = orjson.loads(resources.files("matcher.data").joinpath(SANDBOX_CATALOGUE).read_bytes())
    raw["campaigns"] = [c for c in raw["campaigns"] if c["id"] != CPC_CAMPAIGN]
    assert client.portal.call(ctx.live_catalogue.swap, ctx, parse_catalogue(orjson.dumps(raw)), 1)
    assert ctx.matcher.catalogue.placement(CPC_AD) is None
    assert client.get(f"{view.path}?{view.query}").status_code == 204
    assert client.get(f"{clk.path}?{clk.query}").status_code == 204
    c = counts(client)
    assert c[("ad", CPC_AD, "viewable_impressions")] == 1 and c[("ad", CPC_AD, "clicks")] == 1
    assert c[("campaign", CPC_CAMPAIGN, "clicks")] == 1
    assert charges(client) == [] and not [k for k in c if k[1].startswith("ai-")]


def test_ai_clicks_a_partner_server_fires_for_many_users_are_all_valid(client):
    """One address fires the click URLs of four messages within a minute (a partner's
    server): no per-client click rate applies; one click per ad and message is the cap."""
    for n in range(4):
        view, clk = ai_urls(client, f"m-{n}")
        assert client.get(f"{view.path}?{view.query}").status_code == 204
        assert client.get(f"{clk.path}?{clk.query}").status_code == 204
    c = counts(client)
    assert c[("ad", CPC_AD, "clicks")] == 4
    assert not [k for k in c if k[2].startswith("invalid_clicks")]
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)] * 4


def test_ai_clicks_on_one_message_id_in_two_conversations_bill_each(client):
    """ "m-1" of two conversations is two messages: each click is its own, valid after its
    own conversation's view only; a refired click URL is still one click."""
    for conv in ("c-1", "c-2"):
        view, clk = ai_urls(client, "m-1", conv)
        assert client.get(f"{view.path}?{view.query}").status_code == 204
        for _ in range(2):
            assert client.get(f"{clk.path}?{clk.query}").status_code == 204
    _, unseen = ai_urls(client, "m-1", "c-3")  # no view in this conversation
    assert client.get(f"{unseen.path}?{unseen.query}").status_code == 204
    c = counts(client)
    assert c[("ad", CPC_AD, "clicks")] == 2
    assert c[("ad", CPC_AD, "invalid_clicks_click_before_impression")] == 1
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)] * 2


def test_clicks_at_once_never_bill_past_the_budget(client):
    """Six AI clicks fired at once (a partner's server, no per-client rate) on a CPC
    campaign with $3 left and a $1.40 bid: $1.40, $1.40 and the $0.20 left, never more."""
    ctx = client.app.state.ctx
    clicks = []
    for n in range(6):
        view, clk = ai_urls(client, f"m-{n}")
        assert client.get(f"{view.path}?{view.query}").status_code == 204
        clicks.append(("GET", f"{clk.path}?{clk.query}", {}))
    ctx.spend.add(CPC_CAMPAIGN, 20_000.0 - 3.0, ctx.clock())
    assert [r.status_code for r in at_once(client, clicks)] == [204] * 6
    billed = sorted(amount for _p, _ad, amount in charges(client))
    assert billed == [pytest.approx(0.2), CPC_BID, CPC_BID]
    assert ctx.spend.current().total[CPC_CAMPAIGN] == pytest.approx(20_000.0)
    assert counts(client)[("ad", CPC_AD, "clicks")] == 6


@pytest.mark.parametrize(
    "tamper",
    [
        lambda q: q.replace("message_id=m-1", "message_id=m-2"),
        lambda q: q.split("&sig=")[0],
        lambda q: q + "&click_id=bad id",
    ],
)
def test_tampered_ai_clicks_are_400_and_store_nothing(client, tamper):
    _, clk = ai_urls(client)
    assert_error_shape(client.get(f"{clk.path}?{tamper(clk.query)}"), 400)
    ctx = client.app.state.ctx
    assert client.portal.call(ctx.store.click_count, None) == 0


def test_ai_process_answers_carry_a_signed_click_url(make_client):
    from matcher.catalogue import load_catalogue
    from tests.routes.conftest import CATALOGUE, Script

    client = make_client(matcher=Script(load_catalogue(CATALOGUE)))
    key = issue_key(client, "ai")
    r = client.post(
        "/v1/ai/process",
        json={"message_id": "m-1", "content": "kibble for a picky pup"},
        headers={"X-API-Key": key},
    )
    assert r.status_code == 200, r.text
    assert r.json()["ads"]
    for ad in r.json()["ads"]:
        url = urlsplit(ad["click_url"])
        assert url.path == "/dea/ai/click" and "sig=" in url.query


def test_invalid_traffic_rules_judge_clicks_too(client):
    # Two valid-looking clicks of two impressions from one address within a minute: the
    # second is over the per-client click rate, stored invalid, never billed.
    first, second = token(client), token(client)
    seen(client, first, "imp-00000001")
    seen(client, second, "imp-00000002")
    body = {"impression_token": first, "click_id": "clk-00000001", "v": "1.0.0"}
    assert client.post("/dea/url/click", json=body).json()["counted"] is True
    body = {"impression_token": second, "click_id": "clk-00000002", "v": "1.0.0"}
    assert client.post("/dea/url/click", json=body).json()["counted"] is True
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)]
    assert counts(client)[("ad", CPC_AD, "invalid_clicks_rate_limited")] == 1
    # A crawler's click is invalid whatever else holds.
    bot = token(client)
    seen(client, bot, "imp-00000003")
    client.app.state.ctx.clock.advance(86_400 - 10)
    body = {"impression_token": bot, "click_id": "clk-00000003", "v": "1.0.0"}
    headers = {"User-Agent": "Googlebot/2.1 (+http://www.google.com/bot.html)"}
    assert client.post("/dea/url/click", json=body, headers=headers).json()["counted"] is True
    assert counts(client)[("ad", CPC_AD, "invalid_clicks_bot_user_agent")] == 1


# -- a click id belongs to its impression ------------------------------------------------------


def fire(client, url, click_id=None):
    extra = "" if click_id is None else f"&click_id={click_id}"
    assert client.get(f"{url.path}?{url.query}{extra}").status_code == 204


def test_an_ai_click_id_another_signed_url_used_first_does_not_swallow_the_click(client):
    """The click id is the partner's and unsigned: one signed click URL fired with ids
    another partner will use must not turn that partner's genuine clicks into replays
    (nothing stored, counted or billed). A click id collides only within its own ad,
    message and conversation, and a conversion quoting it finds the genuine click."""
    key = issue_key(client, "ad-manager")
    view, squatter = ai_urls(client, "m-1", "c-squatter")
    fire(client, view)
    for n in range(5):  # one signed URL, five ids of someone else's
        fire(client, squatter, f"victim-000{n}")
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)]  # its own first click only
    view, genuine = ai_urls(client, "m-7", "c-victim", ad_id=CPA_AD)
    fire(client, view)
    fire(client, genuine, "victim-0003")
    c = counts(client)
    assert c[("ad", CPA_AD, "clicks")] == 1  # stored, counted
    fire(client, genuine, "victim-0003")  # the same click again: a replay
    assert counts(client) == c
    r = convert(client, "victim-0003", key)
    assert r.json() == {"acknowledged": True, "counted": True, "billed_usd": CPA_BID}
    assert charges(client) == [("cpc", CPC_AD, CPC_BID), ("cpa", CPA_AD, CPA_BID)]
    assert counts(client)[("ad", CPA_AD, "conversions")] == 1


def test_a_tag_click_id_belongs_to_its_token(client):
    # The same click id with the same token is a replay; with another token (another
    # rendering) it is that rendering's own click, judged on its own.
    first, second = token(client), token(client)
    seen(client, first, "imp-00000001")
    seen(client, second, "imp-00000002")
    assert click(client, first, "clk-00000001").json()["counted"] is True
    assert click(client, first, "clk-00000001").json()["counted"] is False
    assert click(client, second, "clk-00000001").json()["counted"] is True
    assert counts(client)[("ad", CPC_AD, "clicks")] == 2
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)] * 2


def test_a_conversion_of_a_click_id_two_valid_clicks_share_is_refused(client):
    """Two valid clicks of different messages under one partner id: a conversion quoting
    it cannot tell which ad converted, so it bills neither (one invalid click beside a
    valid one is no doubt: the valid one converts, as above)."""
    key = issue_key(client, "ad-manager")
    for message, ad in (("m-1", CPA_AD), ("m-2", CPA_AD)):
        view, clk = ai_urls(client, message, "c-1", ad_id=ad)
        fire(client, view)
        fire(client, clk, "shared-click-1")
    assert counts(client)[("ad", CPA_AD, "clicks")] == 2
    err = assert_error_shape(convert(client, "shared-click-1", key), 422)
    assert err["code"] == "ambiguous_click" and err["field"] == "click_id"
    assert charges(client) == []
    assert ("ad", CPA_AD, "conversions") not in counts(client)


def test_ai_urls_issued_before_partner_scopes_still_count_once(client):
    """A partner holds URLs from before the beacon URLs named it (no scope): they are still
    taken, and fired before the deploy and again after it they count once, under the keys
    and derived click id they always had, which a conversion still finds."""
    import hashlib

    key = issue_key(client, "ad-manager")
    view, clk = ai_urls(client, "m-1", "c-1", ad_id=CPA_AD, scope=None)
    assert "scope=" not in view.query and "scope=" not in clk.query
    for _ in range(2):
        fire(client, view)
        fire(client, clk)
    c = counts(client)
    assert (c[("ad", CPA_AD, "viewable_impressions")], c[("ad", CPA_AD, "clicks")]) == (1, 1)
    ctx = client.app.state.ctx
    number = ctx.matcher.catalogue.ad_number(CPA_AD)
    stored = client.portal.call(ctx.store.stored_impression, f"ai-c:view:{number}:3:c-1:m-1")
    assert stored is not None and stored.invalid_reason is None

    def rows(conn):
        return conn.execute("SELECT click_id, impression_key FROM clicks").fetchall()

    # The click id the earlier release derived: its formula, written out.
    earlier = "ai-" + hashlib.sha256(f"{number}\nm-1\nc-1".encode()).hexdigest()[:32]
    assert [tuple(r) for r in client.portal.call(ctx.store.read, rows)] == [
        (earlier, f"ai-c:{number}:3:c-1:m-1")
    ]
    r = convert(client, earlier, key)
    assert r.json() == {"acknowledged": True, "counted": True, "billed_usd": CPA_BID}


# -- the advertiser's {click_id} macro in an AI ad ---------------------------------------------


def test_an_ai_ads_click_id_macro_is_the_id_its_click_url_stores(make_client, tmp_path):
    """An advertiser that put `{click_id}` in its click_through_url gets, on the landing
    page, the click id the edge stores when the partner fires click_url as given, so its
    conversion report of that id converts. An ad without the macro keeps its URL as given."""
    import json
    from urllib.parse import parse_qs

    from matcher.catalogue import load_catalogue
    from tests.routes.conftest import Script

    bundled = Path(__file__).parents[2] / "matcher" / "data" / "sandbox_catalogue.json"
    doc = json.loads(bundled.read_text())
    for campaign in doc["campaigns"]:
        for ad_set in campaign["ad_sets"]:
            for ad in ad_set["ads"]:
                if ad["id"] == CPA_AD:
                    ad["click_through_url"] = "https://crate.example/o?c={click_id}&r={click_id}"
    (tmp_path / "catalogue.json").write_text(json.dumps(doc))
    script = Script(load_catalogue(tmp_path / "catalogue.json"), ad_ids=(CPA_AD, CPC_AD))
    client = make_client(matcher=script)
    ai_key, am_key = issue_key(client, "ai"), issue_key(client, "ad-manager")
    turn = {"message_id": "1", "conversation_id": "7", "content": "dinner kits for the week"}
    r = client.post("/v1/ai/process", json=turn, headers={"X-API-Key": ai_key})
    assert r.status_code == 200, r.text
    meal, dog = r.json()["ads"]
    assert "{click_id}" not in meal["click_through_url"]
    landing = parse_qs(urlsplit(meal["click_through_url"]).query)
    (click_id,) = landing["c"]
    assert landing["r"] == [click_id] and re.fullmatch(r"ai-[0-9a-f]{32}", click_id)
    assert dog["click_through_url"] == "https://happyhound.example/fresh?utm_source=edge"
    fire(client, urlsplit(meal["view_impression_url"]))
    fire(client, urlsplit(meal["click_url"]))  # as given: no &click_id=

    def rows(conn):
        return conn.execute("SELECT click_id, invalid_reason FROM clicks").fetchall()

    ctx = client.app.state.ctx
    assert [tuple(r) for r in client.portal.call(ctx.store.read, rows)] == [(click_id, None)]
    r = convert(client, click_id, am_key)
    assert r.json() == {"acknowledged": True, "counted": True, "billed_usd": CPA_BID}
    # The id belongs to this ad in this message, conversation and partner only.
    again = client.post(
        "/v1/ai/process", json={**turn, "message_id": "2"}, headers={"X-API-Key": ai_key}
    ).json()["ads"][0]
    other = client.post(
        "/v1/ai/process", json=turn, headers={"X-API-Key": issue_key(client, "ai")}
    ).json()["ads"][0]
    assert click_id not in again["click_through_url"]
    assert click_id not in other["click_through_url"]


# -- a replay spends nothing -------------------------------------------------------------------


def post_click(client, tok, click_id):
    body = {"impression_token": tok, "click_id": click_id, "v": "1.0.0"}
    return client.post("/dea/url/click", json=body).json()["counted"]


@pytest.mark.parametrize("recent", ["remembered", "forgotten"])
def test_a_replayed_click_spends_none_of_the_readers_click_allowance(client, monkeypatch, recent):
    # Three genuine clicks in ten minutes are within the rates (more than 1 a minute or 3
    # per 10 minutes is invalid); a resent click counts nothing, so it must not spend the
    # allowance either, or the reader's third genuine click would be rate_limited. The
    # store knows the replay even where the classifier's memory of recent verdicts has
    # moved on (a busy edge, another node, a restart).
    if recent == "forgotten":
        monkeypatch.setattr("edge.ivt._RECENT_EVENTS", 0)
    clock = client.app.state.ctx.clock
    toks = [token(client) for _ in range(3)]
    for n, tok in enumerate(toks):
        seen(client, tok, f"imp-0000000{n}")
    assert post_click(client, toks[0], "clk-00000000") is True
    clock.advance(70)
    assert post_click(client, toks[0], "clk-00000000") is False  # the same click resent
    clock.advance(70)
    assert post_click(client, toks[1], "clk-00000001") is True
    clock.advance(70)
    assert post_click(client, toks[2], "clk-00000002") is True
    c = counts(client)
    assert c[("ad", CPC_AD, "clicks")] == 3
    assert ("ad", CPC_AD, "invalid_clicks_rate_limited") not in c
    assert charges(client) == [("cpc", CPC_AD, CPC_BID)] * 3


def test_two_copies_of_one_click_at_once_count_once_and_spend_the_allowance_once(client):
    clock = client.app.state.ctx.clock
    toks = [token(client) for _ in range(3)]
    for n, tok in enumerate(toks):
        seen(client, tok, f"imp-0000000{n}")
    body = {"impression_token": toks[0], "click_id": "clk-00000000", "v": "1.0.0"}
    answers = at_once(client, [("POST", "/dea/url/click", {"json": body})] * 2)
    assert sorted(a.json()["counted"] for a in answers) == [False, True]
    clock.advance(70)
    assert post_click(client, toks[1], "clk-00000001") is True
    clock.advance(70)
    assert post_click(client, toks[2], "clk-00000002") is True
    c = counts(client)
    assert c[("ad", CPC_AD, "clicks")] == 3
    assert ("ad", CPC_AD, "invalid_clicks_rate_limited") not in c
    assert client.portal.call(client.app.state.ctx.store.click_count, None) == 3
