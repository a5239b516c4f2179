"""The QA kit as a publisher's QA team uses it: a separate pytest run with only the plugin's
fixtures, against their own page server. One inner test must pass and one must fail."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.catalogue import catalogue
from edge.qa import free_port

REPO = Path(__file__).resolve().parent.parent

INNER_CONFTEST = """
import json
import os
import pytest
from e2e.conftest import browser_type_launch_args  # noqa: F401 (Debian's Chromium)
from e2e.pageserver import PageServer


@pytest.fixture(scope="session")
def pages(edge_server):
    server = PageServer("127.0.0.2", int(os.environ["QA_PAGE_PORT"]), edge_server.url).start()
    yield server
    server.stop()
"""

INNER_TESTS = """
import pytest
from edge.qa import BeaconTimeout
from edge.qa.plugin import expect_viewable_once


def test_viewable_once(page, pages, tag_monitor, edge_beacons):
    page.goto(pages.url(pub="qa-site", topic="running"))
    tag_monitor.wait_for_event("filled", "main-slot")
    page.locator(".edge-ad").scroll_into_view_if_needed()
    expect_viewable_once(tag_monitor, "main-slot", beacons=edge_beacons, publisher_id="qa-site")
    assert tag_monitor.violations() == [] and tag_monitor.page_errors == []


def test_a_paused_clock_counts_the_second_after_settle(page, pages, tag_monitor):
    import datetime as dt
    page.clock.install()
    page.goto(pages.url(pub="qa-site", topic="running"))
    tag_monitor.wait_for_event("filled", "main-slot")
    page.clock.pause_at(dt.datetime.now() + dt.timedelta(minutes=10))
    page.locator("[data-ad-slot=main-slot]").scroll_into_view_if_needed()
    tag_monitor.settle("main-slot")
    page.clock.run_for(999)
    assert tag_monitor.events("viewable", "main-slot") == []
    page.clock.run_for(1)
    tag_monitor.wait_for_event("viewable", "main-slot", timeout=5)


def test_the_edges_settings_are_the_testers(edge_server):
    # --edge-setting=EDGE_MAX_BODY_BYTES=1024 below: a 1,100-byte body is refused.
    import urllib.error, urllib.request
    request = urllib.request.Request(
        edge_server.url + "/dea/url/keywords", data=b"{" + b" " * 1098 + b"}", method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 413


def test_an_ad_never_seen_is_not_viewable(page, pages, tag_monitor, edge_beacons):
    page.goto(pages.url(pub="qa-site", topic="cooking"))
    tag_monitor.wait_for_event("filled", "main-slot")
    expect_viewable_once(tag_monitor, "main-slot", timeout=2)  # below the fold: must fail
"""


@pytest.mark.slow
def test_plugin_fixtures_start_an_edge_read_beacons_and_catch_a_missing_impression(tmp_path):
    port = free_port("127.0.0.2")
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_publisher_page.py").write_text(INNER_TESTS)
    demand = tmp_path / "ads.json"
    demand.write_text(json.dumps(catalogue(f"http://127.0.0.2:{port}")))
    env = {**os.environ, "QA_PAGE_PORT": str(port), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
         f"--edge-publisher=qa-site=http://127.0.0.2:{port}", f"--edge-catalogue={demand}",
         "--edge-setting=EDGE_MAX_BODY_BYTES=1024",
         "-W", "ignore::pytest.PytestRemovedIn10Warning", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert "1 failed, 3 passed" in out, out
    assert "expected 1 'viewable' event(s) for slot 'main-slot'" in out, out
