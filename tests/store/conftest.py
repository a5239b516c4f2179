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
