"""The QA kit as a pytest plugin (registered as ``edge_qa`` in ``pytest11``).

For a publisher's QA team testing their own pages with pytest-playwright (install with the
``qa`` extra: ``pip install 'contextual-edge[qa]'``); docs/qa.md has a worked example.

- ``edge_server`` (session): an edge to test against. By default a real ``edge serve``
  process on a free port (production mode, loopback allowed through the geofence), with
  ``--edge-catalogue`` as its demand, ``--edge-publisher ID=ORIGIN`` registered and
  ``--edge-port`` if your pages embed the tag from a fixed address. With ``--edge-url`` it
  points at an edge that is already running instead (staging).
- ``edge_events`` (session): an ``EdgeEvents`` reader of what that edge recorded, over HTTP
  with an Ad Manager key (issued by the kit for the edge it starts; ``EDGE_QA_KEY`` or
  ``--edge-key`` for an edge at ``--edge-url``).
- ``edge_beacons`` (session): a ``BeaconReader`` on that edge's database file, where the
  tests can read it (the edge the kit starts, or ``--edge-db``): counters per publisher
  and per ad.
- ``tag_monitor`` (per test): a ``TagMonitor`` on pytest-playwright's ``page``, recording
  ``window.edgeTag`` events, CSP violations and page errors.
- ``expect_viewable_once(...)``: the ad rendered in one slot became viewable exactly once in
  the page, and the edge recorded exactly that impression, for that slot and that ad.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edge.qa.beacons import BeaconReader, wait_until
from edge.qa.events import EdgeEvents, ImpressionSource
from edge.qa.monitor import TagMonitor
from edge.qa.server import EdgeProcess

KEY_VARIABLE = "EDGE_QA_KEY"


@dataclass(frozen=True)
class EdgeServer:
    url: str
    db: Path | None  # None: a remote edge whose store the tests cannot read
    key: str | None = None  # an Ad Manager key of this edge (reads its events over HTTP)

    def __repr__(self) -> str:  # never the key
        return f"EdgeServer(url={self.url!r}, db={self.db!r})"

    def tag_url(self) -> str:
        return f"{self.url}/dea/tag.js"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("edge-qa", "contextual ad edge QA kit")
    group.addoption("--edge-url", default=None, help="test against this running edge")
    group.addoption("--edge-db", default=None, help="database of the edge at --edge-url")
    group.addoption(
        "--edge-key",
        default=None,
        help=f"Ad Manager key of the edge at --edge-url (default: ${KEY_VARIABLE})",
    )
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
    group.addoption(
        "--edge-setting",
        action="append",
        default=[],
        metavar="EDGE_NAME=VALUE",
        help="a setting of the edge the kit starts, as in its environment (repeatable), "
        "e.g. EDGE_EXPLORE=0",
    )


def _publishers(values: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for value in values:
        pub, sep, origin = value.partition("=")
        if not sep or not pub or not origin:
            raise pytest.UsageError(f"--edge-publisher wants ID=ORIGIN, got {value!r}")
        out.setdefault(pub, []).append(origin)
    return out


def _settings(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep or not name.startswith("EDGE_") or len(name) == len("EDGE_"):
            raise pytest.UsageError(f"--edge-setting wants EDGE_NAME=VALUE, got {value!r}")
        out[name] = setting
    return out


@pytest.fixture(scope="session")
def edge_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EdgeServer]:
    config = request.config
    url = config.getoption("edge_url")
    if url:
        db = config.getoption("edge_db")
        key = config.getoption("edge_key") or os.environ.get(KEY_VARIABLE) or None
        yield EdgeServer(url.rstrip("/"), Path(db) if db else None, key)
        return
    db = tmp_path_factory.mktemp("edge-qa") / "edge.db"
    publishers = _publishers(config.getoption("edge_publisher"))
    chosen = _settings(config.getoption("edge_setting"))
    # Registered before the edge starts, so its CORS allow-list has them from the start;
    # the key lets the tests read this edge's events over HTTP, as they would a staging one.
    with BeaconReader(db) as store:
        for pub, origins in publishers.items():
            store.register_publisher(pub, origins)
        key = store.issue_key("production", "ad-manager", "qa kit")
    settings = {"EDGE_ALLOW_PRIVATE_IPS": "1", "EDGE_CACHE_DIR": str(db.parent / "cache")}
    catalogue = config.getoption("edge_catalogue")
    if catalogue:
        settings["EDGE_CATALOGUE"] = str(Path(catalogue).resolve())
    settings.update(chosen)  # last: the tester's word wins over the kit's defaults
    with EdgeProcess(db=db, port=config.getoption("edge_port"), settings=settings) as proc:
        yield EdgeServer(proc.url, db, key)


@pytest.fixture(scope="session")
def edge_events(edge_server: EdgeServer) -> EdgeEvents:
    if edge_server.key is None:
        pytest.skip(f"no Ad Manager key for {edge_server.url}: set {KEY_VARIABLE} or --edge-key")
    return EdgeEvents(edge_server.url, edge_server.key)


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
    beacons: ImpressionSource | None = None,
    ad_id: str | None = None,
    publisher_id: str | None = None,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """The ad rendered in ``slot_id`` (``ad_id``; default: the ad the slot was filled with)
    became viewable exactly once in this page, and, with ``beacons`` (``edge_events`` or
    ``edge_beacons``), the edge recorded exactly that impression, for this slot and this ad
    (and ``publisher_id`` when given), as a valid impression. Only this slot of this page
    view counts: other ads on the page and other tests change nothing. Returns the
    ``viewable`` event's detail, with the edge's record under ``"recorded"``."""
    if ad_id is None:
        filled = wait_until(
            lambda: monitor.events("filled", slot_id),
            bool,
            lambda _found: False,
            f"slot {slot_id!r} to be filled",
            timeout,
        )
        ad_id = filled[-1]["ad_id"]
    ad = ad_id
    viewable = wait_until(
        lambda: [e for e in monitor.events("viewable", slot_id) if e.get("ad_id") == ad],
        lambda found: len(found) == 1,
        lambda found: len(found) > 1,
        f"1 'viewable' event(s) for slot {slot_id!r} showing ad {ad!r}",
        timeout,
    )
    event: dict[str, Any] = dict(viewable[0])
    if beacons is not None:
        iid = event["impression_id"]
        source = beacons
        found = wait_until(
            lambda: source.impressions([iid]).get(iid),
            lambda seen: seen is not None,
            lambda _seen: False,
            f"the edge to record impression {iid} of slot {slot_id!r}",
            timeout,
        )
        assert found is not None
        record: dict[str, Any] = found
        got = (record.get("slot_id"), record.get("ad_id"))
        assert got == (slot_id, ad), f"the edge recorded {iid} for {got}, not {(slot_id, ad)}"
        reason = record.get("invalid_reason")
        assert reason is None, f"the edge stored {iid} as invalid traffic ({reason}), uncounted"
        if publisher_id is not None:
            assert record.get("publisher_id") == publisher_id, record
        event["recorded"] = record
    assert not monitor.page_errors, monitor.page_errors
    return event
