"""The edge's own demo page (tag/demo): its event log stays in view while the reader scrolls,
and each slot shows when it was filled and when its ad became viewable."""

from edge.qa import TagMonitor

IN_VIEW = """() => {
  const r = document.getElementById("tag-events").getBoundingClientRect();
  return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;
}"""
NEWEST_SHOWN = """() => {
  const list = document.getElementById("tag-events");
  return list.scrollTop + list.clientHeight >= list.scrollHeight - 1;
}"""
LABEL = """(id) => getComputedStyle(
  document.querySelector(`[data-ad-slot="${id}"]`), "::before").content"""


def test_demo_page_marks_viewable_slots_and_keeps_its_log_in_view(page, site):
    monitor = TagMonitor(page)
    page.goto(f"{site.edge_url}/demo")
    monitor.wait_for_event("viewable", "story-inline")
    label = page.evaluate(LABEL, "story-inline")
    assert label.startswith('"viewable at ') and "impression counted" in label, label

    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    page.click("#add-slot")  # a post with a slot, added at the bottom of the page
    monitor.wait_for_event("filled", "demo-late-1-ad")
    assert page.evaluate(IN_VIEW), "the event log scrolled out of view"
    page.locator("[data-ad-slot=demo-late-1-ad]").scroll_into_view_if_needed()
    late = monitor.wait_for_event("viewable", "demo-late-1-ad")[0]
    assert page.evaluate(LABEL, "demo-late-1-ad").startswith('"viewable at ')
    assert page.evaluate(IN_VIEW) and page.evaluate(NEWEST_SHOWN)
    newest = page.locator("#tag-events li").last.inner_text()
    assert newest.endswith(f"viewable demo-late-1-ad {late['ad_id']}"), newest
    # (The demo page's CSP allows no image host of this test catalogue's pixels: only
    # img-src reports are expected.)
    assert {v["directive"] for v in monitor.violations()} <= {"img-src"}
    assert monitor.page_errors == []
