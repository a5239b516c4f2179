"""Watch the tag in a Playwright page: its ``window.edgeTag`` events and CSP violations.

``TagMonitor(page)`` must be created before the page navigates: it adds an init script that
creates ``window.edgeTag`` as an EventTarget before any page script runs (the tag adopts an
existing one, docs/tag.md), records every tag event, every ``securitypolicyviolation`` and
every uncaught page error, so a test can assert on them without sleeping.
"""

from __future__ import annotations

from typing import Any

from edge.qa.beacons import wait_until

TAG_EVENTS = ("filled", "empty", "viewable", "error")

_INIT_SCRIPT = """
(() => {
  const tag = (window.edgeTag = window.edgeTag || new EventTarget());
  const seen = (window.__edgeQA = { events: [], violations: [] });
  for (const type of %s) {
    tag.addEventListener(type, (e) => seen.events.push({ type, ...(e.detail || {}) }));
  }
  document.addEventListener("securitypolicyviolation", (e) =>
    seen.violations.push({ directive: e.effectiveDirective, blocked: e.blockedURI }));
})();
"""


class TagMonitor:
    def __init__(self, page: Any) -> None:
        self.page = page
        self.page_errors: list[str] = []
        page.add_init_script(_INIT_SCRIPT % list(TAG_EVENTS))
        page.on("pageerror", lambda err: self.page_errors.append(str(err)))

    def events(self, type: str | None = None, slot_id: str | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.page.evaluate(
            "() => (window.__edgeQA || { events: [] }).events"
        )
        return [
            e
            for e in found
            if (type is None or e["type"] == type)
            and (slot_id is None or e.get("slot_id") == slot_id)
        ]

    def violations(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.page.evaluate(
            "() => (window.__edgeQA || { violations: [] }).violations"
        )
        return found

    def wait_for_event(
        self, type: str, slot_id: str | None = None, *, count: int = 1, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Poll until ``count`` events of ``type`` (for ``slot_id``) have happened, no more."""
        return wait_until(
            lambda: self.events(type, slot_id),
            lambda found: len(found) == count,
            lambda found: len(found) > count,
            f"{count} {type!r} event(s) for slot {slot_id!r}",
            timeout,
        )

    def slot_state(self, slot_id: str) -> str | None:
        """The slot's ``data-edge-state``: loading, filled, empty, error or viewable."""
        state: str | None = self.page.evaluate(
            '(id) => document.querySelector(`[data-ad-slot="${CSS.escape(id)}"]`)'
            "?.getAttribute('data-edge-state') ?? null",
            slot_id,
        )
        return state

    def settle(self, slot_id: str) -> None:
        """Wait until the browser has told the tag where the slot's ad now is (after a scroll
        or a layout change), before a test moves a paused ``page.clock``: the tag hears of
        it at the browser's next rendering, which a clock run at once outruns. Observers are
        told in the order they were made, so the tag's has been told when this one is."""
        self.page.evaluate(
            """(id) => new Promise((done) => {
              const io = new IntersectionObserver(() => { io.disconnect(); done(); });
              io.observe(document.querySelector(`[data-ad-slot="${CSS.escape(id)}"]`));
            })""",
            slot_id,
        )
