"""Filling slots: at load, added later, inside UGC posts; brand safety; failures; hover;
beacons that survive a failed fetch and the page going away."""

import json
import time

import pytest

from e2e.catalogue import ad_id
from e2e.helpers import (
    Requests,
    ad_height,
    advance_until,
    open_page,
    pause_clock,
    round_trip,
    show,
)
from edge.qa.plugin import expect_viewable_once

KEYWORDS = "/dea/url/keywords"
PLACEMENTS = "/dea/url/placements"


def test_ad_renders_with_classes_and_the_exact_click_through_url(page, site, pub):
    monitor = open_page(page, site, pub=pub, topic="pets")
    monitor.wait_for_event("filled", "main-slot")
    ad = page.evaluate(
        """() => {
          const box = document.querySelector('[data-ad-slot="main-slot"] .edge-ad');
          const link = box.querySelector('a.edge-ad__link');
          const text = (c) => box.querySelector('.edge-ad__' + c)?.textContent;
          return { id: box.dataset.adId, href: link.getAttribute('href'), target: link.target,
                   rel: link.rel, title: text('title'), cta: text('cta'),
                   advertiser: text('advertiser'), label: text('label'),
                   styled: box.querySelectorAll('[style]').length };
        }"""
    )
    assert ad["id"] == ad_id("pets")
    assert ad["href"] == "https://pets.example/go?ad=e2e-dog-food&utm_source=e2e"
    assert (ad["target"], ad["rel"]) == ("_blank", "sponsored noopener")
    assert ad["title"] == "Fresh food picky dogs finish" and ad["cta"] == "Shop now"
    assert ad["advertiser"] == "Happy Hound Kitchen" and ad["label"] == "Sponsored"
    assert ad["styled"] == 0


def test_slot_added_after_load_is_filled_through_placements(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, pub=pub, topic="coffee", slot=0)
    page.wait_for_function("() => window.edgeTag && window.edgeTag.version")
    assert sent.to(KEYWORDS) == [] and sent.to(PLACEMENTS) == []  # no slot at load
    page.evaluate(
        """() => {
          const slot = document.createElement('div');
          slot.dataset.adSlot = 'late-slot';
          document.getElementById('late').append(slot);
        }"""
    )
    filled = monitor.wait_for_event("filled", "late-slot")[0]
    assert filled["ad_id"] == ad_id("coffee") and filled["surface"] == "url"
    assert sent.to(PLACEMENTS) == [("POST", PLACEMENTS)]
    show(page, ad_height(page, "[data-ad-slot=late-slot] .edge-ad"), "[data-ad-slot=late-slot]")
    expect_viewable_once(monitor, "late-slot", beacons=site.beacons, publisher_id=pub)


def test_page_and_ugc_slots_at_load_use_keywords_and_placements(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, pub=pub, topic="running", ugc="pets")
    page_ad = monitor.wait_for_event("filled", "main-slot")[0]
    post_ad = monitor.wait_for_event("filled", "post-slot")[0]
    # The post's slot is matched to the post alone; the page's slot to the whole page.
    assert (post_ad["ad_id"], post_ad["surface"]) == (ad_id("pets"), "ugc")
    assert page_ad["surface"] == "url"
    assert page_ad["ad_id"] in (ad_id("running"), ad_id("pets"))
    assert sent.to(KEYWORDS) == [("POST", KEYWORDS)]
    assert sent.to(PLACEMENTS) == [("POST", PLACEMENTS)]


def test_ugc_slot_is_counted_on_the_ugc_beacon(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, pub=pub, topic="cooking", ugc="pets", slot=0)
    assert monitor.wait_for_event("filled", "post-slot")[0]["ad_id"] == ad_id("pets")
    show(page, ad_height(page), "[data-ad-slot=post-slot] .edge-ad")
    expect_viewable_once(monitor, "post-slot", beacons=site.beacons, publisher_id=pub)
    assert sent.to("/dea/ugc/impression") == [("POST", "/dea/ugc/impression")]
    assert sent.to("/dea/url/impression") == []
    site.pages.wait_for_pixels(pub, ad_id("pets"), 1)


