"""The QA kit as a pytest plugin (registered as ``edge_qa`` in ``pytest11``).

For a publisher's QA team testing their own pages with pytest-playwright:

- ``edge_server`` (session): an edge to test against. By default a real ``edge serve``
  process on a free port (production mode, loopback allowed through the geofence), with
  ``--edge-catalogue`` as its demand, ``--edge-publisher ID=ORIGIN`` registered and
  ``--edge-port`` if your pages embed the tag from a fixed address. With
  ``--edge-url`` it points at an edge that is already running instead (``--edge-db`` names
  that edge's database if the tests may read its beacons).
- ``edge_beacons`` (session): a ``BeaconReader`` on that edge's store: counters per
  publisher and per ad (impressions, viewable impressions, hovers, failures), polled.
- ``tag_monitor`` (per test): a ``TagMonitor`` on pytest-playwright's ``page``, recording
  ``window.edgeTag`` events, CSP violations and page errors.
- ``expect_viewable_once(...)``: "the viewable impression fired once", in the page and, when
  the store is readable, in the edge's billing-grade counters.

docs/tag.md has a worked example.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edge.qa.beacons import BeaconReader
from edge.qa.monitor import TagMonitor
from edge.qa.server import EdgeProcess


@dataclass(frozen=True)
class EdgeServer:
    url: str
    db: Path | None  # None: a remote edge whose store the tests cannot read

    def tag_url(self) -> str:
        return f"{self.url}/dea/tag.js"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("edge-qa", "contextual ad edge QA kit")
    group.addoption("--edge-url", default=None, help="test against this running edge")
    group.addoption("--edge-db", default=None, help="database of the edge at --edge-url")
    group.addoption("--edge-catalogue", default=None, help="demand of the edge the kit starts")
    group.addoption(
        "--edge-port", type=int, default=None, help="port of the edge the kit starts (free one)"
    )
    group.addoption(
        "--edge-publisher",
        action="append",
        default=[],
        metavar="ID=ORIGIN",
        help="register a publisher on the edge the kit starts (repeatable)",
    )


def _publishers(values: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for value in values:
        pub, sep, origin = value.partition("=")
        if not sep or not pub or not origin:
            raise pytest.UsageError(f"--edge-publisher wants ID=ORIGIN, got {value!r}")
        out.setdefault(pub, []).append(origin)
    return out


@pytest.fixture(scope="session")
def edge_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EdgeServer]:
    config = request.config
    url = config.getoption("edge_url")
    if url:
        db = config.getoption("edge_db")
        yield EdgeServer(url.rstrip("/"), Path(db) if db else None)
        return
    db = tmp_path_factory.mktemp("edge-qa") / "edge.db"
    publishers = _publishers(config.getoption("edge_publisher"))
    if publishers:
        # Registered before the edge starts, so its CORS allow-list has them from the start.
        with BeaconReader(db) as store:
            for pub, origins in publishers.items():
                store.register_publisher(pub, origins)
    settings = {"EDGE_ALLOW_PRIVATE_IPS": "1", "EDGE_CACHE_DIR": str(db.parent / "cache")}
    catalogue = config.getoption("edge_catalogue")
    if catalogue:
        settings["EDGE_CATALOGUE"] = str(Path(catalogue).resolve())
    with EdgeProcess(db=db, port=config.getoption("edge_port"), settings=settings) as proc:
        yield EdgeServer(proc.url, db)


@pytest.fixture(scope="session")
def edge_beacons(edge_server: EdgeServer) -> Iterator[BeaconReader]:
    if edge_server.db is None:
        pytest.skip("the edge's store is not readable: pass --edge-db with --edge-url")
    with BeaconReader(edge_server.db) as reader:
        yield reader


@pytest.fixture
def tag_monitor(page: Any) -> TagMonitor:
    return TagMonitor(page)


def expect_viewable_once(
    monitor: TagMonitor,
    slot_id: str,
    *,
    beacons: BeaconReader | None = None,
    publisher_id: str | None = None,
    counted_before: int = 0,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """The slot's ad became viewable exactly once in the page, and (with ``beacons``) the
    edge counted exactly one more viewable impression for ``publisher_id``."""
    event = monitor.wait_for_event("viewable", slot_id, count=1, timeout=timeout)[0]
    if beacons is not None:
        if publisher_id is None:
            raise ValueError("publisher_id is needed to read the edge's counters")
        beacons.wait_for(
            "publisher",
            publisher_id,
            "viewable_impressions",
            counted_before + 1,
            timeout=timeout,
        )
    assert not monitor.page_errors, monitor.page_errors
    return event
