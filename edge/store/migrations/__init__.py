"""Versioned schema migrations: the ``NNNN_name.sql`` files beside this module.

Applied in name order at start-up, each once and in its own transaction, recorded in
``schema_migrations``. Names, not a counter, identify them, so work on separate branches can
add migrations without renumbering. The files, in order:

- ``0001_meta``: process-wide values (the generated signing key);
- ``0002_keys``: API keys (hashes only) and their rotation;
- ``0003_matcher_state``: serves, disables and no-match windows of the matcher;
- ``0004_events``: impressions and their dedupe keys, billing, hovers, placement failures,
  report counters, publishers;
- ``0210_billing_by_time``: billing rows by time (today's spend per campaign, daily caps);
- ``0211_clicks``: clicks (one valid per impression), conversions and their charges;
- ``0230_key_family``: the rotation family of each key (limits and idempotency scopes);
- ``0231_matcher_state_pruning``: indexes for pruning old no-match windows and serves;
- ``0232_invalid_events``: the invalid-traffic reason of an impression.

A new migration takes the next free number and adds its line here (a test checks both).
"""

from __future__ import annotations

import sqlite3
import time
from importlib import resources


def migration_files() -> list[tuple[str, str]]:
    """(name, sql) of every migration shipped with the package, in order."""
    folder = resources.files(__name__)
    found = [
        (entry.name.removesuffix(".sql"), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
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


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations; return the names applied now.

    Holds the write lock (BEGIN IMMEDIATE) while it decides, so two processes opening the
    same new database do not both apply a migration.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    applied_now = []
    for name, sql in migration_files():
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = conn.execute(
                "SELECT 1 FROM schema_migrations WHERE name = ?", (name,)
            ).fetchone()
            if not done:
                for statement in _statements(sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                    (name, time.time()),
                )
                applied_now.append(name)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return applied_now
