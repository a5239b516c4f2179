"""Billing-grade beacons through HTTP: impressions, the pixel, AI beacons, hovers, failures.

Replays count once (same token or same impression id), forgeries count nothing, and every
answer that says ``counted`` is already in the store.
"""

from dataclasses import replace
from urllib.parse import urlsplit

import orjson
import pytest

from edge.beacons import ai_beacon_urls, issue_impression_token
from edge.delivery import schemas
from edge.delivery.validate import validate
from edge.signing import Signer
from edge.store import StoreUnavailable
from matcher.catalogue import Catalogue
from tests.conftest import AI_SCOPE, assert_error_shape, other_tail
from tests.delivery.helpers import ORIGIN, PUB, at_once, placement, register
from tests.routes.conftest import Script

PAGE = "https://news.example/a/1"


def token(client, surface="url", **kw):
    ctx = client.app.state.ctx
    args = dict(surface=surface, env=ctx.settings.env, ad_id="ad-1", campaign_id="cmp-1",
                now=ctx.clock(), cpm_usd=4.0, publisher_id=PUB, slot_id="side")  # fmt: skip
    args.update(kw)
    return issue_impression_token(ctx.signer, **args)[0]


def imp_body(tok, iid="imp-00000001", **kw):
    return {"impression_token": tok, "impression_id": iid, "v": "1.0.0", **kw}


def stored(client, kind=None) -> int:
    ctx = client.app.state.ctx
    return client.portal.call(ctx.store.impression_count, kind)


def spend(client) -> dict:
    ctx = client.app.state.ctx
    return client.portal.call(ctx.store.spend_by_campaign)


def counts(client) -> dict:
    ctx = client.app.state.ctx
    return {(s, i, c): a for s, i, c, a in client.portal.call(ctx.store.counts)}


@pytest.fixture
def client(make_client, shared_matcher):
    # The live catalogue: the bundled one and "cmp-1", the campaign the tokens here name
    # (an impression of a campaign not in the live catalogue bills nothing).
    cmp_1 = replace(placement("ad-1").campaign, id="cmp-1")
    c = make_client(matcher=Script(Catalogue([*shared_matcher.catalogue.campaigns, cmp_1])))
    register(c)  # tokens name publisher PUB; an unregistered one's are invalid
    c.headers["Origin"] = ORIGIN  # failure reports need the publisher's registered origin
    return c


@pytest.mark.parametrize(("path", "surface"), [("/dea/url/impression", "url"),
                                                ("/dea/ugc/impression", "ugc")])  # fmt: skip
def test_impression_counts_once_per_token_and_per_impression_id(client, path, surface):
    tok = token(client, surface)
    r = client.post(path, json=imp_body(tok, visible_ratio=0.62, visible_ms=1000))
    assert r.status_code == 200 and r.json() == {"acknowledged": True, "counted": True}
    validate(r.json(), schemas.IMPRESSION_RESPONSE)
    assert stored(client, surface) == 1  # already durable when the answer came
    again = client.post(path, json=imp_body(tok, iid="imp-00000002"))  # same token
    assert again.json() == {"acknowledged": True, "counted": False}
    other = client.post(path, json=imp_body(token(client, surface)))  # same impression id
    assert other.json() == {"acknowledged": True, "counted": False}
    assert stored(client) == 1
    assert spend(client) == pytest.approx({"cmp-1": 0.004})
    c = counts(client)
    assert c[("ad", "ad-1", "impressions")] == 1 and c[("publisher", PUB, "billable_usd")] > 0


def test_sandbox_impressions_are_never_billed(make_client):
    client = make_client(env="sandbox")
    r = client.post("/dea/url/impression", json=imp_body(token(client, cpm_usd=None)))
    assert r.json()["counted"] is True and spend(client) == {}


def test_text_plain_beacon_as_sendbeacon_sends_it(client):
    body = orjson.dumps(imp_body(token(client)))
    r = client.post(
        "/dea/url/impression", content=body, headers={"Content-Type": "text/plain;charset=UTF-8"}
    )
    assert r.json()["counted"] is True
    assert r.headers["cache-control"] == "no-store"


