"""The tag pinned with Subresource Integrity from a publisher's page, and the edge's own
demo page (strict CSP, pinned tag, page-level and UGC slots) in a real browser."""

from e2e.catalogue import ad_id
from e2e.helpers import open_page
from edge.qa import TagMonitor


def test_pinned_tag_with_integrity_runs_cross_origin(page, site, pub):
    monitor = open_page(page, site, pub=pub, topic="cooking", pin=1)
    assert monitor.wait_for_event("filled", "main-slot")[0]["ad_id"] == ad_id("cooking")
    src = page.evaluate("document.querySelector('script[integrity]').src")
    assert "/dea/tag.1." in src  # the versioned URL, verified by the browser before it ran
    assert monitor.page_errors == []


def test_tag_with_a_wrong_integrity_hash_never_runs(page, site, pub):
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    # goto waits for the load event, which an async script delays until it ran or failed.
    monitor = open_page(page, site, pub=pub, topic="cooking", pin="bad")
    assert any("integrity" in text for text in console), console
    assert page.evaluate("window.edgeTag.version === undefined")  # only the monitor's target
    assert monitor.events() == [] and page.locator(".edge-ad").count() == 0


def test_demo_page_fills_its_slots_under_its_strict_csp(page, site):
    monitor = TagMonitor(page)
    page.goto(f"{site.edge_url}/demo")
    page_ad = monitor.wait_for_event("filled", "story-inline")[0]
    assert page_ad["surface"] == "url"
    post_ad = monitor.wait_for_event("filled", "demo-post-dog-ad")[0]
    assert (post_ad["ad_id"], post_ad["surface"]) == (ad_id("pets"), "ugc")
    page.click("#add-slot")  # the single-page-app button adds a post with a slot
    assert monitor.wait_for_event("filled", "demo-late-1-ad")[0]["ad_id"] == ad_id("coffee")
    assert monitor.violations() == [] and monitor.page_errors == []
