"""MRC viewability in a real browser: 50% for one continuous second (30% for large ads),
on a visible page; then exactly one impression and one fire of each pixel."""

import pytest

from e2e.catalogue import ad_id
from e2e.helpers import AD, Requests, ad_height, open_page, pause_clock, settle, show
from edge.qa.beacons import wait_until

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
    site.pages.wait_for_pixels(pub, ad_id("running"), 1)
    assert monitor.slot_state("main-slot") == "viewable"
    assert not monitor.page_errors


def test_49_percent_never_counts_then_50_does(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    height = ad_height(page)
    show(page, height * 0.49)
    page.clock.run_for(5000)
    assert monitor.events("viewable") == [] and sent.to(IMPRESSION) == []
    # The same ad, a little further in: the measurement was live all along.
    show(page, height * 0.5)
    page.clock.run_for(1000)
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    site.pages.wait_for_pixels(pub, ad_id("running"), 1)


def test_nine_tenths_of_a_second_is_not_enough_and_leaving_restarts_the_timer(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="cooking")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    height = ad_height(page)
    show(page, height)
    page.clock.run_for(900)
    show(page, 0)  # scrolled away at 0.9 s
    page.clock.run_for(5000)
    assert monitor.events("viewable") == []
    show(page, height)
    page.clock.run_for(900)  # 1.8 s in view in all, but never 1 s at a stretch
    assert monitor.events("viewable") == []
    page.clock.run_for(100)
    assert monitor.wait_for_event("viewable", "main-slot")[0]["visible_ms"] == 1000
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    assert sent.to(IMPRESSION) == [("POST", IMPRESSION)]


def test_hidden_page_never_counts_and_hiding_restarts_the_timer(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running", hidden=1)
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    height = ad_height(page)
    show(page, height)
    page.clock.run_for(5000)  # fully in view, but in a background tab
    assert monitor.events("viewable") == [] and sent.to(IMPRESSION) == []
    page.evaluate("window.__setVisibility('visible')")
    page.clock.run_for(600)
    page.evaluate("window.__setVisibility('hidden')")
    page.evaluate("window.__setVisibility('visible')")
    page.clock.run_for(600)  # 1.2 s visible, but not continuously
    assert monitor.events("viewable") == []
    page.clock.run_for(400)
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)


def test_large_ad_counts_at_30_percent(page, site, pub):
    monitor = open_page(page, site, clock=True, pub=pub, topic="running", size="large")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    box = page.evaluate("document.querySelector('.edge-ad').getBoundingClientRect().toJSON()")
    assert box["width"] * box["height"] >= 242_500  # 970 x 250
    show(page, box["height"] * 0.28)
    page.clock.run_for(3000)
    assert monitor.events("viewable") == []
    show(page, box["height"] * 0.3)
    page.clock.run_for(1000)
    viewable = monitor.wait_for_event("viewable", "main-slot")[0]
    assert viewable["visible_ratio"] == pytest.approx(0.3, abs=0.01)
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    site.pages.wait_for_pixels(pub, ad_id("running"), 1)


def test_losing_focus_resets_the_timer(page, site, pub):
    monitor = open_page(page, site, clock=True, pub=pub, topic="cooking")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.clock.run_for(700)
    # Another window takes focus (stubbed: headless Chromium keeps every page focused).
    page.evaluate("document.hasFocus = () => false; window.dispatchEvent(new Event('blur'))")
    page.clock.run_for(5000)
    assert monitor.events("viewable") == []
    page.evaluate("delete document.hasFocus; window.dispatchEvent(new Event('focus'))")
    page.clock.run_for(700)  # 1.4 s focused in all, not at a stretch
    assert monitor.events("viewable") == []
    page.clock.run_for(300)
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)


# An ad a person cannot see is not viewable, whatever its geometry: the slot with
# visibility:hidden, or an ancestor with opacity:0 (QA: both were counted and billed).
HIDE = {
    "visibility": ("[data-ad-slot=main-slot]", "visibility", "hidden"),
    "opacity": ("main", "opacity", "0"),
}


def set_style(page, how: str, on: bool) -> None:
    selector, prop, value = HIDE[how]
    page.evaluate(
        "([s, p, v]) => { document.querySelector(s).style[p] = v; }",
        [selector, prop, value if on else ""],
    )


@pytest.mark.parametrize("how", sorted(HIDE))
def test_an_invisible_ad_in_view_never_counts_until_it_is_seen(page, site, pub, how):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    set_style(page, how, True)
    show(page, ad_height(page))  # fully on screen, on a visible, focused page
    page.clock.run_for(5000)
    assert monitor.events("viewable") == [] and sent.to(IMPRESSION) == []
    assert monitor.slot_state("main-slot") == "filled"
    # Shown: the second under way started while it was invisible and does not count; the
    # next one, visible from start to end, does.
    set_style(page, how, False)
    page.clock.run_for(1000)
    assert monitor.events("viewable") == []
    page.clock.run_for(1000)
    viewable = monitor.wait_for_event("viewable", "main-slot")[0]
    assert viewable["visible_ms"] == 1000
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    assert sent.to(IMPRESSION) == [("POST", IMPRESSION)]
    site.pages.wait_for_pixels(pub, ad_id("running"), 1)