def _forged(client):
    tok = token(client)
    body, sig = tok.split(".")
    return {
        "other key": issue_impression_token(
            Signer(b"z" * 32),
            surface="url",
            env="production",
            ad_id="ad-1",
            campaign_id="cmp-1",
            now=client.app.state.ctx.clock(),
        )[0],
        "bad signature": f"{body}.{other_tail(sig)}",
        "edited payload": f"{other_tail(body)}.{sig}",
        "other surface": token(client, "ugc"),
        "other env": token(client, env="sandbox"),
        "expired": token(client, now=client.app.state.ctx.clock() - 2 * 86400),
        "not a token": "hello",
    }


@pytest.mark.parametrize(
    "case",
    ["other key", "bad signature", "edited payload", "other surface", "other env", "expired",
     "not a token"],
)  # fmt: skip
def test_forged_or_misdirected_tokens_count_nothing(client, case):
    bad = _forged(client)[case]
    err = assert_error_shape(client.post("/dea/url/impression", json=imp_body(bad)), 400)
    assert err["code"] == "invalid_token" and err["field"] == "impression_token"
    assert stored(client) == 0 and spend(client) == {}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"impression_id": "imp-00000001", "v": "1"}, "impression_token"),
        ({"impression_token": "x", "v": "1"}, "impression_id"),
        ({"impression_token": "x", "impression_id": "short", "v": "1"}, "impression_id"),
        ({"impression_token": "x", "impression_id": "imp-00000001", "v": "1", "x": 1}, "x"),
        ({"impression_token": "x", "impression_id": "imp-00000001", "v": "1",
          "visible_ratio": 1.5}, "visible_ratio"),
    ],
)  # fmt: skip
def test_impression_body_validation(client, body, field):
    err = assert_error_shape(client.post("/dea/url/impression", json=body), 400)
    assert err["field"] == field


def test_pixel_get_counts_once_and_answers_204(client):
    tok = token(client, "ugc", publisher_id=None, slot_id=None, post_id="p-42")
    r = client.get("/dea/ugc/impression", params={"t": tok})
    assert r.status_code == 204 and r.content == b""
    assert r.headers["cache-control"] == "no-store"
    assert client.get("/dea/ugc/impression", params={"t": tok}).status_code == 204
    assert stored(client, "ugc") == 1


def test_pixel_get_refuses_bad_queries(client):
    assert_error_shape(client.get("/dea/ugc/impression"), 400)
    assert_error_shape(client.get("/dea/ugc/impression", params={"t": token(client, "url")}), 400)
    tok = token(client, "ugc")
    r = client.get(f"/dea/ugc/impression?t={tok}&t={tok}")
    assert assert_error_shape(r, 400)["field"] == "t"
    r = client.get("/dea/ugc/impression", params={"t": tok, "cb": "1"})
    assert assert_error_shape(r, 400)["field"] == "cb"
    assert stored(client) == 0


def test_the_pixel_refuses_a_token_the_tag_was_given(client):
    # A tag token is bound to its browser and judged by the tag beacon's rules (the client's
    # rate among them): the pixel, made for partners' unbound tokens, must not take it.
    ctx = client.app.state.ctx
    tag = issue_impression_token(
        ctx.signer, surface="ugc", env=ctx.settings.env, ad_id="ad-1", campaign_id="cmp-1",
        now=ctx.clock(), cpm_usd=4.0, publisher_id=PUB, slot_id="side", post_id="p-42",
        client="binding-of-one-browser",
    )[0]  # fmt: skip
    err = assert_error_shape(client.get("/dea/ugc/impression", params={"t": tag}), 400)
    assert err["field"] == "t" and "POST /dea/ugc/impression" in err["message"]
    assert stored(client) == 0


