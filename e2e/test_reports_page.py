"""The /reports operator page in Chromium: signed in through its form, drawn under its strict
CSP without a violation, and a screenshot that shows charts (not a pixel diff: its size,
that it is not blank, and each chart's line colours)."""

from __future__ import annotations

import asyncio
import io
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from edge.counters import utc_day
from edge.settings import Settings
from edge.store import open_store

# The series colours of edge/reports/reports.css (.series-0 ... .series-7).
SERIES_RGB = [
    (0x25, 0x63, 0xEB), (0xDC, 0x26, 0x26), (0x05, 0x96, 0x69), (0xD9, 0x77, 0x06),
    (0x7C, 0x3A, 0xED), (0x08, 0x91, 0xB2), (0xBE, 0x18, 0x5D), (0x4B, 0x55, 0x63),
]  # fmt: skip
# Campaign ids of this test alone (other e2e tests fill the catalogue's campaigns' buckets
# today); the page lists any campaign that has buckets, in the catalogue or not.
CAMPAIGNS = ["cmp-reports-e2e-a", "cmp-reports-e2e-b"]
POINTS_OF = """(cid) => [...document.querySelectorAll('#SECTION circle title')]
  .filter((t) => t.textContent.startsWith(cid + ', ')).length"""
WATCH_VIOLATIONS = """
window.__reportsQA = { violations: [] };
document.addEventListener('securitypolicyviolation', (e) => {
  window.__reportsQA.violations.push({ directive: e.violatedDirective, blocked: e.blockedURI });
});
"""


def _seed(db, campaigns: list[str]) -> None:
    """30 days of buckets for two campaigns, with rates that move from day to day."""
    now = time.time()
    rows = []
    for n in range(30):
        day = utc_day(now - n * 86_400)
        for k, cid in enumerate(campaigns):
            matches = 200 + 10 * n
            impressions = matches * (60 + (n * 7 + 20 * k) % 35) // 100
            rows += [
                (day, "campaign", cid, "matches", matches),
                (day, "campaign", cid, "impressions", impressions),
                (
                    day,
                    "campaign",
                    cid,
                    "viewable_impressions",
                    impressions * (50 + (n + 9 * k) % 40) // 100,
                ),
                (day, "campaign", cid, "billable_usd", impressions * 0.004),
                ("campaign", cid, "billable_usd", impressions * 0.004),  # the total, beside
            ]

    async def work() -> None:
        store = open_store(Settings(db=db))
        await store.open()
        try:
            await store.add_counts(rows)
        finally:
            await store.close()

    # Playwright's sync API runs an event loop in this thread: the store gets its own.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, work()).result()


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def _has_colour(png: bytes, rgb: tuple[int, int, int], tolerance: int = 24) -> int:
    """How many pixels are within ``tolerance`` of ``rgb`` on every channel."""
    close = np.abs(_pixels(png) - np.array(rgb, dtype=np.int16)) <= tolerance
    return int(close.all(axis=-1).sum())


def test_reports_page_signs_in_draws_its_charts_and_breaks_no_csp_rule(page, site, tmp_path):
    campaigns = CAMPAIGNS
    _seed(site.beacons.db, campaigns)
    key = site.beacons.issue_key("production", "ad-manager", "reports e2e")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    refused: list[tuple[int, str]] = []
    page.on("response", lambda r: refused.append((r.status, r.url)) if r.status >= 400 else None)
    page.add_init_script(WATCH_VIOLATIONS)

    first = page.goto(f"{site.edge_url}/reports")
    assert first is not None and first.status == 401  # no session yet: the sign-in form
    page.fill("#key", key)
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert page.url == f"{site.edge_url}/reports", page.content()[:600]
    print(f"reports page screenshots: {tmp_path}")
    page.wait_for_selector("#delivery svg")
    # The session cookie is out of any script's reach.
    assert "edge_reports" not in page.evaluate("() => document.cookie")

    stylesheet = page.evaluate(
        "() => getComputedStyle(document.querySelector('.chart .line')).fill"
    )
    assert stylesheet == "none"  # the same-origin stylesheet applied (no inline style)
    for section in ("#delivery", "#viewability"):
        assert page.locator(f"{section} polyline").count() >= 2, section  # a line each
        for cid in campaigns:  # a point for each of the 30 days
            assert page.evaluate(POINTS_OF.replace("SECTION", section[1:]), cid) == 30
    assert page.locator("#pacing figure").count() >= 2
    for cid in campaigns:
        assert page.locator(f'tr[data-campaign="{cid}"]').count() == 30

    shot = tmp_path / "reports.png"
    png = page.screenshot(path=str(shot), full_page=True)
    image = Image.open(io.BytesIO(png))
    assert image.width == 1280 and image.height > 1200  # charts and the table, not a stub
    flat = _pixels(png).reshape(-1, 3)
    assert len(np.unique(flat, axis=0)) > 50  # not blank, not one flat colour
    assert (flat.sum(axis=1) < 600).mean() > 0.02  # and ink on it: lines, text
    for section in ("#delivery", "#viewability"):
        chart = page.locator(f"{section} svg").screenshot(path=str(tmp_path / f"{section[1:]}.png"))
        box = Image.open(io.BytesIO(chart))
        assert box.width > 600 and box.height > 150, section
        drawn = [rgb for rgb in SERIES_RGB if _has_colour(chart, rgb) > 100]
        assert len(drawn) >= 2, (section, drawn)  # lines in at least two series colours

    violations = page.evaluate("() => window.__reportsQA.violations")
    assert violations == []
    assert not [e for e in errors if "Content Security Policy" in e or "Refused" in e], errors
    # The only refusals: the page before signing in, and the browser's own favicon probe
    # (which Chromium fetches outside the page, so only its console line is seen).
    assert refused == [(401, f"{site.edge_url}/reports")]
    expected = ("status of 401 (Unauthorized)", "status of 404 (Not Found)")
    assert all(e.startswith("Failed to load resource") and e.endswith(expected) for e in errors)
    assert sum(e.endswith(expected[0]) for e in errors) == 1, errors
    assert failed == []
