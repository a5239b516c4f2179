"""Catalogue hot reload: every node swaps its demand to the live catalogue without a restart.

``edge catalogue load FILE`` validates the file and stores it as the newest catalogue
version (a bad file stores nothing). A production edge serves the live version: at
start-up, when a node announces a new one (PostgreSQL: within a second), and in any case
by checking the store every ``POLL_SECONDS`` (so SQLite workers, and nodes that missed an
announcement, follow too). ``SIGHUP`` re-reads ``EDGE_CATALOGUE`` (the single-node way).
A live version in the store wins over ``EDGE_CATALOGUE``; a start-up that finds the two
different logs a warning naming both, and a SIGHUP then serves the live version and says
why the file is not re-read.

A swap builds a whole new matcher off the event loop, sharing the loaded model, its
thread, the gazetteer and the safety classifier; ad vectors come from the vector cache when
this catalogue was seen before, and only new ones are embedded. Then ``ctx.matcher`` is
replaced by one assignment: a match already running keeps the matcher it started with
and finishes on the old catalogue; the next one sees the new catalogue. A file that fails
to parse or validate changes nothing (logged). The sandbox always serves its bundled
catalogue and never reloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matcher.catalogue import (
    Catalogue,
    CatalogueError,
    ad_number,
    load_catalogue,
    parse_catalogue,
)

if TYPE_CHECKING:
    from edge.context import Context

log = logging.getLogger("edge.catalogue")
POLL_SECONDS = 3.0
# Retired ads remembered for late AI beacons (~100 bytes each).
MAX_RETIRED = 200_000


class LiveCatalogue:
    """The live catalogue's version this process serves, and the tasks that follow it."""

    def __init__(self) -> None:
        self.version: int | None = None  # of the store's versions; None: from the file
        self.swaps = 0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._hup = False
        self._read_stamp: tuple[int, int, int] | None = None  # see note_file
        # Ads of catalogues this process served before, gone from the live one: AI ad number
        # -> (ad id, campaign id). An AI beacon names its ad by number only, and one fired
        # after its ad left the catalogue is still that ad's (and campaign's) to count.
        self.retired: dict[int, tuple[str, str]] = {}

    def note_file(self, path: Path | None) -> None:
        """Called just before the start-up load reads the catalogue file: the catch-up
        re-read below then happens only if the file changed since. Re-parsing an unchanged
        file is wasted work, and not small: at 100k ads, seconds of parsing and ~300k
        objects built on a serving process (the collector walks them all, the event loop
        and the model thread wait), only to find the catalogue it serves."""
        self._read_stamp = _file_stamp(path)

    async def swap(self, ctx: Context, catalogue: Catalogue, version: int | None) -> bool:
        """Serve ``catalogue`` from now on; False when it is the one already served."""
        async with self._lock:
            current = ctx.matcher
            if current is None:
                return False
            if catalogue.content_hash == current.catalogue.content_hash:
                if version is not None and version != self.version:
                    # Nothing to swap, but the version is served from now on: say so, as
                    # every process does for a version it serves.
                    log.info(
                        "catalogue version %d live: the content already served (%d ads in "
                        "%d campaigns)",
                        version,
                        len(catalogue),
                        len(catalogue.campaigns),
                    )
                self.version = version
                return False
            fresh = await asyncio.to_thread(
                current.with_catalogue, catalogue, ctx.settings.cache_dir
            )
            try:  # ranking on what was learned, before the first request sees it
                await ctx.estimates.refresh(ctx.store, fresh, ctx.clock())
            except Exception as exc:
                log.warning("estimates not rebuilt for the new catalogue: %s", exc)
            # Off the event loop: a number is a hash per ad, 0.2 s at 100k ads.
            retired = await asyncio.to_thread(retire, self.retired, current.catalogue, catalogue)
            self.retired = retired
            ctx.matcher = fresh  # one assignment: the swap is atomic for every reader
            ctx.ad_listing = None
            ctx.page_cache.clear()  # page answers of the old catalogue (edge.delivery.page_cache)
            self.version = version
            self.swaps += 1
            log.info(
                "catalogue %s live: %d ads in %d campaigns",
                f"version {version}" if version is not None else "file",
                len(catalogue),
                len(catalogue.campaigns),
            )
            return True

    async def sync(self, ctx: Context) -> bool:
        """Serve the store's live version if it is not the one served; True when swapped."""
        if not ctx.settings.is_production:
            return False
        live = await ctx.store.live_catalogue()
        if live is None or live[0] == self.version:
            return False
        body = await ctx.store.catalogue_body(live[0])
        if body is None:
            return False
        try:
            catalogue = await asyncio.to_thread(parse_catalogue, body)
        except CatalogueError as exc:  # validated when stored; never serve half of one
            log.error("live catalogue version %d is not valid: %s", live[0], exc)
            self.version = live[0]
            return False
        return await self.swap(ctx, catalogue, live[0])

    async def sync_at_start(self, ctx: Context) -> None:
        """The start-up ``sync``: a live version in the store wins over the file named by
        ``EDGE_CATALOGUE``, and when it replaces a different file's demand, say so: an
        operator who passed ``--catalogue`` would otherwise believe the file serves."""
        path = ctx.settings.catalogue
        served = None  # the content hash of the file's catalogue, when that one serves
        if path is not None and self.version is None and ctx.matcher is not None:
            served = ctx.matcher.catalogue.content_hash
        await self.sync(ctx)
        if served is None or self.version is None or ctx.matcher is None:
            return
        if ctx.matcher.catalogue.content_hash != served:
            log.warning(
                "catalogue: EDGE_CATALOGUE (--catalogue) %s is not served: the database "
                "holds live catalogue version %d (stored by `edge catalogue load`), which "
                "serves instead and always wins over the file. To serve the file, run "
                "`edge catalogue load %s` on this database (every node follows); to keep "
                "version %d, leave EDGE_CATALOGUE unset.",
                path,
                self.version,
                path,
                self.version,
            )

    async def reload(self, ctx: Context, path: Path) -> bool:
        """SIGHUP: re-read the catalogue file, unless the store holds a live version, which
        wins over the file here as at start-up (serving the file until the next poll would
        swap demand twice in three seconds); that version is then served and the signal
        says why the file is not."""
        live = await ctx.store.live_catalogue()
        if live is None:
            return await self.reload_file(ctx, path)
        swapped = await self.sync(ctx)
        if await self._file_is_served(ctx, path):
            log.info(
                "catalogue: SIGHUP: the database's live catalogue version %d is what %s "
                "holds; nothing to reload",
                live[0],
                path,
            )
            return swapped
        log.warning(
            "catalogue: SIGHUP does not reload %s: the database holds live catalogue version "
            "%d (stored by `edge catalogue load`), which wins over the file. Run "
            "`edge catalogue load %s` to serve the file.",
            path,
            live[0],
            path,
        )
        return swapped

    @staticmethod
    async def _file_is_served(ctx: Context, path: Path) -> bool:
        """Whether the catalogue file holds the content served now (a file that cannot be
        read or is not valid does not)."""
        try:
            catalogue = await asyncio.to_thread(load_catalogue, path)
        except CatalogueError:
            return False
        return ctx.matcher is not None and (
            catalogue.content_hash == ctx.matcher.catalogue.content_hash
        )

    async def hangup(self, ctx: Context) -> bool:
        """SIGHUP with no catalogue file named: nothing to re-read, so it says so and looks
        for a new live version in the database now rather than at the next poll."""
        log.warning(
            "catalogue: SIGHUP: no catalogue file to re-read (EDGE_CATALOGUE / --catalogue is "
            "not set); checking the database for a new live version now. `edge catalogue "
            "load FILE` stores and serves one."
        )
        return await self.sync(ctx)

    async def reload_file(self, ctx: Context, path: Path) -> bool:
        """Re-read the catalogue file; a bad file changes nothing."""
        try:
            catalogue = await asyncio.to_thread(load_catalogue, path)
        except CatalogueError as exc:
            log.error("catalogue %s not reloaded, the old one stays: %s", path, exc)
            return False
        return await self.swap(ctx, catalogue, None)

    def sync_soon(self, ctx: Context) -> None:
        self._spawn(self._logged(self.sync(ctx)))

    async def _logged(self, work: Awaitable[bool]) -> None:
        try:
            await work
        except Exception as exc:  # the old catalogue stays; the poll tries again
            log.warning("catalogue not reloaded: %s", exc)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def start(self, ctx: Context) -> None:
        if not ctx.settings.is_production:
            return

        async def poll() -> None:
            while True:
                await asyncio.sleep(POLL_SECONDS)
                await self._logged(self.sync(ctx))

        self._task = asyncio.create_task(poll(), name="edge-catalogue-poll")
        path = ctx.settings.catalogue
        loop = asyncio.get_running_loop()
        # Only the main thread may own signal handlers (a test's app runs elsewhere).
        with contextlib.suppress(RuntimeError, ValueError, NotImplementedError):
            if path is None:
                loop.add_signal_handler(
                    signal.SIGHUP, lambda: self._spawn(self._logged(self.hangup(ctx)))
                )
                self._hup = True
                return
            loop.add_signal_handler(
                signal.SIGHUP, lambda: self._spawn(self._logged(self.reload(ctx, path)))
            )
            self._hup = True
            changed = self._read_stamp is None or _file_stamp(path) != self._read_stamp
            if self.version is None and changed:  # serving the file, not a live version
                # A SIGHUP that came while this process was starting was ignored: catch up
                # with the file as it is now.
                self._spawn(self._logged(self.reload_file(ctx, path)))

    async def stop(self) -> None:
        if self._hup:
            with contextlib.suppress(RuntimeError, ValueError, NotImplementedError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._hup = False
        tasks = [t for t in (self._task, *self._pending) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _file_stamp(path: Path | None) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns): a rewrite or a replacement of the file changes it."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def retire(
    retired: dict[int, tuple[str, str]], old: Catalogue, new: Catalogue
) -> dict[int, tuple[str, str]]:
    """``retired`` (a copy) with the ads of ``old`` that ``new`` no longer has, less those it
    has again, at most ``MAX_RETIRED`` of them: the latest retired are kept."""
    out = dict(retired)
    for p in new.placements:
        out.pop(ad_number(p.ad.id), None)
    gone = {
        ad_number(p.ad.id): (p.ad.id, p.campaign.id)
        for p in old.placements
        if new.placement(p.ad.id) is None
    }
    if len(out) + len(gone) > MAX_RETIRED:
        out = {}
    out.update(list(gone.items())[-MAX_RETIRED:])
    return out