def _ai_urls(client, message_id="m-1", conversation_id="c-9", scope=AI_SCOPE):
    ctx = client.app.state.ctx
    catalogue = ctx.matcher.catalogue
    placement = next(
        catalogue.placement(ad.id)
        for s in catalogue.ad_sets()
        if "ai" in s.products
        for ad in s.ads
    )
    number = catalogue.ad_number(placement.ad.id)
    render, view = ai_beacon_urls(
        ctx.signer, ctx.settings.base_url, number, message_id, conversation_id, scope=scope
    )
    return placement, urlsplit(render), urlsplit(view)


def test_ai_beacons_count_once_per_ad_message_and_kind(client):
    placement, render, view = _ai_urls(client)
    for _ in range(3):
        assert client.get(f"{render.path}?{render.query}").status_code == 204
    assert client.get(f"{view.path}?{view.query}").status_code == 204
    assert client.get(f"{view.path}?{view.query}").status_code == 204
    assert stored(client, "ai-render") == 1 and stored(client, "ai-view") == 1
    c = counts(client)
    ad_id = placement.ad.id
    assert c[("ad", ad_id, "impressions")] == 1 and c[("ad", ad_id, "viewable_impressions")] == 1
    _, render2, _ = _ai_urls(client, message_id="m-2")
    assert client.get(f"{render2.path}?{render2.query}").status_code == 204
    assert stored(client, "ai-render") == 2
    pricing = placement.ad_set.pricing_model
    expected = {placement.campaign.id: pricing.bid_amount / 1000} if pricing.type == "cpm" else {}
    assert spend(client) == pytest.approx(expected)  # billed on the view, once


def test_one_message_id_in_two_conversations_counts_in_each(client):
    """Partners number messages per conversation: "m-1" of two conversations (or two
    partners) is two messages, and a replay within one conversation is still one."""
    placement, render, view = _ai_urls(client, "m-1", "c-1")
    _, render2, view2 = _ai_urls(client, "m-1", "c-2")
    _, lone_render, _ = _ai_urls(client, "m-1", None)  # no conversation: the message alone
    for url in (render, view, render2, view2, render, view, lone_render, lone_render):
        assert client.get(f"{url.path}?{url.query}").status_code == 204
    assert stored(client, "ai-render") == 3 and stored(client, "ai-view") == 2
    c = counts(client)
    ad_id = placement.ad.id
    assert c[("ad", ad_id, "impressions")] == 3 and c[("ad", ad_id, "viewable_impressions")] == 2
    pricing = placement.ad_set.pricing_model
    expected = (
        {placement.campaign.id: 2 * pricing.bid_amount / 1000} if pricing.type == "cpm" else {}
    )
    assert spend(client) == pytest.approx(expected)  # each conversation's view bills once


@pytest.mark.parametrize(
    "tamper",
    [
        lambda q: q.replace("message_id=m-1", "message_id=m-2"),
        lambda q: q.replace("conversation_id=c-9", "conversation_id=c-8"),
        lambda q: q.split("&sig=")[0],
        lambda q: q.replace("ad_id=", "ad_id=9"),
        lambda q: q + "&extra=1",
    ],
)
def test_tampered_ai_beacons_are_400_and_count_nothing(client, tamper):
    _, render, _ = _ai_urls(client)
    r = client.get(f"{render.path}?{tamper(render.query)}")
    assert_error_shape(r, 400)
    assert stored(client) == 0


def test_render_signature_does_not_open_the_view_beacon(client):
    _, render, view = _ai_urls(client)
    assert_error_shape(client.get(f"{view.path}?{render.query}"), 400)
    assert stored(client) == 0


def test_ai_beacons_do_not_exist_on_the_sandbox(make_client):
    client = make_client(env="sandbox")
    assert_error_shape(client.get("/dea/ai/impressions/render?ad_id=1"), 404)


def test_hover_recorded_once_per_token_for_either_surface(client):
    url_tok, ugc_tok = token(client), token(client, "ugc", ad_id="ad-2")
    for tok in (url_tok, url_tok, ugc_tok):
        r = client.post("/dea/url/hover", json={"impression_token": tok, "hover_ms": 800, "v": "1"})
        assert r.status_code == 200 and r.json() == {"acknowledged": True}
    c = counts(client)
    assert c[("ad", "ad-1", "hovers")] == 1 and c[("ad", "ad-2", "hovers")] == 1
    bad = client.post("/dea/url/hover", json={"impression_token": "x.y", "hover_ms": 1, "v": "1"})
    assert_error_shape(bad, 400, "invalid_token")


