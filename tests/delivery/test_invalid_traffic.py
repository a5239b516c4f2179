"""Invalid traffic through HTTP: tokens bound to their client, bots, per-client rates,
removed publishers, failure reports from registered origins only, and the /dea match
routes' limits, page cache and tag-lane admission."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time

import pytest

from edge.beacons import issue_impression_token
from edge.cli.report import build
from edge.settings import RateLimit
from edge.signing import Signer
from matcher.catalogue import Catalogue
from matcher.types import MatchResult, ScoredAd
from tests.conftest import AI_SCOPE, assert_error_shape
from tests.delivery.helpers import ORIGIN, PUB, matched, placement, register, script
from tests.delivery.test_events import imp_body, spend, stored
from tests.routes.conftest import Script

PAGE = "https://news.example/a/1"
CHROME = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Safari/537.36"
)
BROWSER = {"Origin": ORIGIN, "User-Agent": CHROME}


def kw_body(**kw):
    body = {"publisher_id": PUB, "v": "1.0.0", "page_url": PAGE, "title": "Trail",
            "text": "trail running shoes for wet rock", "slots": ["side"]}  # fmt: skip
    return {**body, **kw}


@pytest.fixture
def client(make_client):
    # The matches here serve "ad-1": its campaign is in the live catalogue, so its valid
    # impressions bill (a campaign not in the live catalogue bills nothing). Five valid
    # impressions per client address in five minutes, to reach the limit in a few beacons.
    c = make_client(
        matcher=Script(Catalogue([placement("ad-1").campaign])),
        ivt_impressions=RateLimit(5, 300.0),
    )
    register(c)
    return c


def served(client, *ad_ids: str) -> MatchResult:
    """A match of the client's live catalogue's own ads (the objects it holds): the page
    cache serves such an answer again, where an equal ad built anew is refused
    (page_cache.servable) and the page matched on every visit."""
    catalogue = client.app.state.ctx.matcher.catalogue
    return MatchResult("matched", tuple(ScoredAd(catalogue.placement(a), 0.8, 0.8) for a in ad_ids))


def report(client) -> dict:
    ctx = client.app.state.ctx
    return build(client.portal.call(ctx.store.counts))


def tag_token(client, monkeypatch, headers=BROWSER) -> str:
    script(monkeypatch, {"Trail": served(client, "ad-1")})
    r = client.post("/dea/url/keywords", json=kw_body(), headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["placements"][0]["ad"]["impression_token"]


def impress(client, tok, iid="imp-00000001", headers=BROWSER):
    r = client.post("/dea/url/impression", json=imp_body(tok, iid=iid), headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


# -- 4: tokens are bound to the client they were issued to -----------------------------------


def test_a_token_fired_by_its_own_client_is_billed(client, monkeypatch):
    tok = tag_token(client, monkeypatch)
    assert impress(client, tok) == {"acknowledged": True, "counted": True}
    assert spend(client) == pytest.approx({"cmp-ad-1": 0.004})
    assert report(client)["ad"]["ad-1"]["viewable_impressions"] == 1


def test_a_token_fired_by_another_client_is_invalid_and_never_billed(client, monkeypatch):
    tok = tag_token(client, monkeypatch)
    other = {**BROWSER, "User-Agent": CHROME.replace("126", "127")}
    # The answer does not tell the sender: it looks like any first impression.
    assert impress(client, tok, headers=other) == {"acknowledged": True, "counted": True}
    assert stored(client) == 1 and spend(client) == {}
    ad = report(client)["ad"]["ad-1"]
    assert ad["invalid_client_mismatch"] == 1 and ad["viewable_impressions"] == 0
    assert report(client)["publisher"][PUB]["invalid_client_mismatch"] == 1
    # ... and it stays spent: the same token from the right client is a replay.
    assert impress(client, tok, iid="imp-00000002")["counted"] is False
    assert spend(client) == {}


def test_a_token_bound_before_a_key_rotation_is_still_its_clients(make_client, monkeypatch):
    old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    client = make_client(matcher=Script(Catalogue([placement("ad-1").campaign])), signing_key=old)
    register(client)
    first, second = tag_token(client, monkeypatch), tag_token(client, monkeypatch)
    # The edge restarted on a new key with the old one as previous.
    client.app.state.ctx.signer = Signer(new.encode(), previous=old.encode())
    assert impress(client, first) == {"acknowledged": True, "counted": True}
    ad = report(client)["ad"]["ad-1"]
    assert ad["viewable_impressions"] == 1 and ad["invalid_client_mismatch"] == 0
    # Another browser firing the other token is still another client.
    other = {**BROWSER, "User-Agent": CHROME.replace("126", "127")}
    impress(client, second, iid="imp-00000002", headers=other)
    assert report(client)["ad"]["ad-1"]["invalid_client_mismatch"] == 1


@pytest.mark.parametrize("path", ["/dea/url/keywords", "/dea/url/placements"])
def test_match_routes_require_a_registered_origin(client, monkeypatch, path):
    script(monkeypatch, {"Trail": served(client, "ad-1")})
    body = kw_body()
    if path.endswith("placements"):
        body = {k: v for k, v in body.items() if k not in ("slots", "title", "text")}
        body["placements"] = [{"slot_id": "s", "text": "Trail shoes"}]
    err = assert_error_shape(client.post(path, json=body), 403, "origin_required")
    assert err["field"] == "Origin"
    evil = {"Origin": "https://evil.example"}
    assert_error_shape(client.post(path, json=body, headers=evil), 403, "origin_not_allowed")
    assert client.post(path, json=body, headers=BROWSER).status_code == 200


# -- 5: general invalid traffic, per-client rates, removed publishers ------------------------


@pytest.mark.parametrize(
    "ua", ["Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
           "python-requests/2.32.3", ""],
)  # fmt: skip
def test_bot_impressions_are_recorded_invalid_and_never_billed(client, monkeypatch, ua):
    headers = {**BROWSER, "User-Agent": ua}
    tok = tag_token(client, monkeypatch, headers=headers)
    assert impress(client, tok, headers=headers)["counted"] is True
    assert spend(client) == {}
    ad = report(client)["ad"]["ad-1"]
    assert ad["invalid_bot_user_agent"] == 1 and ad["viewable_impressions"] == 0


def test_more_than_five_impressions_in_five_minutes_from_one_client_are_invalid(
    client, monkeypatch, clock
):
    tokens = [tag_token(client, monkeypatch) for _ in range(7)]
    assert client.app.state.ctx.page_cache.hits == 6  # one match; each token its own
    for i, tok in enumerate(tokens):
        impress(client, tok, iid=f"imp-0000000{i}")
    ad = report(client)["ad"]["ad-1"]
    assert ad["viewable_impressions"] == 5 and ad["invalid_rate_limited"] == 2
    assert spend(client) == pytest.approx({"cmp-ad-1": 5 * 0.004})
    clock.advance(301)
    impress(client, tag_token(client, monkeypatch), iid="imp-00000099")
    assert report(client)["ad"]["ad-1"]["viewable_impressions"] == 6


def test_a_token_used_after_its_publisher_is_removed_is_invalid(client, monkeypatch):
    tok = tag_token(client, monkeypatch)
    ctx = client.app.state.ctx
    client.portal.call(ctx.store.remove_publisher, PUB)
    client.portal.call(ctx.publishers.refresh)
    impress(client, tok)
    assert spend(client) == {}
    assert report(client)["ad"]["ad-1"]["invalid_publisher_removed"] == 1


def test_ai_beacons_from_a_bot_are_invalid(make_client):
    from edge.beacons import ai_beacon_urls

    client = make_client()
    ctx = client.app.state.ctx
    _, view = ai_beacon_urls(ctx.signer, "", 42, "m-1", "c-1", scope=AI_SCOPE)
    assert client.get(view, headers={"User-Agent": "Googlebot/2.1"}).status_code == 204
    counters = report(client)["ad"]
    moved = [c for a in counters.values() for c, n in a.items() if c.startswith("invalid") and n]
    assert moved == ["invalid_bot_user_agent"]


@pytest.mark.parametrize(
    ("seen", "viewable"),
    [
        ({"visible_ratio": 0.1, "visible_ms": 1000}, False),  # 10% of the ad in view
        ({"visible_ratio": 0.62, "visible_ms": 400}, False),  # in view for 0.4 s
        ({"visible_ratio": 0.3, "visible_ms": 1000}, True),  # a large ad's share
        ({"visible_ratio": 0.5, "visible_ms": 997}, True),  # a timer a little early
        ({}, True),  # a tag that sends no report
    ],
)
def test_an_impression_that_reports_it_was_not_viewable_is_never_billed(
    client, monkeypatch, seen, viewable
):
    tok = tag_token(client, monkeypatch)
    r = client.post("/dea/url/impression", json=imp_body(tok, **seen), headers=BROWSER)
    assert r.json() == {"acknowledged": True, "counted": True}  # the same answer either way
    ad = report(client)["ad"]["ad-1"]
    assert ad["viewable_impressions"] == int(viewable)
    assert ad.get("invalid_not_viewable", 0) == int(not viewable)
    assert spend(client) == ({"cmp-ad-1": pytest.approx(0.004)} if viewable else {})


def test_impressions_that_were_not_viewable_spend_no_client_rate(client, monkeypatch):
    for i in range(6):
        tok = tag_token(client, monkeypatch)
        body = imp_body(tok, iid=f"imp-1000000{i}", visible_ratio=0.0, visible_ms=0)
        client.post("/dea/url/impression", json=body, headers=BROWSER)
    for i in range(5):
        impress(client, tag_token(client, monkeypatch), iid=f"imp-2000000{i}")
    ad = report(client)["ad"]["ad-1"]
    assert ad["invalid_not_viewable"] == 6 and ad["viewable_impressions"] == 5


def test_a_partner_server_names_its_users_browser_for_partner_beacons(make_client):
    """The pixel and AI beacons may be fired from a partner's server, whose HTTP library is
    on the crawler list; with the user's browser in X-Device-User-Agent they are judged on
    it. Without that header they stay invalid, and a bot named there is a bot."""
    from edge.beacons import ai_beacon_urls

    client = make_client()
    ctx = client.app.state.ctx
    server = {"User-Agent": "python-requests/2.32.3"}
    for n, headers in enumerate(
        [{**server, "X-Device-User-Agent": CHROME}, server,
         {**server, "X-Device-User-Agent": "Googlebot/2.1"}]
    ):  # fmt: skip
        tok = issue_impression_token(
            ctx.signer, surface="ugc", env=ctx.settings.env, ad_id="ad-1",
            campaign_id="cmp-1", now=ctx.clock(), cpm_usd=4.0, post_id=f"p-{n}",
        )[0]  # fmt: skip
        r = client.get("/dea/ugc/impression", params={"t": tok}, headers=headers)
        assert r.status_code == 204
        _, view = ai_beacon_urls(ctx.signer, "", 42, f"m-{n}", "c-1", scope=AI_SCOPE)
        assert client.get(view, headers=headers).status_code == 204
    ad = report(client)["ad"]
    assert ad["ad-1"]["viewable_impressions"] == 1 and ad["ad-1"]["invalid_bot_user_agent"] == 2
    ai = next(v for k, v in ad.items() if k != "ad-1")
    assert ai["invalid_bot_user_agent"] == 2
    # The tag's own beacons come from the browser: the header is not read there.
    assert sum(v.get("invalid_bot_user_agent", 0) for v in ad.values()) == 4


# -- 6: failure reports --------------------------------------------------------------------


def failure_body(**kw):
    return {"publisher_id": PUB, "v": "1", "page_url": PAGE, "slot_id": "side",
            "reason": "render_error", **kw}  # fmt: skip


def test_failure_reports_need_a_registered_origin(client):
    path = "/dea/url/placements/failures"
    assert_error_shape(client.post(path, json=failure_body()), 403, "origin_required")
    evil = {"Origin": "https://evil.example"}
    assert_error_shape(client.post(path, json=failure_body(), headers=evil), 403)
    assert report(client)["publisher"] == {}
    assert client.post(path, json=failure_body(), headers=BROWSER).status_code == 200
    assert report(client)["publisher"][PUB]["failures"] == 1


def test_failure_reports_are_rate_limited_per_client(make_client):
    client = make_client(failure_client_rate=RateLimit(3, 60.0))
    register(client)
    path = "/dea/url/placements/failures"
    statuses = [
        client.post(path, json=failure_body(), headers=BROWSER).status_code for _ in range(5)
    ]
    assert statuses == [200, 200, 200, 429, 429]
    r = client.post(path, json=failure_body(), headers=BROWSER)
    assert_error_shape(r, 429, "rate_limited")
    assert int(r.headers["Retry-After"]) >= 1
    assert report(client)["publisher"][PUB]["failures"] == 3


# -- 7: the match routes' limits, the page cache, the tag lane -------------------------------


def test_match_routes_are_rate_limited_per_client_before_the_body(make_client, monkeypatch):
    client = make_client(dea_client_rate=RateLimit(2, 60.0))
    register(client)
    script(monkeypatch, {"Trail": matched("ad-1")})
    for _ in range(2):
        assert client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER).status_code == 200
    # The third is refused before its (broken) body is even read.
    r = client.post("/dea/url/keywords", content=b"{not json", headers=BROWSER)
    assert_error_shape(r, 429, "rate_limited")
    assert "Retry-After" in r.headers


def test_match_routes_are_rate_limited_per_publisher(make_client, monkeypatch):
    client = make_client(dea_publisher_rate=RateLimit(2, 60.0))
    register(client)
    script(monkeypatch, {"Trail": matched("ad-1")})
    codes = [
        client.post(
            "/dea/url/keywords", json=kw_body(page_url=f"{PAGE}?{i}"), headers=BROWSER
        ).status_code
        for i in range(3)
    ]
    assert codes == [200, 200, 429]


def test_a_page_seen_by_many_visitors_is_matched_once(make_client, monkeypatch):
    # On the real matcher, answering with an ad of its catalogue: a cached answer serves
    # only while its ads are the live catalogue's and may still serve (page_cache.servable).
    client = make_client()
    register(client)
    ad = client.app.state.ctx.matcher.catalogue.placement("ad-trail-shoes")
    fake = script(monkeypatch, {"Trail": MatchResult("matched", (ScoredAd(ad, 0.8, 0.8),))})
    tokens = set()
    for _ in range(5):
        r = client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER)
        tokens.add(r.json()["placements"][0]["ad"]["impression_token"])
    assert len(fake.requests) == 1
    assert len(tokens) == 5  # each visitor still gets its own single-use token
    client.post("/dea/url/keywords", json=kw_body(text="other words"), headers=BROWSER)
    client.post("/dea/url/keywords", json=kw_body(page_url=PAGE + "?b"), headers=BROWSER)
    assert len(fake.requests) == 3


def test_page_cache_off(make_client, monkeypatch):
    client = make_client(page_cache_seconds=0)
    register(client)
    fake = script(monkeypatch, {"Trail": matched("ad-1")})
    for _ in range(3):
        client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER)
    assert len(fake.requests) == 3


def test_a_full_tag_lane_sheds_match_requests_with_503(make_client, monkeypatch):
    client = make_client(tag_match_slots=1)
    register(client)
    script(monkeypatch, {"Trail": matched("ad-1")})
    ctx = client.app.state.ctx
    with ctx.admission.tag_slot():  # another request holds the only slot
        r = client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER)
        err = assert_error_shape(r, 503, "overloaded")
        assert r.headers["Retry-After"] == "1" and "busy" in err["message"]
    assert client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER).status_code == 200
    assert ctx.admission.tag_in_flight == 0  # the slot was given back


def live_match(client) -> MatchResult:
    """An answer with an ad of the live catalogue: a cached one holds (page_cache.servable)."""
    ad = client.app.state.ctx.matcher.catalogue.placement("ad-trail-shoes")
    return MatchResult("matched", (ScoredAd(ad, 0.8, 0.8),))


def test_a_request_waits_a_moment_for_a_slot_before_it_is_shed(make_client, monkeypatch):
    # A reader opening several heavy pages at once: a slot that frees within the wait
    # serves the next page instead of a 503.
    client = make_client(tag_match_slots=1)
    register(client)
    script(monkeypatch, {"Trail": matched("ad-1")})
    held = client.app.state.ctx.admission.tag_slot()
    held.__enter__()  # another page's match holds the only slot for 0.3 s
    threading.Timer(0.3, held.__exit__, (None, None, None)).start()
    t0 = time.monotonic()
    r = client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER)
    assert r.status_code == 200 and r.json()["placements"][0]["ad"] is not None, r.text
    assert time.monotonic() - t0 >= 0.25


def test_a_cached_page_is_answered_while_the_tag_lane_is_full(make_client, monkeypatch):
    client = make_client(tag_match_slots=1)
    register(client)
    script(monkeypatch, {"Trail": live_match(client)})
    assert client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER).status_code == 200
    with client.app.state.ctx.admission.tag_slot():  # a flood of other pages holds the lane
        r = client.post("/dea/url/keywords", json=kw_body(), headers=BROWSER)
        assert r.status_code == 200 and r.json()["placements"][0]["ad"] is not None
        other = client.post("/dea/url/keywords", json=kw_body(text="new words"), headers=BROWSER)
        assert_error_shape(other, 503, "overloaded")


def test_the_text_a_client_sends_to_the_model_is_budgeted(make_client, monkeypatch):
    # A few requests of many long texts must not let one address hold the tag lane: the
    # characters matched are charged per client address, cached pages excepted.
    client = make_client(dea_client_text_rate=RateLimit(100, 60.0))
    register(client)
    fake = script(monkeypatch, {"Trail": live_match(client)})

    def page(*texts: str):
        slots = [{"slot_id": f"s{i}", "text": t} for i, t in enumerate(texts)]
        body = {"publisher_id": PUB, "v": "1.0.0", "page_url": PAGE, "placements": slots}
        return client.post("/dea/url/placements", json=body, headers=BROWSER)

    first = ("Trail " + "a" * 34, "Trail " + "b" * 34)  # 80 characters of 100
    assert page(*first).status_code == 200
    r = page("Trail " + "c" * 34)  # 40 more: over
    err = assert_error_shape(r, 429, "rate_limited")
    assert "too much text" in err["message"] and int(r.headers["Retry-After"]) >= 1
    assert page(*first).status_code == 200  # the same page again: from the cache, free
    assert len(fake.requests) == 2


def test_a_strangers_text_under_a_post_id_does_not_hold_the_posts_real_text(make_client):
    # The post id is in the page for anyone to read; the real matcher decides here (each
    # request matched afresh: no page cache).
    client = make_client(page_cache_seconds=0)
    register(client)

    def ask(text: str):
        body = {"publisher_id": PUB, "v": "1.0.0", "page_url": PAGE,
                "placements": [{"slot_id": "s", "post_id": "post-7", "text": text}]}  # fmt: skip
        r = client.post("/dea/url/placements", json=body, headers=BROWSER)
        assert r.status_code == 200, r.text
        return r.json()["placements"][0]

    assert ask("I want to kill myself tonight")["reason"] == "unsafe"  # a window opens
    assert ask("I want to kill myself tonight")["reason"] == "backoff"  # for that text
    real = ask("my pup will not touch his kibble, any food picky dogs like?")
    assert real["ad"] is not None, real


def test_the_partner_lane_is_not_queued_behind_the_tag_lane(shared_matcher):
    from matcher.types import MatchRequest

    class NoState:
        async def load(self, *a, **kw):
            from matcher.state import ThreadState

            return ThreadState()

        async def record_served(self, *a, **kw):
            pass

        async def record_miss(self, *a, **kw):
            pass

        async def clear_backoff(self, *a, **kw):
            pass

    release = threading.Event()
    blocker = shared_matcher._executors["tag"].submit(release.wait, 30)
    try:
        request = MatchRequest(product="ugc", content="my pup hates kibble", max_ads=1)

        async def partner() -> object:
            return await asyncio.wait_for(
                shared_matcher.match(request, NoState(), 1_790_000_000.0, lane="partner"), 10
            )

        assert asyncio.run(partner()) is not None  # done while the tag lane is blocked
    finally:
        release.set()
        blocker.result(timeout=30)


def test_click_verdicts_for_the_click_routes(client, monkeypatch):
    from starlette.requests import Request

    from edge.delivery.events import click_verdict
    from edge.ivt import Client, client_binding

    ctx = client.app.state.ctx

    def request(ua: str = CHROME) -> Request:
        headers = [(b"user-agent", ua.encode())] if ua else []
        return Request({"type": "http", "headers": headers, "client": ("203.0.113.9", 1)})

    bound = client_binding(ctx.signer, Client("203.0.113.9", CHROME))

    def judge(**kw: object) -> str | None:
        args: dict = {"bound_to": bound, "publisher_id": PUB, "impression_seen": True, **kw}
        return click_verdict(ctx, args.pop("req", request()), **args).reason

    assert judge(req=request("Googlebot/2.1")) == "bot_user_agent"
    assert judge(bound_to=client_binding(ctx.signer, Client("198.51.100.1", CHROME))) == (
        "client_mismatch"
    )
    assert judge(publisher_id="gone") == "publisher_removed"
    assert judge(impression_seen=False) == "click_before_impression"
    assert judge() is None
    assert judge() == "rate_limited"  # a second click within the minute
    # A partner's click (the AI click URL) has no per-client rate, and names the user's
    # browser in X-Device-User-Agent when its server fires it.
    assert judge(bound_to=None, partner=True) is None
    headers = [(b"user-agent", b"Go-http-client/1.1"), (b"x-device-user-agent", CHROME.encode())]
    server = Request({"type": "http", "client": ("203.0.113.9", 1), "headers": headers})
    assert judge(req=server, bound_to=None, partner=True) is None
    assert judge(req=server, bound_to=None) == "bot_user_agent"  # the tag's: not read
