"""PostgreSQL internals: one migration list, applied once by nodes starting together;
uniqueness across nodes; an outage is StoreUnavailable and the store recovers by itself."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from edge import ledger
from edge.store import Impression, PostgresStore, StoreUnavailable
from edge.store.migrations import apply_postgres_migrations, migration_files
from tests.store.conftest import race_for_key, sql


def imp(keys, **kw) -> Impression:
    base = dict(kind="url", env="production", ad_id="ad-1", campaign_id="cmp-1", at=1.0,
                publisher_id="pub-1", cpm_usd=2.0)  # fmt: skip
    return Impression(dedupe_keys=tuple(keys), **{**base, **kw})


def test_both_backends_have_the_same_migrations_in_the_same_order():
    assert [n for n, _ in migration_files("sqlite")] == [n for n, _ in migration_files("postgres")]


def test_nodes_starting_together_apply_each_migration_once(postgres, run):
    url = postgres.new_database()

    async def one():
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            return await apply_postgres_migrations(conn)

    async def both():
        return await asyncio.gather(*(one() for _ in range(4)))

    results = run(both())
    names = [n for n, _ in migration_files("postgres")]
    assert sorted(n for r in results for n in r) == names  # each applied by exactly one
    assert sql(url, "SELECT name FROM schema_migrations ORDER BY name") == [(n,) for n in names]


def test_failed_migration_leaves_nothing_half_applied(postgres, run, monkeypatch):
    import edge.store.migrations as m

    url = postgres.new_database()
    good = m.migration_files("postgres")
    bad = ("9999_broken", "CREATE TABLE half (x INTEGER);\nCREATE TABLE oops (;\n")
    monkeypatch.setattr(m, "migration_files", lambda backend="sqlite": [*good, bad])

    async def apply():
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await m.apply_postgres_migrations(conn)

    with pytest.raises(psycopg.errors.SyntaxError):
        run(apply())
    tables = {r[0] for r in sql(url, "SELECT tablename FROM pg_tables WHERE schemaname='public'")}
    assert "half" not in tables and "api_keys" in tables


def test_one_token_counts_once_across_two_nodes(postgres, run):
    """Two stores (two edge nodes) get the same beacons at the same time: the database's
    unique index decides, so each impression counts once and bills once."""
    url = postgres.new_database()
    a, b = PostgresStore(url), PostgresStore(url)

    async def race():
        await a.open()
        await b.open()
        try:
            jobs = []
            for i in range(200):
                jobs.append(ledger.record_impression(a, imp((f"tok:{i}", f"iid:{i}"))))
                jobs.append(ledger.record_impression(b, imp((f"tok:{i}", f"iid:b{i}"))))
            return await asyncio.gather(*jobs)
        finally:
            await a.close()
            await b.close()

    results = run(race())
    assert sum(results) == 200
    assert sql(url, "SELECT count(*) FROM impressions") == [(200,)]
    assert sql(url, "SELECT count(*) FROM billing_events") == [(200,)]
    rows = sql(url, "SELECT amount FROM counters WHERE scope='ad' AND counter='impressions'")
    assert rows == [(200.0,)]
    # The losers' own impression ids now point at the winner: a later beacon with only those
    # is a replay too.
    assert sql(url, "SELECT count(*) FROM impression_keys") == [(600,)]


def test_an_impression_that_loses_a_key_race_is_undone_and_becomes_a_replay(postgres, run):
    """Another node holds one of the keys uncommitted: the insert waits for it, and when that
    node commits, this impression, its billing row and its other keys are undone and the
    keys point at the winner instead (nothing counted twice)."""
    url = postgres.new_database()
    store = PostgresStore(url)

    async def go():
        await store.open()
        try:
            return await race_for_key(
                url, "tok:x", ledger.record_impression(store, imp(("tok:x", "iid:y")))
            )
        finally:
            await store.close()

    winner, counted = run(go())
    assert counted is False
    assert sql(url, "SELECT id FROM impressions") == [(winner,)]
    assert sql(url, "SELECT count(*) FROM billing_events") == [(0,)]
    assert sql(url, "SELECT count(*) FROM counters") == [(0,)]
    keys = sql(url, "SELECT dedupe_key, impression_id FROM impression_keys ORDER BY 1")
    assert keys == [("iid:y", winner), ("tok:x", winner)]


def test_a_failing_write_without_a_savepoint_fails_alone(postgres, run):
    """Impressions run without a savepoint of their own: one the database refuses fails
    its caller, and the rest of its batch is committed all the same."""
    url = postgres.new_database()
    store = PostgresStore(url)

    async def go():
        await store.open()
        try:
            jobs = [ledger.record_impression(store, imp((f"tok:{i}",))) for i in range(20)]
            jobs.insert(7, ledger.record_impression(store, imp(("tok:bad",), kind="bogus")))
            jobs.insert(15, ledger.record_impression(store, imp(("tok:bad2",), kind="bogus")))
            return await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            await store.close()

    results = run(go())
    assert isinstance(results[7], psycopg.errors.CheckViolation)
    assert isinstance(results[15], psycopg.errors.CheckViolation)
    assert results[:7] + results[8:15] + results[16:] == [True] * 20
    assert sql(url, "SELECT count(*) FROM impressions") == [(20,)]
    assert sql(url, "SELECT count(*) FROM impression_keys WHERE dedupe_key LIKE 'tok:bad%'") == [
        (0,)
    ]


def test_a_batch_runs_again_once_however_many_of_its_writes_fail(postgres, run):
    """After a job without a savepoint fails, the rest of its batch runs with a savepoint
    per job, so a second failing job fails alone instead of costing another re-run."""
    from edge.store.postgres import _Job, _save_impression

    url = postgres.new_database()
    store = PostgresStore(url)

    async def go():
        await store.open()
        try:
            batch = [
                _Job(_save_impression, (imp((f"tok:{i}",), kind="bogus" if i in (3, 6) else "url"),
                                        None, []), savepoint=False)
                for i in range(10)
            ]  # fmt: skip
            await store._commit(batch)
            return [job.future.exception() or job.future.result() for job in batch]
        finally:
            await store.close()

    results = run(go())
    assert [type(r).__name__ for r in (results[3], results[6])] == ["CheckViolation"] * 2
    assert [r for i, r in enumerate(results) if i not in (3, 6)] == [True] * 8
    assert store.reruns == 1
    assert sql(url, "SELECT count(*) FROM impressions") == [(8,)]


def _seconds_until_it_records(run, store, name: str, limit: float = 30.0) -> float:
    """Seconds until an impression is stored again, trying every 0.1 s (fails past
    ``limit``)."""
    started = time.monotonic()
    while True:
        try:
            assert run(ledger.record_impression(store, imp((name,)))) is True
            return time.monotonic() - started
        except StoreUnavailable:
            assert time.monotonic() - started < limit, "the store did not recover"
            time.sleep(0.1)


@pytest.mark.parametrize("error", ["DeadlockDetected", "SerializationFailure"])
def test_a_batch_the_server_aborts_for_a_deadlock_runs_again_and_commits(
    postgres, run, monkeypatch, error
):
    # Two nodes writing copies of one impression's keys can deadlock; the server aborts one
    # transaction, which must run again, not answer 503 for every write in its batch.
    import edge.store.postgres as pg

    url = postgres.new_database()
    store = PostgresStore(url)
    run(store.open())
    aborts = []
    flush = pg._flush_counts

    async def aborted_once(conn, rows):
        if not aborts:
            aborts.append(error)
            raise getattr(psycopg.errors, error)("the server aborted the transaction")
        await flush(conn, rows)

    monkeypatch.setattr(pg, "_flush_counts", aborted_once)
    try:

        async def burst() -> list[bool]:
            writes = (ledger.record_impression(store, imp((f"k{n}",))) for n in range(20))
            return list(await asyncio.gather(*writes))

        assert run(burst()) == [True] * 20
        assert aborts == [error] and run(store.impression_count()) == 20
    finally:
        run(store.close())


def test_restarted_server_is_unavailable_then_recovers_by_itself(postgres, run):
    url = postgres.new_database()
    store = PostgresStore(url)
    run(store.open())
    try:
        assert run(ledger.record_impression(store, imp(("before",)))) is True
        postgres.stop()
        try:
            with pytest.raises(StoreUnavailable):
                run(ledger.record_impression(store, imp(("during",))))
            with pytest.raises(StoreUnavailable):
                run(store.list_keys())

            # Once the database is found gone, one request at a time waits for it and the
            # others are refused at once, instead of each holding its connection for the
            # pool's 5 s.
            async def many() -> list[float]:
                async def one() -> float:
                    t0 = time.monotonic()
                    with pytest.raises(StoreUnavailable):
                        await store.list_keys()
                    return time.monotonic() - t0

                return sorted(await asyncio.gather(*(one() for _ in range(8))))

            waits = run(many())
            assert waits[-2] < 0.5, waits  # all but the one probe: refused at once
        finally:
            postgres.start()
        # Connections broken by the restart fail once each, then are replaced.
        assert _seconds_until_it_records(run, store, "after") < 10
        assert run(store.impression_count()) == 2  # "during" was refused, never stored
    finally:
        run(store.close())


def test_a_node_is_back_within_seconds_after_a_long_outage(postgres, run):
    # The pool's pause between tries doubles (1, 2, 4, 8, 16 s ...): after 20 s down, its
    # next try would come ~11 s after the server is back, unless a run of tries ends early.
    url = postgres.new_database()
    store = PostgresStore(url)
    run(store.open())
    try:
        assert run(ledger.record_impression(store, imp(("before",)))) is True
        postgres.stop()
        try:
            down_until = time.monotonic() + 20
            while time.monotonic() < down_until:
                with pytest.raises(StoreUnavailable):
                    run(store.list_keys())
        finally:
            postgres.start()
        assert _seconds_until_it_records(run, store, "after") < 7
    finally:
        run(store.close())