def test_failures_are_recorded_for_registered_publishers(client):
    register(client)
    body = {"publisher_id": PUB, "v": "1", "page_url": PAGE, "slot_id": "side",
            "reason": "csp_blocked", "message": "connect-src"}  # fmt: skip
    body["impression_token"] = token(client)
    r = client.post("/dea/url/placements/failures", json=body)
    assert r.status_code == 200 and r.json() == {"acknowledged": True}
    c = counts(client)
    assert c[("publisher", PUB, "failures")] == 1 and c[("ad", "ad-1", "failures")] == 1
    err = assert_error_shape(
        client.post("/dea/url/placements/failures", json={**body, "reason": "bored"}), 400
    )
    assert err["field"] == "reason"
    assert_error_shape(
        client.post("/dea/url/placements/failures", json={**body, "publisher_id": "nope"}),
        403,
        "unknown_publisher",
    )


def test_store_that_cannot_commit_is_a_503_with_retry_after(client, monkeypatch):
    async def down(*args):
        raise StoreUnavailable("disk full")

    monkeypatch.setattr(client.app.state.ctx.store, "save_impression", down)
    r = client.post("/dea/url/impression", json=imp_body(token(client)))
    assert_error_shape(r, 503)
    assert r.headers["retry-after"] == "1"


def test_non_ascii_tokens_and_signatures_are_400_not_500(client):
    r = client.post("/dea/url/impression", json=imp_body("tökén.sïg"))
    assert_error_shape(r, 400, "invalid_token")
    r = client.get("/dea/ugc/impression", params={"t": "a.\u00ac\u00ac"})
    assert_error_shape(r, 400, "invalid_token")
    _, render, _ = _ai_urls(client)
    query = render.query.split("&sig=")[0] + "&sig=%C2%AC%C2%AC"
    assert_error_shape(client.get(f"{render.path}?{query}"), 400, "invalid_signature")
    assert stored(client) == 0


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [("ad_id", "x123", "ad_id"), ("ad_id", None, "ad_id"), ("message_id", None, "message_id"),
     ("sig", None, "sig"), ("sig", "AAAA", "sig"), ("scope", "!", "scope"),
     ("pricing", "cpx:1", "pricing"), ("scope", None, "scope"), ("pricing", None, "pricing"),
     ("key_family", None, "key_family"), ("key_family", "a b", "key_family"),
     ("issued_at", "soon", "issued_at")],
)  # fmt: skip
def test_an_ai_beacon_error_names_the_parameter_at_fault(client, name, value, field):
    # A partner debugging a beacon URL it built or changed is told which parameter is wrong;
    # one that lost a sealed parameter is told which.
    ctx = client.app.state.ctx
    placement, _, _ = _ai_urls(client)
    number = ctx.matcher.catalogue.ad_number(placement.ad.id)
    url, _ = ai_beacon_urls(
        ctx.signer, ctx.settings.base_url, number, "m-1", "c-9", scope=AI_SCOPE,
        pricing=placement.ad_set.pricing_model, key_family="key_0123456789ab",
        issued_at=ctx.clock(),
    )  # fmt: skip
    render = urlsplit(url)
    params = [p.split("=", 1) for p in render.query.split("&")]
    kept = [(k, v) for k, v in params if k != name]
    if value is not None:
        kept.append((name, value))
    r = client.get(f"{render.path}?" + "&".join(f"{k}={v}" for k, v in kept))
    assert assert_error_shape(r, 400, "invalid_signature")["field"] == field
    assert stored(client) == 0


