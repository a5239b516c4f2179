"""Matcher state behind the store: thread-scoped disables, per-thread frequency, no-match windows.

``MatcherStateStore`` is the backend-neutral interface (part of ``Store``);
``SQLiteMatcherState`` implements it on the SQLite backend's ``read``/``write`` primitives.
Its tables come from ``migrations/0003_matcher_state.sql``. The values are the matcher's own
types (``matcher.state``); ``edge.matching`` adapts this interface to the matcher's
``MatchState`` protocol.
"""

from __future__ import annotations

import abc
import sqlite3
from typing import Any

import orjson

from edge.store.primitives import SQLitePrimitives
from matcher.state import FREQUENCY_WINDOW_SECONDS, Backoff, ThreadState

DisablePair = tuple[str, str, "dict[str, Any] | None"]  # (post/thread id, ad id, meta_data)


class MatcherStateStore(abc.ABC):
    """Suppressions, frequency and backoff state the matcher reads and writes."""

    @abc.abstractmethod
    async def disable_ads(self, pairs: list[DisablePair], at: float) -> None:
        """Record thread-scoped disables; a pair already disabled is left as it is."""

    @abc.abstractmethod
    async def load_matcher_state(
        self,
        thread_id: str | None,
        post_id: str | None,
        now: float,
        unit_id: str | None = None,
        also_disabled_in: str | None = None,
    ) -> ThreadState:
        """Disabled ads and recent serves of the thread (and those of ``unit_id`` in it),
        and the post's no-match window. With ``thread_id``, the ads disabled in the thread
        ``also_disabled_in`` are in ``disabled`` too."""

    @abc.abstractmethod
    async def record_serves(
        self, thread_id: str, unit_id: str, ad_ids: list[str], at: float
    ) -> None:
        """Record that this unit (post, AI turn) of the thread was served these ads;
        serving the same unit the same ad again changes nothing."""

    @abc.abstractmethod
    async def put_backoff(self, post_id: str, backoff: Backoff, at: float) -> None: ...

    @abc.abstractmethod
    async def clear_backoff(self, post_id: str) -> None: ...

    @abc.abstractmethod
    async def prune_matcher_state(
        self, backoff_ended_before: float, served_before: float, limit: int
    ) -> int:
        """Delete up to ``limit`` no-match windows that ended before the first instant and
        serves older than the second (the caller's retention rules); how many went."""


class SQLiteMatcherState(SQLitePrimitives, MatcherStateStore):
    """SQLite implementation; mixed into ``SQLiteStore`` (needs its ``read``/``write``)."""

    async def disable_ads(self, pairs: list[DisablePair], at: float) -> None:
        if pairs:
            await self.write(_disable, pairs, at)

    async def load_matcher_state(
        self,
        thread_id: str | None,
        post_id: str | None,
        now: float,
        unit_id: str | None = None,
        also_disabled_in: str | None = None,
    ) -> ThreadState:
        if thread_id is None and post_id is None:
            return ThreadState()
        return await self.read(_load, thread_id, post_id, now, unit_id, also_disabled_in)

    async def record_serves(
        self, thread_id: str, unit_id: str, ad_ids: list[str], at: float
    ) -> None:
        if ad_ids:
            await self.write(_serve, thread_id, unit_id, ad_ids, at)

    async def put_backoff(self, post_id: str, backoff: Backoff, at: float) -> None:
        await self.write(_put_backoff, post_id, backoff, at)

    async def clear_backoff(self, post_id: str) -> None:
        await self.write(_clear_backoff, post_id)

    async def prune_matcher_state(
        self, backoff_ended_before: float, served_before: float, limit: int
    ) -> int:
        return await self.write(_prune, backoff_ended_before, served_before, limit)


# -- SQL, run in the writer thread or a reader ----------------------------------------------


def _disable(conn: sqlite3.Connection, pairs: list[DisablePair], at: float) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO thread_disables (thread_id, ad_id, meta, created_at)"
        " VALUES (?, ?, ?, ?)",
        [(t, a, None if m is None else orjson.dumps(m).decode(), at) for t, a, m in pairs],
    )


def _load(
    conn: sqlite3.Connection,
    thread_id: str | None,
    post_id: str | None,
    now: float,
    unit_id: str | None,
    also_disabled_in: str | None,
) -> ThreadState:
    disabled: frozenset[str] = frozenset()
    served: dict[str, int] = {}
    unit_ads: frozenset[str] = frozenset()
    if thread_id is not None:
        disabled = frozenset(
            r[0]
            for r in conn.execute(
                "SELECT ad_id FROM thread_disables WHERE thread_id IN (?, ?)",
                (thread_id, thread_id if also_disabled_in is None else also_disabled_in),
            )
        )
        rows = conn.execute(
            "SELECT ad_id, count(*) FROM thread_serves WHERE thread_id = ? AND served_at > ?"
            " GROUP BY ad_id",
            (thread_id, now - FREQUENCY_WINDOW_SECONDS),
        )
        served = {ad_id: n for ad_id, n in rows}
        if unit_id is not None:
            unit_ads = frozenset(
                r[0]
                for r in conn.execute(
                    "SELECT ad_id FROM thread_serves WHERE thread_id = ? AND unit_id = ?",
                    (thread_id, unit_id),
                )
            )
    backoff = None
    if post_id is not None:
        row = conn.execute(
            "SELECT misses, until, demand, reason FROM post_backoff WHERE post_id = ?", (post_id,)
        ).fetchone()
        if row is not None:
            backoff = Backoff(misses=row[0], until=row[1], demand=row[2], reason=row[3])
    return ThreadState(disabled=disabled, served=served, unit_ads=unit_ads, backoff=backoff)


def _serve(
    conn: sqlite3.Connection, thread_id: str, unit_id: str, ad_ids: list[str], at: float
) -> None:
    conn.executemany(
        "INSERT INTO thread_serves (thread_id, ad_id, unit_id, served_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (thread_id, ad_id, unit_id)"
        " DO UPDATE SET served_at = max(served_at, excluded.served_at)",
        [(thread_id, a, unit_id, at) for a in dict.fromkeys(ad_ids)],
    )


def _put_backoff(conn: sqlite3.Connection, post_id: str, b: Backoff, at: float) -> None:
    conn.execute(
        "INSERT INTO post_backoff (post_id, misses, until, demand, reason, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (post_id) DO UPDATE SET misses = excluded.misses, until = excluded.until,"
        "  demand = excluded.demand, reason = excluded.reason, updated_at = excluded.updated_at",
        (post_id, b.misses, b.until, b.demand, b.reason, at),
    )


def _clear_backoff(conn: sqlite3.Connection, post_id: str) -> None:
    conn.execute("DELETE FROM post_backoff WHERE post_id = ?", (post_id,))


def _prune(
    conn: sqlite3.Connection, backoff_before: float, served_before: float, limit: int
) -> int:
    # Bounded batches: one prune never holds the single writer for long.
    gone = conn.execute(
        "DELETE FROM post_backoff WHERE post_id IN"
        " (SELECT post_id FROM post_backoff WHERE until < ? LIMIT ?)",
        (backoff_before, limit),
    ).rowcount
    gone += conn.execute(
        "DELETE FROM thread_serves WHERE (thread_id, ad_id, unit_id) IN"
        " (SELECT thread_id, ad_id, unit_id FROM thread_serves WHERE served_at < ? LIMIT ?)",
        (served_before, limit),
    ).rowcount
    return gone
