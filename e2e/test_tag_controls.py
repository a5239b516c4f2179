"""What the tag tells and lets a publisher do, under a strict CSP with Trusted Types: the
server's reasons in error events, the debug build, refills (ttl_seconds, the no-match window,
the page's refresh and destroy) and the optional stylesheet."""

from __future__ import annotations

import datetime as dt
import json
import urllib.request

import pytest

from e2e.catalogue import ad_id
from e2e.helpers import T0, Requests, ad_height, open_page, pause_clock, settle, show
from e2e.pageserver import PageServer
from edge.qa import free_port

SLOT = "[data-ad-slot='main-slot']"
PLACEMENTS = "/dea/url/placements"
KEYWORDS = "/dea/url/keywords"
TTL_MS = 900_000  # the e2e catalogue's ttl_seconds
IMPRESSION = "/dea/url/impression"
HOVER = "/dea/url/hover"
# The brand-unsafe article of the test pages (pages/article.html.j2, topic "news").
NEWS = (
    "Earthquake death toll rises",
    "Breaking news: the death toll from the earthquake rose overnight, authorities said. Dozens "
    "were killed and hundreds injured; rescue teams searched collapsed buildings as families "
    "waited for news.",
)


def test_a_misspelt_publisher_gets_the_servers_reason(page, site):
    monitor = open_page(page, site, pub="newcoo", topic="running", csp="strict")
    error = monitor.wait_for_event("error", "main-slot")[0]
    assert error["reason"] == "request_failed" and error["code"] == "unknown_publisher"
    assert error["message"] == "publisher 'newcoo' is not registered"
    assert monitor.violations() == [] and monitor.page_errors == []


def test_an_unregistered_origin_is_named_not_failed_to_fetch(page, site, pub):
    other_host = "127.0.0.3"  # an origin no publisher registered
    other = PageServer(other_host, free_port(other_host), site.edge_url)
    other.start()
    try:
        monitor = open_page(page, site, pub=pub, topic="running", csp="strict")
        monitor.wait_for_event("filled", "main-slot")  # registered here...
        page.goto(other.url("article", pub=pub, topic="running", csp="strict"))
        error = monitor.wait_for_event("error", "main-slot")[0]  # ...not there
        assert error["code"] == "origin_not_allowed", error
        assert (
            error["message"] == f"origin '{other.origin}' is not registered for publisher '{pub}'"
        )
        assert monitor.page_errors == []
    finally:
        other.stop()


def test_debug_switch_logs_each_decision_from_the_debug_build(page, site, pub):
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    sent = Requests(page, site.edge_url)
    monitor = open_page(
        page, site, clock=True, pub=pub, topic="running", csp="strict", edge_debug=1
    )
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.clock.run_for(1000)
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    logged = [line for line in console if line.startswith("[edge-tag] ")]
    for decision in ("slot", "request", "answer", "filled", "viewable", "beacon"):
        assert any(line.startswith(f"[edge-tag] {decision} ") for line in logged), (
            decision,
            logged,
        )
    assert [p for m, p in sent.seen if m == "GET"] == ["/dea/tag.js", "/dea/tag.debug.js"]
    assert page.evaluate("window.edgeTag.version") == site_version(site)
    assert monitor.violations() == [] and monitor.page_errors == []


def test_data_debug_on_the_script_asks_for_the_debug_build_too(page, site, pub):
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    monitor = open_page(page, site, pub=pub, topic="pets", csp="strict", debug=1)
    monitor.wait_for_event("filled", "main-slot")
    assert any(line.startswith("[edge-tag] filled ") for line in console), console
    assert monitor.violations() == []


def test_without_the_switch_nothing_is_logged_or_loaded(page, site, pub):
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, pub=pub, topic="pets", csp="strict")
    monitor.wait_for_event("filled", "main-slot")
    assert not [line for line in console if "[edge-tag]" in line]
    assert ("GET", "/dea/tag.debug.js") not in sent.seen


def test_an_expired_ad_on_screen_is_refilled_and_counted_as_a_new_impression(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running", csp="strict")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.clock.run_for(1000)
    first = monitor.wait_for_event("viewable", "main-slot")[0]
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    page.clock.run_for(TTL_MS - 2000)  # not yet expired: nothing asked
    round_trip(page, site)
    assert sent.to(PLACEMENTS) == []
    page.clock.run_for(2000)  # expired (counted from the viewable second): the tag watches
    settle(page, SLOT)  # the slot, which is in view...
    page.clock.run_for(1000)  # ...for the viewability second: refilled
    monitor.wait_for_event("filled", "main-slot", count=2)
    assert sent.to(PLACEMENTS) == [("POST", PLACEMENTS)]
    settle(page)  # the tag has been told the new rendering is in view: its second starts
    page.clock.run_for(1000)  # the new rendering, in view for a second
    second = monitor.wait_for_event("viewable", "main-slot", count=2)[1]
    assert second["impression_id"] != first["impression_id"]
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 2)
    page.clock.run_for(5000)  # counted once each
    assert site.beacons.viewable_impressions(pub) == 2
    assert page.locator(".edge-ad").count() == 1
    assert monitor.violations() == [] and monitor.page_errors == []


