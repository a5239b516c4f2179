"""Registered publishers, cached in memory for the hot path (CORS checks, match routes).

The cache is refreshed from the store every ``REFRESH_SECONDS`` by a background task, so
``edge publishers add`` run from the command line (another process) takes effect on a
running edge within that time, without a restart and without a store read per request.
On PostgreSQL the command also announces the change and every node refreshes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import lru_cache

from edge.origins import normalise_origin
from edge.store import Publisher, Store

log = logging.getLogger("edge.delivery.publishers")
REFRESH_SECONDS = 3.0


class PublisherRegistry:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._by_id: dict[str, Publisher] = {}
        self._origins: frozenset[str] = frozenset()
        self._task: asyncio.Task[None] | None = None
        self._pending: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        pubs = await self._store.list_publishers()
        self._by_id = {p.publisher_id: p for p in pubs}
        self._origins = frozenset(o for p in pubs for o in p.origins)

    def refresh_soon(self) -> None:
        """Refresh now in the background (another node announced a change)."""
        if self._pending is None or self._pending.done():
            self._pending = asyncio.create_task(self._refresh_logged(), name="edge-publishers-now")

    async def _refresh_logged(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # keep serving the last good list; the loop retries
            log.warning("could not refresh publishers: %s", exc)

    def get(self, publisher_id: str) -> Publisher | None:
        return self._by_id.get(publisher_id)

    def origin_allowed(self, origin: str) -> bool:
        """Is ``origin`` (an ``Origin`` header) one of any registered publisher's origins?"""
        return self.registered_origin(origin) is not None

    def registered_origin(self, origin: str) -> str | None:
        """The registered (canonical) form of ``origin`` when some publisher has it."""
        origins = self._origins
        if origin in origins:
            return origin
        canonical = _canonical(origin)
        return canonical if canonical in origins else None

    def publisher_allows(self, publisher_id: str, origin: str) -> bool:
        pub = self._by_id.get(publisher_id)
        return pub is not None and (origin in pub.origins or _canonical(origin) in pub.origins)

    async def start(self) -> None:
        await self.refresh()

        async def loop() -> None:
            while True:
                await asyncio.sleep(REFRESH_SECONDS)
                try:
                    await self.refresh()
                except Exception as exc:  # keep serving the last good list
                    log.warning("could not refresh publishers: %s", exc)

        self._task = asyncio.create_task(loop(), name="edge-publishers-refresh")

    async def stop(self) -> None:
        for task in (self._task, self._pending):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._pending = None


@lru_cache(maxsize=1024)  # a pure function of the header; the same few origins repeat
def _canonical(origin: str) -> str | None:
    # Browsers already send the canonical form; normalising tolerates hand-made clients.
    # "null" (sandboxed iframes, file:) and anything unparsable is never an allowed origin.
    try:
        return normalise_origin(origin)
    except ValueError:
        return None
