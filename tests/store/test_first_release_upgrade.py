"""A database the first release wrote (SQLite only) upgrades in place.

tests/data/first_release/ holds the first release's own migration texts, as it shipped
them: the database is made with those, filled with a few rows of what that release stored,
and then opened with the current store, CLI and app. Its ``thread_serves`` had another
shape (one row per thread and ad: a count in a fixed window) under the same migration name
``0003_matcher_state``; the upgrade rebuilds it in today's shape (one row per served unit)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from edge.cli import main
from edge.settings import Settings
from edge.store import SQLiteStore, migrations, open_store
from matcher.state import FREQUENCY_WINDOW_SECONDS

FIRST_RELEASE = Path(__file__).parent.parent / "data" / "first_release"
NOW = time.time()


def _first_release_db(path: Path) -> None:
    """The database the first release would leave, with a little of everything it stored."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    for file in sorted(FIRST_RELEASE.glob("*.sql")):
        conn.executescript(file.read_text(encoding="utf-8"))
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (file.stem, NOW - 86400))
    day = NOW - 3600
    conn.executescript(
        f"""
        INSERT INTO meta VALUES ('signing_key', x'{"ab" * 32}');
        INSERT INTO api_keys (key_id, lookup, key_hash, env, product, name, created_at)
            VALUES ('key_old1', '{"l" * 24}', '{"h" * 64}', 'production', 'ugc', 'old', {day});
        INSERT INTO publishers VALUES
            ('pub-old', '["https://old.example"]', {day}, {day});
        INSERT INTO impressions (id, kind, env, ad_id, campaign_id, publisher_id, post_id,
                                 slot_id, cpm_usd, at) VALUES
            (1, 'url', 'production', 'ad-a', 'cmp-a', 'pub-old', NULL, 's1', 4.0, {day}),
            (2, 'ugc', 'production', 'ad-a', 'cmp-a', NULL, 'p1', NULL, 4.0, {day + 1}),
            (3, 'url', 'production', 'ad-b', 'cmp-b', 'pub-old', NULL, 's1', 2.0, {day + 2});
        INSERT INTO impression_keys VALUES ('tok:1', 1), ('tok:2', 2), ('tok:3', 3);
        INSERT INTO billing_events (impression_id, campaign_id, ad_id, publisher_id,
                                    amount_usd, at) VALUES
            (1, 'cmp-a', 'ad-a', 'pub-old', 0.004, {day}),
            (2, 'cmp-a', 'ad-a', NULL, 0.004, {day + 1}),
            (3, 'cmp-b', 'ad-b', 'pub-old', 0.002, {day + 2});
        INSERT INTO counters VALUES
            ('ad', 'ad-a', 'impressions', 2), ('ad', 'ad-a', 'billable_usd', 0.008),
            ('ad', 'ad-b', 'impressions', 1), ('ad', 'ad-b', 'billable_usd', 0.002),
            ('publisher', 'pub-old', 'impressions', 2),
            ('campaign', 'cmp-a', 'billable_usd', 0.008),
            ('campaign', 'cmp-b', 'billable_usd', 0.002),
            ('key', 'key_old1', 'requests', 5);
        INSERT INTO thread_disables VALUES ('t-1', 'ad-b', NULL, {day});
        -- ad-a served 3 times in thread t-1 within a window still running; ad-b once in a
        -- window long over.
        INSERT INTO thread_serves VALUES
            ('t-1', 'ad-a', 3, {NOW - 600}, {NOW - 60}),
            ('t-2', 'ad-b', 1, {NOW - 10 * FREQUENCY_WINDOW_SECONDS},
                               {NOW - 10 * FREQUENCY_WINDOW_SECONDS});
        """
    )
    conn.close()


@pytest.fixture
def old_db(tmp_path: Path) -> Path:
    path = tmp_path / "edge.db"
    _first_release_db(path)
    return path


