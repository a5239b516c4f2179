"""Store tests run on both backends: every test taking ``store`` runs on SQLite and on a
real PostgreSQL 15 (a fresh database of the session's server)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from edge.settings import Settings
from edge.store import Store, open_store


class LoopThread:
    """An event loop on its own thread: a PostgreSQL pool lives on one loop, and the tests
    call the store synchronously (``run(store.method(...))``)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def db_target(backend, tmp_path, request) -> Path | str:
    """What EDGE_DB would name: a SQLite file, or a fresh PostgreSQL database's URL."""
    if backend == "sqlite":
        return tmp_path / "sub" / "edge.db"
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def run(loop):
    return loop.run


@pytest.fixture
def store(db_target, loop) -> Iterator[Store]:
    s = open_store(Settings(db=db_target))
    loop.run(s.open())
    yield s
    loop.run(s.close())


def sql(target: Path | str, query: str) -> list[tuple]:
    """Rows of a query run on the store's database directly (to check what is stored)."""
    if isinstance(target, Path):
        conn = sqlite3.connect(target)
        try:
            return [tuple(r) for r in conn.execute(query)]
        finally:
            conn.close()
    with psycopg.connect(target) as pg:
        return [tuple(r) for r in pg.execute(query.encode())]


def execute(target: Path | str, *statements: str) -> None:
    """Run and commit SQL statements on the store's database directly (to write rows as an
    earlier release wrote them)."""
    if isinstance(target, Path):
        conn = sqlite3.connect(target)
        try:
            with conn:
                for statement in statements:
                    conn.execute(statement)
        finally:
            conn.close()
        return
    with psycopg.connect(target) as pg:
        for statement in statements:
            pg.execute(statement.encode())


def opened_after(
    monkeypatch: pytest.MonkeyPatch, run: Any, target: Path | str, before: str, *rows: str
) -> Store:
    """A store of this release, opened on a database an earlier one left: migrated only up
    to before migration ``before``, with ``rows`` (SQL statements) written then. The caller
    closes it."""
    migrate_only_before(monkeypatch, before)
    old = open_store(Settings(db=target))
    run(old.open())
    run(old.close())
    execute(target, *rows)
    monkeypatch.undo()  # every shipped migration again
    new = open_store(Settings(db=target))
    run(new.open())
    return new


async def race_for_key(url: str, key: str, write: Coroutine[Any, Any, Any]) -> tuple[int, Any]:
    """(the other node's impression id, ``write``'s result): another node stores an
    impression holding ``key`` and leaves it uncommitted; ``write`` runs until it is seen
    waiting on that node's lock, then the other node commits."""
    async with await psycopg.AsyncConnection.connect(url) as other:
        cur = await other.execute(
            "INSERT INTO impressions (kind, env, ad_id, at) "
            "VALUES ('url', 'production', 'ad-9', 1.0) RETURNING id"
        )
        row = await cur.fetchone()
        assert row is not None
        (winner,) = row
        await other.execute("INSERT INTO impression_keys VALUES (%s, %s)", (key, winner))
        task = asyncio.ensure_future(write)
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        for _ in range(500):  # until the write waits on the key
            if sql(url, waiting) == [(1,)]:
                break
            await asyncio.sleep(0.01)
        assert not task.done()
        await other.commit()
        return winner, await task


def migrate_only_before(monkeypatch: pytest.MonkeyPatch, number: str) -> None:
    """Stores opened from now on apply only the migrations numbered before ``number``: a
    database as an earlier release left it."""
    from edge.store import migrations

    shipped = migrations.migration_files
    monkeypatch.setattr(
        migrations,
        "migration_files",
        lambda backend="sqlite": [m for m in shipped(backend) if m[0] < number],
    )