def test_unsafe_page_gets_no_ad_and_sends_no_beacon(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="news")
    empty = monitor.wait_for_event("empty", "main-slot")[0]
    assert empty["reason"] == "unsafe"
    pause_clock(page)
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    page.clock.run_for(5000)
    assert page.locator(".edge-ad").count() == 0
    assert monitor.slot_state("main-slot") == "empty"
    assert [p for _m, p in sent.seen if p != "/dea/tag.js"] == [KEYWORDS]
    assert site.beacons.counters("publisher", pub).get("viewable_impressions", 0) == 0
    assert sum(site.pages.pixel_fires(pub, ad) for ad in map(ad_id, ("running", "pets"))) == 0


def test_failed_creative_is_reported_and_not_shown(page, site, pub):
    def break_the_creative(route):
        response = route.fetch()
        body = response.json()
        body["placements"][0]["ad"]["click_through_url"] = "javascript:alert(1)"
        route.fulfill(response=response, body=json.dumps(body))

    page.route(f"{site.edge_url}{KEYWORDS}", break_the_creative)
    monitor = open_page(page, site, pub=pub, topic="running")
    error = monitor.wait_for_event("error", "main-slot")[0]
    assert error["reason"] == "creative_error" and error["ad_id"] == ad_id("running")
    assert page.locator(".edge-ad").count() == 0
    assert monitor.slot_state("main-slot") == "error"
    site.beacons.wait_for("publisher", pub, "failures", 1)
    assert not monitor.page_errors


def test_hover_after_a_dwell_is_recorded_once(page, site, pub):
    # Every hover beacon the tag sends, counted where it leaves the page (the edge would
    # also refuse a second one for the same token, so its counter alone cannot show one).
    sent: list[str] = []
    page.on(
        "request",
        lambda r: sent.append(r.url) if r.method == "POST" and "/dea/url/hover" in r.url else None,
    )
    monitor = open_page(page, site, clock=True, pub=pub, topic="cooking")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.hover(".edge-ad")
    page.clock.run_for(499)
    page.mouse.move(0, 0)  # left before the dwell: nothing
    page.clock.run_for(2000)
    page.hover(".edge-ad")
    page.clock.run_for(500)
    site.beacons.wait_for("publisher", pub, "hovers", 1)
    assert len(sent) == 1
    page.mouse.move(0, 0)
    page.hover(".edge-ad")
    page.clock.run_for(2000)  # once per rendering: a second dwell sends nothing
    # A beacon started during run_for is reported before this round trip returns; the
    # short wait also lets one that reached the edge be counted.
    page.evaluate("() => 0")
    page.wait_for_timeout(500)
    assert len(sent) == 1, sent
    assert site.beacons.count("publisher", pub, "hovers") == 1


def test_impression_falls_back_to_send_beacon_when_fetch_fails(page, site, pub):
    # A proxy that drops the CORS preflight: every fetch to the beacon fails at the network
    # level; sendBeacon's text/plain POST needs no preflight and gets through.
    page.route(
        f"{site.edge_url}/dea/url/impression",
        lambda route: route.abort() if route.request.resource_type == "fetch" else route.fallback(),
    )
    monitor = open_page(page, site, clock=True, pub=pub, topic="running")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.clock.run_for(1000)
    monitor.wait_for_event("viewable", "main-slot")
    advance_until(page, lambda: site.beacons.viewable_impressions(pub) > 0)  # resend delay
    assert site.beacons.viewable_impressions(pub) == 1


def test_beacon_waiting_for_a_retry_is_flushed_on_pagehide(page, site, pub):
    # The edge answers 503 once; the beacon waits for its resend, then the reader leaves.
    page.route(
        f"{site.edge_url}/dea/url/impression",
        lambda route: (
            route.fulfill(status=503, headers={"Access-Control-Allow-Origin": "*"})
            if route.request.resource_type == "fetch"
            else route.fallback()
        ),
    )
    monitor = open_page(page, site, clock=True, pub=pub, topic="pets")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    with page.expect_response(f"{site.edge_url}/dea/url/impression") as answer:
        page.clock.run_for(1000)
    assert answer.value.status == 503
    monitor.wait_for_event("viewable", "main-slot")
    round_trip(page)  # the 503 has reached the tag: the beacon waits for its resend
    assert site.beacons.viewable_impressions(pub) == 0
    page.goto("about:blank")  # pagehide: the pending beacon goes out with sendBeacon
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)


