"""The tag under a publisher's strict Content Security Policy (Trusted Types enforced), and
under a policy that forgot the edge in connect-src: no ads, but nothing breaks."""

from e2e.catalogue import ad_id
from e2e.helpers import Requests, ad_height, open_page, pause_clock, show
from edge.qa.plugin import expect_viewable_once


def test_strict_csp_page_fills_and_counts_without_a_violation(page, site, pub):
    monitor = open_page(page, site, clock=True, pub=pub, topic="running", csp="strict")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.clock.run_for(1000)
    expect_viewable_once(monitor, "main-slot", beacons=site.beacons, publisher_id=pub)
    site.pages.wait_for_pixels(pub, ad_id("running"), 1)
    assert monitor.violations() == []
    assert monitor.page_errors == []
    # The policy really is enforced on this page: a string into innerHTML is refused.
    refused = page.evaluate(
        """() => { try { document.body.innerHTML = '<i></i>'; return false; }
                   catch (err) { return err instanceof TypeError; } }"""
    )
    assert refused


def test_csp_without_the_edge_in_connect_src_shows_no_ad_and_throws_nothing(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, pub=pub, topic="running", csp="no-edge")
    error = monitor.wait_for_event("error", "main-slot")[0]
    assert error["reason"] == "request_failed"
    violations = monitor.violations()
    assert violations and all(v["directive"] == "connect-src" for v in violations)
    assert any(v["blocked"].startswith(site.edge_url) for v in violations)
    assert page.locator(".edge-ad").count() == 0
    assert monitor.slot_state("main-slot") == "error"
    assert monitor.page_errors == []
    assert [p for _m, p in sent.seen if p != "/dea/tag.js"] == []  # blocked before leaving
