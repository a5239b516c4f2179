"""A database a newer release migrated is refused: this release does not know what those
migrations changed, so it neither serves from it nor reads it. The edge and every command
exit 2 with one line naming the newest migration it does not ship; nothing is migrated."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import psycopg
import pytest

from edge.settings import Settings
from edge.store import NewerSchema, migrations, open_store
from tests.cli.test_serve_errors import edge
from tests.store.conftest import sql

FUTURE = ("9001_from_a_newer_release", "9002_also_newer")


def _migrated_by_a_newer_release(target: Path | str, run) -> None:
    store = open_store(Settings(db=target))
    run(store.open())
    run(store.close())
    for name in FUTURE:
        query = f"INSERT INTO schema_migrations (name, applied_at) VALUES ('{name}', 1)"
        if isinstance(target, Path):
            conn = sqlite3.connect(target)
            conn.execute(query)
            conn.commit()
            conn.close()
        else:
            with psycopg.connect(target) as pg:
                pg.execute(query.encode())


def test_the_store_refuses_a_database_with_migrations_it_does_not_ship(db_target, run):
    _migrated_by_a_newer_release(db_target, run)
    before = sql(db_target, "SELECT name FROM schema_migrations ORDER BY name")
    store = open_store(Settings(db=db_target))
    try:
        with pytest.raises(NewerSchema) as refused:
            run(store.open())
    finally:
        run(store.close())
    assert refused.value.newest == FUTURE[-1]
    assert sql(db_target, "SELECT name FROM schema_migrations ORDER BY name") == before


def test_a_database_of_this_release_opens_as_before(db_target, run):
    store = open_store(Settings(db=db_target))
    run(store.open())
    run(store.close())
    again = open_store(Settings(db=db_target))
    run(again.open())
    run(again.close())
    names = [n for n, _ in migrations.migration_files()]
    assert [r[0] for r in sql(db_target, "SELECT name FROM schema_migrations ORDER BY name")] == (
        names
    )


def _refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    # A command first says which database it opened; the refusal is the one line after it.
    lines = [
        ln
        for ln in result.stderr.splitlines()
        if ln.startswith("edge: ") and not ln.startswith("edge: database ")
    ]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert FUTURE[-1] in line and FUTURE[0] not in line, line
    assert "newer release" in line and "restore a backup" in line, line
    return line


@pytest.mark.parametrize(
    "command",
    [("serve",), ("keys", "list"), ("report",), ("publishers", "list"), ("catalogue", "history")],
)
def test_the_edge_and_its_commands_refuse_a_newer_sqlite_database(
    tmp_path: Path, run, command
) -> None:
    db = tmp_path / "edge.db"
    _migrated_by_a_newer_release(db, run)
    result = edge(tmp_path, *command, "--db", str(db))
    line = _refusal(result)
    assert line.startswith("edge: EDGE_DB (--db): "), line
    if command == ("serve",):  # refused before anything is logged or loaded
        assert result.stderr.strip().splitlines() == [line], result.stderr


@pytest.mark.parametrize("command", [("serve",), ("keys", "list")])
def test_the_edge_and_its_commands_refuse_a_newer_postgresql_database(
    tmp_path: Path, run, postgres, command
) -> None:
    url = postgres.new_database()
    _migrated_by_a_newer_release(url, run)
    result = edge(tmp_path, *command, "--db", url)
    line = _refusal(result)
    if command == ("serve",):
        assert result.stderr.strip().splitlines() == [line], result.stderr
