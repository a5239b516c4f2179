"""The e2e harness: Debian's Chromium, one real edge and one page server per session.

Both ports are chosen before either server starts (the pages need the edge's URL, the edge
needs the pages' origin registered). Pages live on 127.0.0.2 and the edge on 127.0.0.1:
different origins, so every POST the tag makes is preflighted, as on a publisher's site.
The edge runs in production mode (geofence on, loopback allowed) on its own small
catalogue; each test gets its own registered publisher id, so counts never mix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from e2e.catalogue import catalogue
from e2e.pageserver import PageServer
from edge.qa import BeaconReader, EdgeProcess, free_port

CHROMIUM = "/usr/lib/chromium/chromium"
PAGE_HOST = "127.0.0.2"
PUBLISHER_POOL = [f"e2e-{i:02d}" for i in range(64)]
READER_UA = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/156.0.0.0 Safari/537.36"
)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,  # the real binary, not Debian's sh wrapper
        "args": [
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            # Headless Chromium names itself "HeadlessChrome", which the edge's bot list
            # (rightly) counts as invalid traffic: these pages stand for real readers. The
            # flag, not a context's user_agent, also covers sendBeacon from a closing page.
            f"--user-agent={READER_UA}",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 720}}


@dataclass
class Site:
    edge_url: str
    pages: PageServer
    beacons: BeaconReader
    edge: EdgeProcess


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("e2e")
    edge_port, page_port = free_port("127.0.0.1"), free_port(PAGE_HOST)
    edge_url = f"http://127.0.0.1:{edge_port}"
    pages = PageServer(PAGE_HOST, page_port, edge_url)
    demand = tmp / "catalogue.json"
    demand.write_text(json.dumps(catalogue(pages.origin)))
    db = tmp / "edge.db"
    with BeaconReader(db) as store:  # registered before the edge starts: CORS knows them
        for pub in PUBLISHER_POOL:
            store.register_publisher(pub, [pages.origin])
        store.register_publisher("demo", [edge_url])  # the edge's own demo page
    edge = EdgeProcess(
        db=db,
        port=edge_port,
        settings={
            "EDGE_ALLOW_PRIVATE_IPS": "1",
            "EDGE_CATALOGUE": str(demand),
            "EDGE_CACHE_DIR": str(tmp / "cache"),
        },
    )
    pages.start()
    try:
        with edge, BeaconReader(db) as beacons:
            yield Site(edge_url, pages, beacons, edge)
    finally:
        pages.stop()


_pool = iter(PUBLISHER_POOL)


@pytest.fixture
def pub() -> str:
    """A publisher id no other test uses (its counters start at zero)."""
    return next(_pool)


@pytest.fixture(autouse=True)
def _edge_stays_up(request):
    """If the edge died during a test, say so with its output (not just a timeout)."""
    yield
    site = request.node.funcargs.get("site")
    if site is not None and site.edge.proc is not None and site.edge.proc.poll() is not None:
        pytest.fail(
            f"the edge exited with {site.edge.proc.returncode}:\n{site.edge.output()[-4000:]}"
        )
