"""What the e2e tests do to a page: open it, put an exact share of the ad in view, let the
IntersectionObserver deliver, and drive the page's clock."""

from __future__ import annotations

import datetime as dt
import time

from edge.qa import TagMonitor

T0 = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
AD = ".edge-ad"


def open_page(page, site, *, clock: bool = False, template: str = "article", **knobs) -> TagMonitor:
    """Open a test page (``article``, or ``frame``: the article in an iframe) with its
    knobs; with ``clock`` the page's timers are Playwright's to drive (paused once the slot
    is filled, before any ad is in view)."""
    monitor = TagMonitor(page)
    if clock:
        page.clock.install(time=T0)
    page.goto(site.pages.url(template, **knobs))
    return monitor


def pause_clock(page) -> None:
    page.clock.pause_at(T0 + dt.timedelta(minutes=10))


def show(page, visible_px: float, selector: str = AD) -> None:
    """Scroll so that exactly ``visible_px`` of the element's height is in the viewport
    (entering from the bottom edge); 0 puts it just out of view."""
    page.evaluate(
        """([selector, px]) => {
          const box = document.querySelector(selector).getBoundingClientRect();
          const top = box.top + window.scrollY;
          const bottom = top - window.innerHeight;
          window.scrollTo(0, px > 0 ? bottom + px : bottom - 50);
        }""",
        [selector, visible_px],
    )
    settle(page, selector)


def settle(page, selector: str = AD) -> None:
    """Wait for the next IntersectionObserver delivery on the element: observers are told in
    creation order within one task, so the tag's has been told by the time ours is."""
    page.evaluate(
        """(selector) => new Promise((done) => {
          const io = new IntersectionObserver(() => { io.disconnect(); done(); });
          io.observe(document.querySelector(selector));
        })""",
        selector,
    )


def ad_height(page, selector: str = AD) -> float:
    return page.evaluate(
        "(s) => document.querySelector(s).getBoundingClientRect().height", selector
    )


def advance_until(page, check, *, step_ms: int = 250, timeout: float = 10.0) -> None:
    """Move the page's clock in steps until ``check()`` holds (for work that waits on both
    the network and a timer, such as a resend)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        page.clock.run_for(step_ms)


def round_trip(page) -> None:
    """One network round trip from the page: answers that arrived before it have been
    handed to the page's scripts by the time it returns."""
    page.evaluate("() => fetch('/static/page.css').then((r) => r.text()).then(() => null)")


class Requests:
    """Requests the page made to the edge's beacon routes (fetch or sendBeacon)."""

    def __init__(self, page, edge_url: str) -> None:
        self.seen: list[tuple[str, str]] = []
        page.on(
            "request",
            lambda r: (
                r.url.startswith(edge_url) and self.seen.append((r.method, r.url[len(edge_url) :]))
            ),
        )

    def to(self, path: str) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.seen if p == path and m != "OPTIONS"]
