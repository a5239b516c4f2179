"""Versioned schema migrations: the ``NNNN_name.sql`` files beside this module.

One list for both backends. ``NNNN_name.sql`` is the migration; when SQLite and
PostgreSQL need different text, ``NNNN_name.postgres.sql`` beside it is what PostgreSQL
runs instead (same name, same place in the order), so a migration that is plain portable
SQL is one file. Applied in name order at start-up, each once and in its own transaction,
recorded in ``schema_migrations``. Names, not a counter, identify them, so work on separate
branches can add migrations without renumbering. The files, in order:

- ``0001_meta``: process-wide values (the generated signing key);
- ``0002_keys``: API keys (hashes only) and their rotation;
- ``0003_matcher_state``: serves, disables and no-match windows of the matcher;
- ``0004_events``: impressions and their dedupe keys, billing, hovers, placement failures,
  report counters, publishers;
- ``0210_billing_by_time``: billing rows by time (today's spend per campaign, daily caps);
- ``0211_clicks``: clicks (one valid per impression), conversions and their charges;
- ``0230_key_family``: the rotation family of each key (limits and idempotency scopes);
- ``0231_matcher_state_pruning``: indexes for pruning old no-match windows and serves;
- ``0232_invalid_events``: the invalid-traffic reason of an impression;
- ``0250_rate_buckets``: shared rate-limit buckets (PostgreSQL; nothing on SQLite);
- ``0251_catalogue_versions``: catalogues loaded with ``edge catalogue load``;
- ``0260_daily_counters``: report counters per UTC day (``edge report --by day``, /reports);
- ``0270_tag_versions``: every tag version the edge built (bytes, SRI hash), for pinned pages;
- ``0310_billing_by_impression``: billing rows keyed by their impression (one B-tree fewer
  per billed impression).
- ``0320_impression_kind_check``: an impression's kind checked with equalities, not an
  IN list (SQLite rebuilds the table; nothing on PostgreSQL).
- ``0330_spend_by_day``: today's spend read from the day buckets (today's made whole from
  the billing rows first); the billing rows' and charges' time indexes dropped.
- ``0360_billing_in_impressions``: what an impression bills stored in its own row;
  ``billing_events`` a view of those rows (same columns and rows as the table it replaces).
- ``0370_click_id_per_impression``: a click id unique within its impression (a partner's
  unsigned AI click id no longer collides with another ad's, message's or conversation's).
- ``0380_ended_sessions``: /reports sessions ended by signing out (a copied cookie of one
  is refused until it would have expired).
- ``0390_click_pricing``: a click's pricing model and bid as its ad was served (what its
  conversion bills under); NULL in the rows from before.
- ``0391_click_key_family``: the partner's key family a click came from (whose report row
  its conversion counts for); NULL for the tag's clicks and in the rows from before.

A new migration takes the next free number and adds its line here (a test checks both).
A migration's text is never edited once released: a database records it as applied by name
and never runs it again.

One released text was edited all the same: the first release's ``0003_matcher_state``
made ``thread_serves`` one row per (thread, ad) counting serves in a fixed window, and
today's makes it one row per served unit. A database of the first release therefore has
``0003_matcher_state`` applied with the old table, so before any migration runs,
:func:`apply_migrations` rebuilds that table in today's shape when it finds the old one
(nothing on any database made since; PostgreSQL never had the old shape).
"""

from __future__ import annotations

import sqlite3
import time
import zlib
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import psycopg

Backend = Literal["sqlite", "postgres"]
_VARIANT = ".postgres.sql"


class NewerSchema(Exception):
    """The database records migrations this release does not ship: a newer release
    migrated it, and what those migrations changed is unknown here. Nothing is migrated."""

    def __init__(self, unknown: list[str]) -> None:
        self.unknown = sorted(unknown)
        self.newest = self.unknown[-1]
        super().__init__(f"migrations this release does not ship: {', '.join(self.unknown)}")


def migration_files(backend: Backend = "sqlite") -> list[tuple[str, str]]:
    """(name, sql) of every migration shipped with the package, in order, as ``backend``
    runs it: the same names for both backends."""
    folder = resources.files(__name__)
    texts = {entry.name: entry for entry in folder.iterdir() if entry.name.endswith(".sql")}
    found = []
    for filename, entry in texts.items():
        if filename.endswith(_VARIANT):
            if filename.removesuffix(_VARIANT) + ".sql" not in texts:
                raise ValueError(f"{filename} has no {filename.removesuffix(_VARIANT)}.sql")
            continue
        name = filename.removesuffix(".sql")
        chosen = entry
        if backend == "postgres" and name + _VARIANT in texts:
            chosen = texts[name + _VARIANT]
        found.append((name, chosen.read_text(encoding="utf-8")))
    return sorted(found)


def _statements(sql: str) -> list[str]:
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise ValueError(f"unterminated SQL statement: {buf.strip()[:80]!r}")
    return out


