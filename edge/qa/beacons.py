"""Read what an edge recorded (impressions, hovers, failures) from its store, for tests.

The reader opens the edge's database through the ``Store`` interface (never raw SQL) on a
private thread with its own event loop, so synchronous tests (pytest-playwright's sync API)
can poll it while the edge process keeps writing. Impression counters are committed in the
same transaction as the impression itself, so a count seen here is a durable, billed event.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from edge.keys import Keyring
from edge.settings import Settings
from edge.store import open_store

T = TypeVar("T")

POLL_SECONDS = 0.05


class BeaconTimeout(AssertionError):
    """The expected count did not show up in time."""


class BeaconReader:
    """``reader.count("publisher", "pub-1", "viewable_impressions")``, ``wait_for(...)``."""

    def __init__(self, db: Path | str) -> None:
        self.db: Path | str = db if isinstance(db, str) and "://" in db else Path(db)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._store = open_store(Settings(db=self.db))
        self._run(self._store.open())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def counters(self, scope: str, scope_id: str) -> dict[str, float]:
        """Every counter of one ad, publisher or campaign (``edge report``'s columns)."""
        rows = self._run(self._store.counts([scope]))
        return {name: amount for _s, sid, name, amount in rows if sid == scope_id}

    def count(self, scope: str, scope_id: str, counter: str) -> float:
        return self.counters(scope, scope_id).get(counter, 0)

    def viewable_impressions(self, publisher_id: str) -> int:
        return int(self.count("publisher", publisher_id, "viewable_impressions"))

    def wait_for(
        self,
        scope: str,
        scope_id: str,
        counter: str,
        expected: float,
        *,
        timeout: float = 10.0,
    ) -> float:
        """Poll until the counter equals ``expected``; fail fast if it goes past it."""
        return wait_until(
            lambda: self.count(scope, scope_id, counter),
            lambda value: value == expected,
            lambda value: value > expected,
            f"{scope} {scope_id} {counter} == {expected}",
            timeout,
        )

    def impressions(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """What the edge recorded for the tag's impression ids (as ``EdgeEvents`` reads it
        over HTTP): ``{impression_id: record}``, ids not recorded absent."""
        found = self._run(self._store.impressions_by_tag_id(list(dict.fromkeys(ids))))
        return {iid: {**record, "impression_id": iid} for iid, record in found.items()}

    def issue_key(self, env: str, product: str, name: str = "qa kit") -> str:
        """A new key of this edge (``edge keys issue``); printed nowhere, stored hashed."""
        keyring = Keyring(self._store, time.time, 0)
        key, _record = self._run(keyring.issue(env, product, name))
        return key

    def register_publisher(self, publisher_id: str, origins: list[str]) -> None:
        """Let pages on ``origins`` embed the tag as ``publisher_id`` (``edge publishers add``).
        A running edge picks it up within its registry refresh (a few seconds)."""
        self._run(self._store.upsert_publisher(publisher_id, origins, time.time()))

    def close(self) -> None:
        try:
            self._run(self._store.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def __enter__(self) -> BeaconReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(
    read: Callable[[], T],
    done: Callable[[T], bool],
    overshot: Callable[[T], bool],
    what: str,
    timeout: float,
) -> T:
    """Poll ``read()`` until ``done``; raise at once when ``overshot`` or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if overshot(value):
            raise BeaconTimeout(f"expected {what}, got {value} (past it)")
        if time.monotonic() > deadline:
            raise BeaconTimeout(f"expected {what} within {timeout}s, got {value}")
        time.sleep(POLL_SECONDS)