def _columns(path: Path, table: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def test_only_the_matcher_state_migration_changed_since_the_first_release():
    shipped = dict(migrations.migration_files())
    changed = [
        f.stem
        for f in sorted(FIRST_RELEASE.glob("*.sql"))
        if f.read_text(encoding="utf-8") != shipped[f.stem]
    ]
    assert changed == ["0003_matcher_state"]


def test_a_first_release_database_opens_and_keeps_its_rows(old_db: Path):
    store = SQLiteStore(old_db)
    store.open_blocking()
    try:
        conn = sqlite3.connect(old_db)
        names = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
        assert names == {n for n, _ in migrations.migration_files()}
        assert _columns(old_db, "thread_serves") == ["thread_id", "ad_id", "unit_id", "served_at"]
        counters = set(conn.execute("SELECT scope, scope_id, counter, amount FROM counters"))
        assert {("ad", "ad-a", "impressions", 2.0), ("key", "key_old1", "requests", 5.0),
                ("campaign", "cmp-a", "billable_usd", 0.008)} <= counters  # fmt: skip
        assert conn.execute("SELECT value FROM meta WHERE name = 'signing_key'").fetchone() == (
            bytes.fromhex("ab" * 32),
        )
        conn.close()
    finally:
        store.close_blocking()


def test_the_frequency_state_of_the_first_release_is_kept(old_db: Path, run):
    store = open_store(Settings(db=old_db))
    run(store.open())
    try:
        # Three serves of ad-a in t-1 count as three served units: a cap of 3 stays reached
        # for a full window after the last of them, as the current rule counts serves.
        state = run(store.load_matcher_state("t-1", None, NOW, unit_id="p-new"))
        assert state.served == {"ad-a": 3}
        assert state.disabled == frozenset({"ad-b"})
        assert state.unit_ads == frozenset()
        later = run(store.load_matcher_state("t-1", None, NOW - 60 + FREQUENCY_WINDOW_SECONDS - 1))
        assert later.served == {"ad-a": 3}
        after = run(store.load_matcher_state("t-1", None, NOW - 60 + FREQUENCY_WINDOW_SECONDS + 1))
        assert after.served == {}
        # The window over long ago counts nothing, and housekeeping prunes it.
        assert run(store.load_matcher_state("t-2", None, NOW)).served == {}
        assert run(store.prune_matcher_state(NOW, NOW - FREQUENCY_WINDOW_SECONDS, 100)) >= 1
        # New serves are recorded in the new shape beside the kept ones.
        run(store.record_serves("t-1", "p-new", ["ad-a"], NOW))
        assert run(store.load_matcher_state("t-1", None, NOW + 1)).served == {"ad-a": 4}
    finally:
        run(store.close())


def test_the_cli_and_the_edge_start_on_a_first_release_database(old_db: Path, capsys, make_client):
    assert main(["keys", "list", "--json", "--db", str(old_db)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["key_id"] for r in rows] == ["key_old1"]
    assert main(["publishers", "list", "--db", str(old_db)]) == 0
    assert "pub-old" in capsys.readouterr().out
    assert main(["report", "--json", "--db", str(old_db)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ad"]["ad-a"]["impressions"] == 2
    client = make_client(db=old_db)
    assert client.get("/dea/health").status_code == 200


def test_the_rebuild_is_a_no_op_on_a_database_made_since(tmp_path: Path):
    conn = sqlite3.connect(tmp_path / "new.db", isolation_level=None)
    migrations.apply_migrations(conn)
    conn.execute("INSERT INTO thread_serves VALUES ('t', 'ad', 'u', 1.0)")
    before = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'thread_serves'").fetchone()
    assert migrations.apply_migrations(conn) == []
    assert conn.execute("SELECT * FROM thread_serves").fetchall() == [("t", "ad", "u", 1.0)]
    after = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'thread_serves'").fetchone()
    assert after == before