def test_an_ad_hidden_when_its_second_ends_does_not_count(page, site, pub):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="cooking")
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    show(page, ad_height(page))
    page.clock.run_for(600)
    set_style(page, "visibility", True)  # hidden before the second is over
    page.clock.run_for(5000)
    assert monitor.events("viewable") == [] and sent.to(IMPRESSION) == []
    set_style(page, "visibility", False)
    page.clock.run_for(2000)
    monitor.wait_for_event("viewable", "main-slot")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    assert sent.to(IMPRESSION) == [("POST", IMPRESSION)]


def centre(page, selector: str = AD) -> None:
    """Scroll the element to the middle of the viewport (an ad of no height included)."""
    page.evaluate("(s) => document.querySelector(s).scrollIntoView({ block: 'center' })", selector)
    settle(page, selector)


# An ad with no pixels (zero width or height) is never viewable, though the observer says 1
# for a zero-area element that touches the viewport (QA: a 0x0 ad was counted and billed).
@pytest.mark.parametrize("size", ["zero", "flat"])
def test_an_ad_without_pixels_never_counts_until_it_has_a_size(page, site, pub, size):
    sent = Requests(page, site.edge_url)
    monitor = open_page(page, site, clock=True, pub=pub, topic="running", size=size)
    monitor.wait_for_event("filled", "main-slot")
    pause_clock(page)
    centre(page)
    box = page.evaluate("document.querySelector('.edge-ad').getBoundingClientRect().toJSON()")
    assert box["width"] * box["height"] == 0 and 0 < box["top"] < 720
    page.clock.run_for(5000)
    assert monitor.events("viewable") == [] and sent.to(IMPRESSION) == []
    assert monitor.slot_state("main-slot") == "filled"
    # It gets its size where it is, wholly in view: no threshold is crossed (the observer said
    # 1 before and says 1 now), yet it counts, after one full second with pixels (within two).
    page.evaluate("document.body.className = 'size-medium'")
    assert ad_height(page) == 200
    page.clock.run_for(2000)
    viewable = monitor.wait_for_event("viewable", "main-slot")[0]
    assert viewable["visible_ratio"] == 1 and viewable["visible_ms"] == 1000
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    assert sent.to(IMPRESSION) == [("POST", IMPRESSION)]
    site.pages.wait_for_pixels(pub, ad_id("running"), 1)


def frame_events(frame, type: str) -> list[dict]:
    """The tag's events in a frame (the monitor's init script runs in every frame)."""
    found: list[dict] = frame.evaluate("() => (window.__edgeQA || { events: [] }).events")
    return [e for e in found if e["type"] == type]


def wait_in_frame(frame, type: str) -> list[dict]:
    return wait_until(
        lambda: frame_events(frame, type),
        lambda found: len(found) == 1,
        lambda found: len(found) > 1,
        f"one {type!r} event in the frame",
        10.0,
    )


def test_an_ad_in_a_frame_counts_on_a_visible_page_without_the_frames_focus(page, site, pub):
    # The tag in a frame (the publisher's page framed by another, or an ad server's frame):
    # the frame's document.hasFocus() is false unless the reader focused that frame, and the
    # top page's focus cannot be read from it (cross-origin). In a frame only the page's
    # visibility counts (QA: an ad wholly in view on a visible, focused page never counted).
    sent = Requests(page, site.edge_url)
    open_page(page, site, clock=True, template="frame", pub=pub, topic="running")
    frame = page.frames[1]
    wait_in_frame(frame, "filled")
    pause_clock(page)
    assert page.evaluate("document.hasFocus()") is True
    assert frame.evaluate("document.hasFocus()") is False
    # The frame below the fold: the ad in view of the frame, the frame not in the page's.
    page.evaluate("window.scrollTo(0, 700)")
    show(frame, ad_height(frame))
    page.clock.run_for(3000)
    assert frame_events(frame, "viewable") == [] and sent.to(IMPRESSION) == []
    # The frame in view: counted after one second, as on a top-level page.
    page.evaluate("window.scrollTo(0, 0)")
    settle(frame)
    page.clock.run_for(999)
    assert frame_events(frame, "viewable") == []
    page.clock.run_for(1)
    assert wait_in_frame(frame, "viewable")[0]["visible_ms"] == 1000
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
    assert sent.to(IMPRESSION) == [("POST", IMPRESSION)]
    site.pages.wait_for_pixels(pub, ad_id("running"), 1)
    assert frame.evaluate("document.hasFocus()") is False


def test_an_ad_in_a_frame_of_a_hidden_page_never_counts(page, site, pub):
    # Visibility still rules in a frame (a frame's document is hidden with its page).
    sent = Requests(page, site.edge_url)
    open_page(page, site, clock=True, template="frame", pub=pub, topic="cooking", hidden=1)
    frame = page.frames[1]
    wait_in_frame(frame, "filled")
    pause_clock(page)
    show(frame, ad_height(frame))
    page.clock.run_for(5000)
    assert frame_events(frame, "viewable") == [] and sent.to(IMPRESSION) == []
    frame.evaluate("window.__setVisibility('visible')")
    page.clock.run_for(1000)
    wait_in_frame(frame, "viewable")
    site.beacons.wait_for("publisher", pub, "viewable_impressions", 1)