def record_before_0360(target: Path | str, store: Store, run: Any, imp: Any) -> None:
    """Count a fresh impression in a database migrated only up to before 0360, as the store
    wrote one then: its row without ``billed_usd``, its dedupe keys, a row of
    ``billing_events`` when it bills (``edge.ledger`` decides), and its counter bumps
    (through ``store.add_counts``, which is unchanged)."""
    from edge import ledger

    billed = ledger.billing_usd(imp)
    row = (imp.kind, imp.env, imp.ad_id, imp.campaign_id, imp.publisher_id, imp.post_id,
           imp.slot_id, imp.cpm_usd, imp.at, imp.invalid_reason)  # fmt: skip
    insert = (
        "INSERT INTO impressions (kind, env, ad_id, campaign_id, publisher_id, post_id,"
        " slot_id, cpm_usd, at, invalid_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    keys = "INSERT INTO impression_keys (dedupe_key, impression_id) VALUES (?, ?)"
    bill = (
        "INSERT INTO billing_events (impression_id, campaign_id, ad_id, publisher_id,"
        " amount_usd, at) VALUES (?, ?, ?, ?, ?, ?)"
    )
    if isinstance(target, Path):
        conn = sqlite3.connect(target)
        try:
            impression_id = conn.execute(insert, row).lastrowid
            conn.executemany(keys, [(k, impression_id) for k in imp.dedupe_keys])
            if billed is not None:
                conn.execute(bill, (impression_id, imp.campaign_id, imp.ad_id,
                                    imp.publisher_id, billed, imp.at))  # fmt: skip
            conn.commit()
        finally:
            conn.close()
    else:
        with psycopg.connect(target) as pg:
            found = pg.execute(
                (insert + " RETURNING id").replace("?", "%s").encode(), row
            ).fetchone()
            assert found is not None
            impression_id = found[0]
            for k in imp.dedupe_keys:
                pg.execute(keys.replace("?", "%s").encode(), (k, impression_id))
            if billed is not None:
                pg.execute(bill.replace("?", "%s").encode(), (impression_id, imp.campaign_id,
                           imp.ad_id, imp.publisher_id, billed, imp.at))  # fmt: skip
    run(store.add_counts(ledger.impression_counts_of_day(imp, billed)))


def record_click_before_0370(target: Path | str, store: Store, run: Any, click: Any) -> None:
    """Count a fresh click in a database migrated only up to before 0370 (where the click id
    alone was unique, so the store's ``ON CONFLICT`` target of today does not apply), as
    the store wrote one then: its row, its charge row when it bills, and its counter bumps
    (through ``store.add_counts``, which is unchanged)."""
    from edge import ledger
    from edge.counters import with_days

    row = (click.click_id, click.impression_key, click.kind, click.env, click.ad_id,
           click.campaign_id, click.publisher_id, click.slot_id, click.invalid_reason,
           click.at)  # fmt: skip
    insert = (
        "INSERT INTO clicks (click_id, impression_key, kind, env, ad_id, campaign_id,"
        " publisher_id, slot_id, invalid_reason, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    charge = (
        "INSERT INTO charges (pricing, click_row, campaign_id, ad_id, publisher_id, amount_usd,"
        " at) VALUES ('cpc', ?, ?, ?, ?, ?, ?)"
    )

    def charged(click_row: int) -> tuple[Any, ...]:
        return (click_row, click.campaign_id, click.ad_id, click.publisher_id,
                click.charge_usd, click.at)  # fmt: skip

    if isinstance(target, Path):
        conn = sqlite3.connect(target)
        try:
            click_row = conn.execute(insert, row).lastrowid
            assert click_row is not None
            if click.charge_usd is not None:
                conn.execute(charge, charged(click_row))
            conn.commit()
        finally:
            conn.close()
    else:
        with psycopg.connect(target) as pg:
            found = pg.execute((insert + " RETURNING id").replace("?", "%s").encode(), row)
            click_row = found.fetchone()[0]  # type: ignore[index]
            if click.charge_usd is not None:
                pg.execute(charge.replace("?", "%s").encode(), charged(click_row))
    run(store.add_counts(with_days(ledger.click_counts(click), click.at)))