def test_unregistered_publisher_gets_no_ad_and_no_page_error(page, site):
    monitor = open_page(page, site, pub="nobody-registered-this", topic="running")
    error = monitor.wait_for_event("error", "main-slot")[0]
    assert error["reason"] == "request_failed"
    assert page.locator(".edge-ad").count() == 0 and monitor.page_errors == []


# The edge's tag lane takes EDGE_TAG_MATCH_SLOTS matches at a time (2 by default) and sheds
# the next with 503 `overloaded` and Retry-After: 1 (edge/admission.py); its per-client limit
# answers 429 `rate_limited` with Retry-After.
BUSY = {
    503: {"code": "overloaded", "message": "the ad server is busy matching pages; retry shortly"},
    429: {"code": "rate_limited", "message": "too many requests from this address"},
}


def busy_answer(route, site, status: int) -> None:
    route.fulfill(
        status=status,
        headers={
            "Access-Control-Allow-Origin": site.pages.origin,
            "Access-Control-Expose-Headers": "Retry-After",
            "Retry-After": "1",
            "Vary": "Origin",
        },
        content_type="application/json",
        body=json.dumps({"error": BUSY[status]}),
    )


def settled(page, count: int) -> None:
    """Wait until ``count`` slots have an answer (filled, empty or error)."""
    page.wait_for_function(
        "(n) => document.querySelectorAll("
        "'[data-edge-state]:not([data-edge-state=loading])').length === n",
        arg=count,
    )


class MatchLog:
    """The page's keyword POSTs and their answers, in the order the browser saw them."""

    def __init__(self, page, site) -> None:
        self.log: list[tuple[str, float, object]] = []
        url = f"{site.edge_url}{KEYWORDS}"

        def sent(r):
            if r.url == url and r.method == "POST":
                self.log.append(("request", time.monotonic(), r.post_data_json["slots"]))

        def answered(r):
            if r.url == url and r.request.method == "POST":
                self.log.append(("response", time.monotonic(), r.status))

        page.on("request", sent)
        page.on("response", answered)

    def requests(self) -> list[list[str]]:
        return [what for kind, _t, what in self.log if kind == "request"]


@pytest.mark.parametrize("status", sorted(BUSY))
def test_a_busy_edge_is_asked_again_and_a_page_sends_one_batch_at_a_time(page, site, pub, status):
    ids = [f"extra-{i}" for i in range(44)]  # with main-slot, 45: batches of 20, 20 and 5
    refused: list[int] = []

    def second_batch_busy(route):
        if (
            route.request.method == "POST"
            and not refused
            and '"extra-19"' in (route.request.post_data or "")
        ):
            refused.append(status)
            return busy_answer(route, site, status)
        return route.fallback()

    page.route(f"{site.edge_url}{KEYWORDS}", second_batch_busy)
    matches = MatchLog(page, site)
    monitor = open_page(page, site, pub=pub, topic="running", ids=",".join(ids))
    slots = ["main-slot", *ids]
    settled(page, len(slots))
    assert monitor.events("error") == [], monitor.events("error")[:1]
    assert refused == [status]
    # One request at a time: each batch leaves after the previous one was answered...
    kinds = [kind for kind, _t, _w in matches.log]
    assert kinds == ["request", "response"] * 4, matches.log
    sent = matches.requests()
    assert sent == [slots[:20], slots[20:40], slots[20:40], slots[40:]]
    # ...and the refused one is asked again once the edge's Retry-After has passed.
    (_k, answered_at, code), (_k2, retried_at, _s) = matches.log[3], matches.log[4]
    assert code == status and retried_at - answered_at >= 0.95
    assert monitor.wait_for_event("filled", "main-slot")[0]["ad_id"] == ad_id("running")
    assert not monitor.page_errors


