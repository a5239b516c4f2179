"""MRC viewability in a real browser: 50% for one continuous second (30% for large ads),
on a visible page; then exactly one impression and one fire of each pixel."""

import pytest

from e2e.catalogue import ad_id
from e2e.helpers import Requests, ad_height, open_page, pause_clock, show

IMPRESSION = "/dea/url/impression"


def test_half_in_view_for_one_second_counts_one_impression_and_one_pixel(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running")
    filled = monitor.wait_for_event("filled", "main-slot")[0]
    assert filled["ad_id"] == ad_id("running")
    pause_clock(page)
    show(page, ad_height(page) / 2)  # exactly 50% of the pixels
    page.clock.run_for(999)
    assert monitor.events("viewable") == []
    page.clock.run_for(1)
    viewable = monitor.wait_for_event("viewable", "main-slot")[0]
    assert viewable["visible_ratio"] == pytest.approx(0.5, abs=0.01)
    assert viewable["visible_ms"] == 1000
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    # Out of view and back, long after: the ad was already counted, nothing more is sent.
    show(page, 0)
    show(page, ad_height(page))
    page.clock.run_for(5000)
    assert len(monitor.events("viewable")) == 1
    assert sent.to(IMPRESSION) == [("POST", IMPRESSION)]
    assert site.beacons.viewable_impressions(pub) == 1
    assert site.pages.pixel_fires(pub, ad_id("running")) == 1
    assert monitor.slot_state("main-slot") == "viewable"
    assert not monitor.page_errors
