"""Migration 0320: an impression's kind is checked with equalities instead of an IN list
(SQLite rebuilds the table). A database from before keeps its rows, ids, keys and billing
rows, replays stay replays, the same kinds are accepted and refused, and foreign keys are
enforced again afterwards."""

from __future__ import annotations

import secrets
import sqlite3
import uuid
from pathlib import Path

import pytest

from edge import ledger
from edge.settings import Settings
from edge.store import Impression, migrations, open_store
from tests.store.conftest import migrate_only_before, record_before_0360, sql

KINDS = ("url", "ugc", "ai-render", "ai-view", "legacy")


def _imp(keys: tuple[str, ...], at: float, **kw) -> Impression:
    base = dict(kind="url", env="production", ad_id="ad-1", campaign_id="cmp-1",
                publisher_id="pub-1", cpm_usd=2.0)  # fmt: skip
    return Impression(dedupe_keys=keys, at=at, **{**base, **kw})


_IMPRESSIONS = (
    "SELECT id, kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id, cpm_usd, at,"
    " invalid_reason FROM impressions ORDER BY id"
)
_KEYS = "SELECT dedupe_key, impression_id FROM impression_keys ORDER BY 1"
_BILLING = (
    "SELECT impression_id, campaign_id, ad_id, publisher_id, amount_usd, at"
    " FROM billing_events ORDER BY 1"
)


def _tables(target) -> dict[str, list[tuple]]:
    return {
        "impressions": sql(target, _IMPRESSIONS),
        "keys": sql(target, _KEYS),
        "billing": sql(target, _BILLING),
    }


def test_impressions_stored_before_the_new_kind_check_are_kept(
    db_target, run, monkeypatch, backend
):
    migrate_only_before(monkeypatch, "0320")
    old = open_store(Settings(db=db_target))
    run(old.open())
    stored = [(f"tok:{secrets.token_urlsafe(12)}", f"iid:{uuid.uuid4()}") for _ in range(25)]
    for i, keys in enumerate(stored):
        extra = {"invalid_reason": "datacenter"} if i % 7 == 3 else {}
        record_before_0360(
            db_target, old, run,
            _imp(keys, 1_790_000_000.0 + i, kind=KINDS[i % 5], post_id=f"p{i}", **extra),
        )  # fmt: skip
    run(old.close())
    before = _tables(db_target)
    assert len(before["impressions"]) == 25 and len(before["billing"]) == 21
    monkeypatch.undo()  # every shipped migration again

    new = open_store(Settings(db=db_target))
    run(new.open())
    try:
        assert _tables(db_target) == before
        for tok, iid in stored:
            replay = _imp((tok, f"iid:{uuid.uuid4()}"), 1_790_000_100.0)
            assert run(ledger.record_impression(new, replay)) is False
            replay = _imp((f"tok:{secrets.token_urlsafe(12)}", iid), 1_790_000_100.0)
            assert run(ledger.record_impression(new, replay)) is False
        for kind in KINDS:
            fresh = _imp((f"tok:new-{kind}",), 1_790_000_200.0, kind=kind)
            assert run(ledger.record_impression(new, fresh)) is True
        for kind in ("bogus", "URL", ""):
            with pytest.raises(Exception, match=r"(?i)check"):
                run(ledger.record_impression(new, _imp((f"tok:bad-{kind}",), 1.0, kind=kind)))
        last = max(row[0] for row in before["impressions"])
        ids = sql(db_target, f"SELECT id FROM impressions WHERE id > {last} ORDER BY id")
        assert len(ids) == 5  # new ids follow the stored ones
        assert run(new.impression_count()) == 30
    finally:
        run(new.close())
    if backend == "sqlite":
        # Foreign keys are enforced again on the store's connections after migrating.
        store = open_store(Settings(db=db_target))
        run(store.open())
        try:
            with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
                store.write_blocking(
                    lambda c: c.execute("INSERT INTO impression_keys VALUES ('tok:orphan', -1)")
                )
        finally:
            run(store.close())


def test_a_migration_that_orphans_a_row_is_refused(tmp_path: Path, monkeypatch):
    """Migrations run with SQLite's foreign keys off (a table others refer to may be
    rebuilt), so each one is checked before its commit: one that leaves a row pointing at
    nothing is rolled back, and foreign keys are on again afterwards."""
    shipped = migrations.migration_files()
    orphan = ("9999_orphan", "INSERT INTO impression_keys VALUES ('tok:orphan', 424242);\n")
    monkeypatch.setattr(migrations, "migration_files", lambda backend="sqlite": [*shipped, orphan])
    conn = sqlite3.connect(tmp_path / "e.db", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.IntegrityError, match=r"9999_orphan.*impression_keys"):
        migrations.apply_migrations(conn)
    assert conn.execute("SELECT count(*) FROM impression_keys").fetchone() == (0,)
    names = [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]
    assert names == [n for n, _ in shipped]
    assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