def refuse_unknown(recorded: list[str]) -> None:
    """Raise ``NewerSchema`` when ``recorded`` names a migration this release does not ship
    (both backends ship the same names)."""
    shipped = {name for name, _ in migration_files()}
    unknown = [name for name in recorded if name not in shipped]
    if unknown:
        raise NewerSchema(unknown)


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations; return the names applied now. A database that records a
    migration this release does not ship is refused (``NewerSchema``) before any is applied.

    Holds the write lock (BEGIN IMMEDIATE) while it decides, so two processes opening the
    same new database do not both apply a migration.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    # Foreign keys off while migrating (the pragma is ignored inside a transaction): a
    # migration may rebuild a table others refer to (create the new one, copy, drop the
    # old one, rename), which SQLite's foreign keys would refuse half way. Each migration
    # is checked instead, before its commit.
    refuse_unknown([r[0] for r in conn.execute("SELECT name FROM schema_migrations")])
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")
    applied_now = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _rebuild_first_release_thread_serves(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        for name, sql in migration_files():
            conn.execute("BEGIN IMMEDIATE")
            try:
                done = conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE name = ?", (name,)
                ).fetchone()
                if not done:
                    for statement in _statements(sql):
                        conn.execute(statement)
                    broken = conn.execute("PRAGMA foreign_key_check").fetchone()
                    if broken is not None:
                        raise sqlite3.IntegrityError(
                            f"migration {name} leaves a row of {broken[0]} without its "
                            f"{broken[2]} row"
                        )
                    conn.execute(
                        "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                        (name, time.time()),
                    )
                    applied_now.append(name)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
    finally:
        conn.execute(f"PRAGMA foreign_keys = {'ON' if enforced else 'OFF'}")
    return applied_now


# The first release's serves per (thread, ad) become that many served units of it. Every
# serve a row counts happened between window_start and last_at; the current rule counts each
# serve for one frequency window after it happened, so the units are dated last_at, the
# latest any of them can have been: a cap reached before the upgrade stays reached until a
# full window after the last serve, never released earlier than the current rule would (at
# most last_at - window_start later than the first release would have). The unit ids are
# synthetic and per row; a window already over is dated in the past like any other serve
# and pruned by housekeeping.
_FIRST_RELEASE_SERVES = (
    "CREATE TABLE thread_serves_by_unit (",
    "    thread_id TEXT NOT NULL,",
    "    ad_id     TEXT NOT NULL,",
    "    unit_id   TEXT NOT NULL,",
    "    served_at REAL NOT NULL,",
    "    PRIMARY KEY (thread_id, ad_id, unit_id)",
    ") STRICT, WITHOUT ROWID",
)


def _rebuild_first_release_thread_serves(conn: sqlite3.Connection) -> bool:
    """Rebuild the first release's ``thread_serves`` (serves, window_start, last_at) in
    today's shape (one row per served unit), in the caller's transaction; whether it did."""
    old_shape = conn.execute(
        "SELECT 1 FROM pragma_table_info('thread_serves') WHERE name = 'serves'"
    ).fetchone()
    if old_shape is None:
        return False
    conn.execute("\n".join(_FIRST_RELEASE_SERVES))
    conn.execute(
        "INSERT INTO thread_serves_by_unit (thread_id, ad_id, unit_id, served_at)"
        " WITH RECURSIVE n(i) AS ("
        "  SELECT 1 UNION ALL SELECT i + 1 FROM n"
        "  WHERE i < (SELECT coalesce(max(serves), 0) FROM thread_serves))"
        " SELECT s.thread_id, s.ad_id, 'first-release-serve-' || n.i, s.last_at"
        " FROM thread_serves AS s JOIN n ON n.i <= s.serves"
    )
    conn.execute("DROP TABLE thread_serves")
    conn.execute("ALTER TABLE thread_serves_by_unit RENAME TO thread_serves")
    return True


async def apply_postgres_migrations(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """Apply pending migrations on PostgreSQL (``conn`` in autocommit); the names applied.
    A database that records a migration this release does not ship is refused
    (``NewerSchema``) before any is applied.

    Holds a session advisory lock throughout, so nodes starting together apply each
    migration once; each runs in its own transaction, so a failing one leaves nothing.
    """
    lock = zlib.crc32(b"edge schema_migrations")
    await conn.execute("SELECT pg_advisory_lock(%s)", (lock,))
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION)"
        )
        cur = await conn.execute("SELECT name FROM schema_migrations")
        refuse_unknown([r[0] for r in await cur.fetchall()])
        applied_now = []
        for name, sql in migration_files("postgres"):
            async with conn.transaction():
                cur = await conn.execute("SELECT 1 FROM schema_migrations WHERE name = %s", (name,))
                if await cur.fetchone() is None:
                    if _statements_or_comments(sql):
                        await conn.execute(sql.encode())  # several statements: no parameters
                    await conn.execute(
                        "INSERT INTO schema_migrations (name, applied_at) VALUES (%s, %s)",
                        (name, time.time()),
                    )
                    applied_now.append(name)
        return applied_now
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))


def _statements_or_comments(sql: str) -> bool:
    """Whether ``sql`` has anything but comments and blank lines."""
    return any(ln.strip() and not ln.strip().startswith("--") for ln in sql.splitlines())
