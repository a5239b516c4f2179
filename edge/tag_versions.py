"""Every tag version this edge has built, kept for pages that pinned one.

A page pins ``/dea/tag.<version>.js`` with its ``integrity=`` hash; an upgraded edge builds
a new version, so the old bytes must outlive the process that built them. At start-up the
context stores its build (``record``); the versioned route serves the current build from
memory and an earlier one from the store, for ``EDGE_TAG_RETENTION_DAYS`` after the version
that replaced it was first built (the retention clock starts when a version stops being
the newest, so a pin made the day before an upgrade gets the whole retention time). The
version this process runs never expires. The rule lives here; the store only keeps bytes.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

from edge.errors import Gone, NotFound
from edge.store import Store
from tag import TagBuild

DAY_SECONDS = 86_400
LISTING_SECONDS = 30.0  # another node's newer build shows here within this long
KEPT_BUILDS = 16  # earlier builds held precompressed in memory
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.\-]{0,63}")


@dataclass(frozen=True, slots=True)
class TagVersion:
    version: str
    integrity: str
    built_at: float
    expires_at: float | None  # None: the running version, or the newest one

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class TagVersions:
    def __init__(self, current: TagBuild, retention_days: int) -> None:
        self.current = current
        self.retention = retention_days * DAY_SECONDS
        self._listing: list[TagVersion] | None = None
        self._listed_at = 0.0
        self._builds: OrderedDict[str, TagBuild] = OrderedDict()
        self._lock = asyncio.Lock()

    async def record(self, store: Store, now: float) -> None:
        """Store the running build (once per version: a restart keeps the first time)."""
        build = self.current
        await store.put_tag_version(build.version, build.js, build.sri, now)
        self._listing = None

    async def listing(self, store: Store, now: float) -> list[TagVersion]:
        """Every stored version with its expiry, newest first, expired ones included."""
        if self._listing is None or time.monotonic() - self._listed_at > LISTING_SECONDS:
            rows = await store.tag_versions()
            out = []
            for i, row in enumerate(rows):
                successor = rows[i + 1].built_at if i + 1 < len(rows) else None
                running = row.version == self.current.version
                expires = None if running or successor is None else successor + self.retention
                out.append(TagVersion(row.version, row.integrity, row.built_at, expires))
            self._listing, self._listed_at = out[::-1], time.monotonic()
        return self._listing

    async def build(self, store: Store, version: str, now: float) -> TagBuild:
        """The build to serve for a pinned version; NotFound or Gone (expired)."""
        if version == self.current.version:
            return self.current
        known = _VERSION.fullmatch(version) is not None
        entry = next((v for v in await self.listing(store, now) if v.version == version), None)
        if not known or entry is None:
            raise NotFound(
                f"this edge never built tag version {version!r}; /dea/tag.json lists the "
                "versions it serves",
                field="version",
            )
        if entry.expired(now):
            raise Gone(
                f"tag version {version} expired on {_day(entry.expires_at)}: pin a current "
                "version from /dea/tag.json",
                field="version",
                code="tag_version_expired",
            )
        async with self._lock:  # one load and compression per version, not per request
            build = self._builds.get(version)
            if build is None:
                body = await store.tag_version_body(version)
                if body is None:
                    raise NotFound(f"tag version {version!r} is not stored", field="version")
                # brotli at quality 11 takes milliseconds: off the event loop.
                build = await asyncio.to_thread(TagBuild.of, version, body)
                self._builds[version] = build
                while len(self._builds) > KEPT_BUILDS:
                    self._builds.popitem(last=False)
            self._builds.move_to_end(version)
            return build


def _day(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch or 0))