def test_the_ttl_counts_from_the_first_viewable_second(page, site, pub):
    # ttl_seconds count time since the reader saw the ad, not since it was rendered, and the
    # refill then waits for the slot to be in view again for a second, as GPT's refresh does
    # (QA: an ad first seen 40 s after its 30 s ttl was counted and replaced in the same
    # instant: seen for one second, billed, swapped).
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    page.clock.run_for(TTL_MS + 60_000)  # long past its ttl_seconds, never on screen
    show(page, ad_height(page))
    page.clock.run_for(1000)
    monitor.wait_for_event("viewable", "main-slot")
    page.clock.run_for(TTL_MS - 1000)  # in view all along: its ttl has not run out yet
    round_trip(page, site)
    assert sent.to(PLACEMENTS) == [] and len(monitor.events("filled")) == 1
    show(page, 0)
    page.clock.run_for(60_000)  # run out, but the slot is out of view: nothing asked
    round_trip(page, site)
    assert sent.to(PLACEMENTS) == []
    show(page, ad_height(page))
    page.clock.run_for(999)
    round_trip(page, site)
    assert sent.to(PLACEMENTS) == []
    page.clock.run_for(1)  # in view again for a second: refilled
    monitor.wait_for_event("filled", "main-slot", count=2)
    assert sent.to(PLACEMENTS) == [("POST", PLACEMENTS)]
    assert len(monitor.events("viewable")) == 1


def round_trip(page, site) -> None:
    """One round trip to the edge (connect-src allows nothing else under the strict CSP):
    answers that arrived before it have reached the tag when it returns."""
    page.evaluate(
        "(u) => fetch(u).then((r) => r.text()).then(() => null)", f"{site.edge_url}/dea/tag.json"
    )


def backoff(route):
    """The edge's no-match window for the page's slot, as its answer says it."""
    response = route.fetch()
    body = response.json()
    body["placements"][0] = {
        "slot_id": "main-slot",
        "ad": None,
        "reason": "backoff",
        "retry_after_seconds": 60,
    }
    route.fulfill(response=response, body=json.dumps(body))


def test_no_request_for_a_slot_before_its_no_match_window_ends(page, site, pub):
    sent = Requests(page, site.edge_url)
    page.route(f"{site.edge_url}{KEYWORDS}", backoff)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running", csp="strict")
    assert monitor.wait_for_event("empty", "main-slot")[0]["reason"] == "backoff"
    # The answer came within seconds of T0: its 60 s window ends a little after T0 + 60 s.
    page.clock.pause_at(T0 + dt.timedelta(seconds=30))
    page.evaluate(f"edgeTag.refresh(document.querySelector({SLOT!r}))")  # asked too soon
    page.clock.run_for(20_000)
    round_trip(page, site)
    assert sent.to(PLACEMENTS) == []
    page.clock.run_for(15_000)  # the window is over (the slot is off screen: nothing yet)
    round_trip(page, site)
    assert sent.to(PLACEMENTS) == []
    page.evaluate(f"edgeTag.refresh(document.querySelector({SLOT!r}))")
    monitor.wait_for_event("filled", "main-slot")
    assert sent.to(PLACEMENTS) == [("POST", PLACEMENTS)]
    assert monitor.page_errors == []


def count_ads_at_each_outcome(page) -> None:
    """Before the page loads: each "empty" or "error" event records how many ads the page
    shows at that moment (`window.__adsAtOutcome`), as a publisher's listener would see."""
    page.add_init_script(
        """(() => {
          const tag = (window.edgeTag = window.edgeTag || new EventTarget());
          window.__adsAtOutcome = [];
          for (const type of ["empty", "error"]) tag.addEventListener(type, () =>
            window.__adsAtOutcome.push(document.querySelectorAll(".edge-ad").length));
        })()"""
    )


def route_to_unsafe_article(page) -> None:
    """A single-page app's route change: a new URL, and <main> shows a brand-unsafe article
    (the slot stays where it is)."""
    page.evaluate(
        """([title, text]) => {
          history.pushState(null, "", location.href.replace(/topic=\\w+/, "topic=news"));
          document.title = title;
          document.querySelector("article h1").textContent = title;
          document.querySelector("article p").textContent = text;
        }""",
        list(NEWS),
    )