def test_impressions_past_the_budget_are_stored_but_not_billed(client):
    # cmp-baybites (bundled catalogue) has a $1,500 budget. With $1,499.996 billed, the next
    # $6 CPM impression ($0.006) bills the $0.004 left, never more; the one after that is
    # stored and counted, never billed.
    ctx = client.app.state.ctx
    ctx.spend.add("cmp-baybites", 1499.996, ctx.clock())
    beacons = [
        token(client, campaign_id="cmp-baybites", ad_id="ad-baybites", cpm_usd=6.0)
        for _ in range(2)
    ]
    for i, tok in enumerate(beacons):
        r = client.post("/dea/url/impression", json=imp_body(tok, iid=f"imp-cap-{i:04d}"))
        assert r.json()["counted"] is True
    assert spend(client) == pytest.approx({"cmp-baybites": 0.004})
    assert stored(client) == 2
    assert ctx.spend.current().total["cmp-baybites"] == pytest.approx(1500.0)


def test_impressions_at_once_never_bill_past_the_budget(client):
    # cmp-baybites with $0.01 left of its $1,500 budget, five $6 CPM pixels ($0.006 each)
    # fired at once: one bills $0.006, one the $0.004 left, the others nothing. The rows of
    # the batch being committed count against the budget before they land.
    ctx = client.app.state.ctx
    ctx.spend.add("cmp-baybites", 1500.0 - 0.01, ctx.clock())
    pixels = [
        ("GET", "/dea/ugc/impression", {"params": {"t": tok}})
        for tok in (
            token(client, "ugc", campaign_id="cmp-baybites", ad_id="ad-bay-delivery", cpm_usd=6.0)
            for _ in range(5)
        )
    ]
    assert [r.status_code for r in at_once(client, pixels)] == [204] * 5
    assert stored(client) == 5
    assert spend(client) == pytest.approx({"cmp-baybites": 0.01})
    assert ctx.spend.current().total["cmp-baybites"] == pytest.approx(1500.0)


def test_impressions_of_a_campaign_gone_from_the_live_catalogue_bill_nothing(make_client):
    # A $0.03 budget and a $10 CPM ($0.01 an impression): three pixels bill the budget,
    # three more nothing. Then the operator removes the campaign, and three tokens issued
    # while it was live (good for a day) come back: counted, but there is no budget left
    # to check them against, so they bill nothing either.
    lamp = placement("ad-lamp", pricing="cpm", bid=10.0)
    campaign = replace(lamp.campaign, budget_usd=0.03)
    other = placement("ad-other").campaign
    script = Script(Catalogue([campaign, other]))
    client = make_client(matcher=script)
    register(client)
    tokens = [
        token(client, "ugc", ad_id="ad-lamp", campaign_id=campaign.id, cpm_usd=10.0)
        for _ in range(9)
    ]
    for tok in tokens[:6]:
        assert client.get("/dea/ugc/impression", params={"t": tok}).status_code == 204
    assert spend(client) == pytest.approx({campaign.id: 0.03})
    script.catalogue = Catalogue([other])  # the campaign left the live catalogue
    for tok in tokens[6:]:
        assert client.get("/dea/ugc/impression", params={"t": tok}).status_code == 204
    assert stored(client) == 9
    assert counts(client)[("campaign", campaign.id, "impressions")] == 9
    assert spend(client) == pytest.approx({campaign.id: 0.03})


def test_a_token_of_the_earlier_form_still_counts_once_and_bills(client):
    # Tokens handed out before an upgrade (JSON, signed as base64 text) stay good for their
    # day; the tag's beacon route reads them like the current form.
    from edge.beacons import LEGACY_IMPRESSION_PURPOSE

    ctx = client.app.state.ctx
    payload = {"t": "before-upgrade", "s": "url", "e": ctx.settings.env, "a": "ad-1"}
    payload |= {"c": "cmp-1", "i": int(ctx.clock()), "m": 4.0, "p": PUB, "o": None, "l": "side"}
    old = ctx.signer.seal(LEGACY_IMPRESSION_PURPOSE, payload)
    assert client.post("/dea/url/impression", json=imp_body(old)).json()["counted"] is True
    again = imp_body(old, iid="imp-00000002")
    assert client.post("/dea/url/impression", json=again).json()["counted"] is False
    assert stored(client) == 1
    assert spend(client) == {"cmp-1": pytest.approx(0.004)}