def test_a_match_request_is_retried_a_bounded_number_of_times(page, site, pub):
    page.route(
        f"{site.edge_url}{KEYWORDS}",
        lambda route: (
            busy_answer(route, site, 503) if route.request.method == "POST" else route.fallback()
        ),
    )
    matches = MatchLog(page, site)
    monitor = open_page(page, site, pub=pub, topic="running", ids="second-slot")
    errors = [monitor.wait_for_event("error", slot)[0] for slot in ("main-slot", "second-slot")]
    for error in errors:
        assert (error["reason"], error["code"]) == ("request_failed", "overloaded"), error
        assert error["message"] == BUSY[503]["message"]
    assert matches.requests() == [["main-slot", "second-slot"]] * 3  # asked, then twice more
    page.wait_for_timeout(1500)  # and never again
    assert len(matches.requests()) == 3
    assert monitor.slot_state("main-slot") == "error" and not monitor.page_errors


# Slot ids: 1 to 128 characters, one element per id on the page (docs/tag.md). The edge
# refuses a whole request (400) over one bad or repeated id, so the tag keeps such a slot
# out of every request and fails it alone.
LONGEST = "y" * 128


def test_a_bad_or_repeated_slot_id_fails_alone_and_the_others_are_filled(page, site, pub):
    sent = Requests(page, site.edge_url)
    matches = MatchLog(page, site)
    too_long = "x" * 129
    monitor = open_page(
        page, site, pub=pub, topic="running", ids=f",{too_long},main-slot,{LONGEST}"
    )
    settled(page, 5)
    errors = [(e["slot_id"], e["reason"]) for e in monitor.events("error")]
    # In page order: the empty id, the one over 128 characters, the second main-slot.
    assert errors == [(bad, "invalid_slot_id") for bad in ("", too_long, "main-slot")]
    # The others were asked for in one request, each once, and answered.
    assert matches.requests() == [["main-slot", LONGEST]]
    assert sent.to(PLACEMENTS) == []
    assert monitor.wait_for_event("filled", "main-slot")[0]["ad_id"] == ad_id("running")
    states = page.evaluate(
        "[...document.querySelectorAll('[data-ad-slot]')].map((s) => s.dataset.edgeState)"
    )
    assert states[:4] == ["filled", "error", "error", "error"] and states[4] in ("filled", "empty")
    assert not monitor.page_errors


def add_slots(page, *ids: str) -> None:
    """Add page-level slots after load, in one change to the page."""
    page.evaluate(
        """(ids) => document.getElementById('late').append(...ids.map((id) => {
          const slot = document.createElement('div');
          slot.dataset.adSlot = id;
          return slot;
        }))""",
        list(ids),
    )


def test_a_repeated_slot_id_added_later_fails_alone_until_the_first_has_gone(page, site, pub):
    placed: list[list[str]] = []
    page.on(
        "request",
        lambda r: (
            placed.append([p["slot_id"] for p in r.post_data_json["placements"]])
            if r.url == f"{site.edge_url}{PLACEMENTS}" and r.method == "POST"
            else None
        ),
    )
    monitor = open_page(page, site, pub=pub, topic="coffee")
    monitor.wait_for_event("filled", "main-slot")
    add_slots(page, "late-slot", "late-slot", "main-slot", "")
    assert monitor.wait_for_event("filled", "late-slot")[0]["ad_id"] == ad_id("coffee")
    settled(page, 5)
    assert placed == [["late-slot"]]
    errors = [(e["slot_id"], e["reason"]) for e in monitor.events("error")]
    assert errors == [(bad, "invalid_slot_id") for bad in ("late-slot", "main-slot", "")]
    # A single-page app takes the first main-slot away: its id is free for a new element.
    page.evaluate("document.querySelector('[data-ad-slot=main-slot]').remove()")
    add_slots(page, "main-slot")
    monitor.wait_for_event("filled", "main-slot", count=2)
    assert placed == [["late-slot"], ["main-slot"]]
    assert not monitor.page_errors