@pytest.mark.parametrize("outcome", ["empty", "error"])
def test_a_refresh_without_an_ad_removes_the_old_one_and_it_counts_nothing(
    page, site, pub, outcome
):
    # QA: after a route change to an unsafe page and edgeTag.refresh(el), the slot said
    # "empty" but kept the old ad, which then became viewable and was billed there.
    sent = Requests(page, site.edge_url)
    if outcome == "error":  # the refresh gets no answer at all: the old ad must go too
        page.route(f"{site.edge_url}{PLACEMENTS}", lambda route: route.abort())
    count_ads_at_each_outcome(page)
    monitor = open_page(page, site, clock=True, pub=pub, topic="coffee", csp="strict")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    # The old ad is in view, half-way through its viewability second, the pointer on it.
    show(page, ad_height(page))
    page.clock.run_for(500)
    page.hover(".edge-ad")
    route_to_unsafe_article(page)
    page.evaluate(f"edgeTag.refresh(document.querySelector({SLOT!r}))")
    answer = monitor.wait_for_event(outcome, "main-slot")[0]
    assert answer["reason"] == {"empty": "unsafe", "error": "request_failed"}[outcome], answer
    # Gone before the outcome was reported, not only soon after.
    assert page.evaluate("window.__adsAtOutcome") == [0]
    assert page.locator(".edge-ad").count() == 0
    assert monitor.slot_state("main-slot") == outcome
    # Its timers would all have fired by now (viewability second, hover dwell)...
    page.clock.run_for(3000)
    # ...and the slot scrolled away and back into view changes nothing either.
    show(page, 0, SLOT)
    show(page, 100, SLOT)
    page.clock.run_for(3000)
    round_trip(page, site)
    assert monitor.events("viewable") == []
    assert sent.to(IMPRESSION) == [] and sent.to(HOVER) == []
    assert site.beacons.viewable_impressions(pub) == 0
    assert site.pages.pixel_fires(pub, ad_id("coffee")) == 0
    assert monitor.slot_state("main-slot") == outcome
    assert monitor.violations() == [] and monitor.page_errors == []


def test_an_expired_ad_refilled_without_an_ad_is_removed(page, site, pub):
    # The refill after ttl_seconds takes the same path: an expired ad must not stay on a page
    # that now gets none (the page's text changed under it, without a refresh call).
    count_ads_at_each_outcome(page)
    monitor = open_page(page, site, clock=True, pub=pub, topic="coffee", csp="strict")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.clock.run_for(1000)
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    route_to_unsafe_article(page)
    page.clock.run_for(TTL_MS)  # expired: the tag starts watching the slot...
    settle(page, SLOT)  # ...which is in view...
    page.clock.run_for(1000)  # ...for the viewability second: refilled
    assert monitor.wait_for_event("empty", "main-slot")[0]["reason"] == "unsafe"
    assert page.evaluate("window.__adsAtOutcome") == [0]
    assert page.locator(".edge-ad").count() == 0
    page.clock.run_for(5000)
    round_trip(page, site)
    assert monitor.slot_state("main-slot") == "empty"
    assert len(monitor.events("viewable")) == 1
    assert site.beacons.viewable_impressions(pub) == 1
    assert monitor.violations() == [] and monitor.page_errors == []


def test_page_can_destroy_and_refill_a_slot(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="cooking", csp="strict")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    # A single-page app leaves the route: the slot is emptied and forgets its timers.
    page.evaluate(f"edgeTag.destroy(document.querySelector({SLOT!r}))")
    assert page.locator(".edge-ad").count() == 0
    assert monitor.slot_state("main-slot") is None
    page.clock.run_for(TTL_MS + 5000)
    round_trip(page, site)
    assert sent.to(PLACEMENTS) == [] and monitor.events("viewable") == []
    # ...and comes back: refresh fills it again now, a new ad to count once.
    page.evaluate(f"edgeTag.refresh(document.querySelector({SLOT!r}))")
    filled = monitor.wait_for_event("filled", "main-slot", count=2)[1]
    assert filled["ad_id"] == ad_id("cooking")
    show(page, ad_height(page))
    page.clock.run_for(1000)
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    assert monitor.violations() == [] and monitor.page_errors == []


def test_optional_stylesheet_styles_the_ad_under_a_strict_csp(page, site, pub):
    monitor = open_page(page, site, pub=pub, topic="coffee", csp="strict", css=1)
    monitor.wait_for_event("filled", "main-slot")
    style = page.evaluate(
        """() => {
          const get = (s) => getComputedStyle(document.querySelector(s));
          return {cta: get('.edge-ad__cta').backgroundColor,
                  radius: get('.edge-ad').borderTopLeftRadius,
                  label: get('.edge-ad__label').textTransform,
                  title: get('.edge-ad__title').fontWeight};
        }"""
    )
    assert style == {"cta": "rgb(11, 87, 208)", "radius": "8px", "label": "uppercase",
                     "title": "600"}  # fmt: skip
    assert page.evaluate("[...document.querySelectorAll('[style]')].length") == 0
    assert monitor.violations() == [] and monitor.page_errors == []


def test_optional_stylesheet_hides_an_empty_slot(page, site, pub):
    monitor = open_page(page, site, pub=pub, topic="news", csp="strict", css=1)
    monitor.wait_for_event("empty", "main-slot")
    assert page.evaluate(f"getComputedStyle(document.querySelector({SLOT!r})).display") == "none"


def site_version(site) -> str:
    with urllib.request.urlopen(f"{site.edge_url}/dea/tag.json", timeout=5) as answer:
        return json.load(answer)["version"]
