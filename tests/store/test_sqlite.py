"""SQLite internals: WAL, migrations, the writer thread and its wake-ups (the behaviour
both backends share is in test_store.py)."""

import asyncio
import os
import sqlite3
import stat
import threading
import time

import pytest

from edge.store import KeyRecord, SQLiteStore
from edge.store.migrations import apply_migrations, migration_files


def _record(key_id="key_a", lookup="l" * 24, **kw) -> KeyRecord:
    base = dict(
        key_id=key_id,
        lookup=lookup,
        key_hash="h" * 64,
        env="production",
        product="ugc",
        name="",
        created_at=1.0,
    )
    return KeyRecord(**{**base, **kw})


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "sub" / "edge.db")
    s.open_blocking()
    yield s
    s.close_blocking()


def test_open_creates_folder_wal_and_every_migration(store):
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    applied = [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]
    assert applied == [name for name, _ in migration_files()]


def test_a_new_database_and_its_wal_files_are_the_owners_alone(tmp_path):
    # It holds the token signing key: no other local user may read it, whatever the umask.
    old = os.umask(0o022)
    try:
        s = SQLiteStore(tmp_path / "edge.db")
        s.open_blocking()
        try:
            files = [tmp_path / n for n in ("edge.db", "edge.db-wal", "edge.db-shm")]
            assert all(f.exists() for f in files)
            assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
        finally:
            s.close_blocking()
    finally:
        os.umask(old)


def test_an_existing_database_keeps_the_mode_its_operator_gave_it(tmp_path):
    path = tmp_path / "edge.db"
    sqlite3.connect(path).close()
    path.chmod(0o640)
    s = SQLiteStore(path)
    s.open_blocking()
    s.close_blocking()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_migrations_apply_once(tmp_path):
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    first = apply_migrations(conn)
    assert first and apply_migrations(conn) == []


def test_failed_migration_leaves_nothing_half_applied(tmp_path, monkeypatch):
    import edge.store.migrations as m

    good = m.migration_files()
    bad = ("9999_broken", "CREATE TABLE half (x INTEGER);\nCREATE TABLE oops (;\n")
    monkeypatch.setattr(m, "migration_files", lambda: [*good, bad])
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    with pytest.raises(sqlite3.OperationalError):
        m.apply_migrations(conn)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "half" not in tables and "api_keys" in tables


def test_acknowledged_write_is_visible_to_another_connection(store):
    asyncio.run(store.insert_key(_record()))
    other = sqlite3.connect(store.path)
    assert other.execute("SELECT key_id FROM api_keys").fetchall() == [("key_a",)]


def test_a_committed_batch_wakes_the_loop_once(store, monkeypatch):
    # Every caller of one batch is resolved by one call_soon_threadsafe (not one per write),
    # and only after the COMMIT: a second connection already sees every row.
    wakes: list[int] = []
    seen_on_wake: list[int] = []
    real = asyncio.BaseEventLoop.call_soon_threadsafe

    def counting(loop, callback, *args, **kw):
        if args and isinstance(args[0], list):
            wakes.append(len(args[0]))
            conn = sqlite3.connect(store.path)
            seen_on_wake.append(conn.execute("SELECT count(*) FROM api_keys").fetchone()[0])
            conn.close()
        return real(loop, callback, *args, **kw)

    monkeypatch.setattr(asyncio.BaseEventLoop, "call_soon_threadsafe", counting)
    running, hold = threading.Event(), threading.Event()

    def park(conn):
        running.set()
        return hold.wait(30)

    async def burst():
        # Park the writer on a first job so the next 50 queue up as one batch: each wait is
        # for the state it needs (the writer inside the first job, then all 50 queued).
        first = asyncio.ensure_future(store.write(park))
        while not running.is_set():
            await asyncio.sleep(0.001)
        rest = [
            asyncio.ensure_future(store.insert_key(_record(f"key_{i}", f"{i:024d}")))
            for i in range(50)
        ]
        while store._writer._queue.qsize() < 1:  # the 50, one tick's writes: one item
            await asyncio.sleep(0)
        hold.set()
        await first
        return await asyncio.gather(*rest)

    assert asyncio.run(burst()) == [None] * 50
    assert sum(wakes) == 51 and len(wakes) == 2  # the first job, then the 50 together
    assert seen_on_wake[-1] == 50


def test_one_ticks_writes_reach_the_writer_as_one_queue_item(tmp_path):
    # The writes submitted in one tick of the loop are handed to the writer thread together
    # (one put, one wake-up), each still answered with its own result after the commit.
    import queue

    from edge.store.events import CountingConnection
    from edge.store.sqlite import _Writer, connect

    puts: list[int] = []

    class CountingQueue(queue.SimpleQueue):
        def put(self, item, block=True, timeout=None):
            puts.append(len(item) if isinstance(item, list) else 0)
            super().put(item, block, timeout)

    conn = connect(tmp_path / "edge.db", factory=CountingConnection)
    apply_migrations(conn)
    writer = _Writer(conn)
    writer._queue = CountingQueue()
    writer.start()

    async def burst():
        writes = [writer.submit_async(lambda conn, i: i * 10, (i,)) for i in range(20)]
        failing = writer.submit_async(lambda conn: 1 / 0, ())
        return await asyncio.gather(*writes, failing, return_exceptions=True)

    try:
        first, second = asyncio.run(burst()), asyncio.run(burst())
    finally:
        writer.stop()
        writer.join()
    for results in (first, second):
        assert results[:20] == [i * 10 for i in range(20)]
        assert isinstance(results[20], ZeroDivisionError)  # a failing write fails alone
    assert puts == [21, 21, 0]  # one item per tick, then the stop


def test_writes_not_yet_handed_over_are_written_before_the_writer_stops(tmp_path):
    from edge.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "edge.db")

    async def run():
        await store.open()
        futures = [store._writer.submit_async(lambda conn, i: i, (i,)) for i in range(3)]
        # Stopped in the same tick, before the hand-over the loop would have made.
        store.close_blocking()
        return await asyncio.wait_for(asyncio.gather(*futures), 10)

    assert asyncio.run(run()) == [0, 1, 2]


def test_a_cancelled_caller_does_not_break_the_writer(store):
    async def run():
        hold = threading.Event()
        first = asyncio.ensure_future(store.write(lambda conn: hold.wait(5)))
        await asyncio.sleep(0.05)
        doomed = asyncio.ensure_future(store.insert_key(_record("key_c", "c" * 24)))
        await asyncio.sleep(0)
        doomed.cancel()
        hold.set()
        await first
        # The writer is still alive: the cancelled write committed, a later one does too.
        await store.insert_key(_record("key_d", "d" * 24))
        return doomed.cancelled()

    assert asyncio.run(run())
    assert [r.key_id for r in asyncio.run(store.list_keys())] == ["key_c", "key_d"]


def test_blocking_writes_still_resolve_in_the_writer(store):
    store.write_blocking(lambda conn, r: conn.execute("SELECT 1"), None)
    with pytest.raises(sqlite3.OperationalError):
        store.write_blocking(lambda conn: conn.execute("SELECT * FROM nowhere"))
    assert store.write_blocking(lambda conn: 7) == 7


def _impression(keys, **kw):
    from edge.store import Impression

    base = dict(kind="url", env="production", ad_id="ad-1", campaign_id="cmp-1", at=10.0,
                publisher_id="pub-1", slot_id="s")  # fmt: skip
    return Impression(dedupe_keys=tuple(keys), **{**base, **kw})


def _impression_job(imp):
    import concurrent.futures as cf

    from edge import ledger
    from edge.store.events import _save_impression
    from edge.store.sqlite import _Job

    billed = ledger.billing_usd(imp)
    return _Job(_save_impression, (imp, billed, ledger.impression_counts(imp, billed)), cf.Future())


def _hover_job(token_id):
    import concurrent.futures as cf

    from edge import ledger
    from edge.store import Hover
    from edge.store.events import _save_hover
    from edge.store.sqlite import _Job

    hover = Hover(token_id=token_id, ad_id="ad-1", at=11.0, hover_ms=300, publisher_id="pub-1")
    return _Job(_save_hover, (hover, ledger.hover_counts(hover)), cf.Future())


def _burst():
    """A group commit's jobs: replays inside the batch and of a stored impression, a key
    taught by a replay, a key repeated in one impression, an invalid and a billed one, a
    hover between two runs of impressions, and one the table refuses (bad kind)."""
    return [
        _impression_job(_impression(("tok:1", "iid:1"), cpm_usd=2.0)),
        _impression_job(_impression(("tok:1", "iid:2"))),  # replay (token): teaches iid:2
        _impression_job(_impression(("tok:3", "iid:2"))),  # replay through the taught key
        _impression_job(_impression(("tok:4", "iid:4"), invalid_reason="bot_user_agent")),
        _impression_job(_impression(("tok:5", "tok:5"), kind="ugc")),
        _impression_job(_impression(("tok:0", "iid:9"))),  # replay of a stored impression
        _hover_job("tok:1"),
        _impression_job(_impression(("tok:6",), kind="bogus")),  # the CHECK refuses it
        _impression_job(_impression(("tok:7", "iid:7"), cpm_usd=3.0, campaign_id="cmp-2")),
    ]


def _batched_and_one_by_one(tmp_path, stored_keys):
    """Two writers on fresh stores that hold one impression with ``stored_keys``: the first
    to take a burst as one batch, the second to take it one job at a time."""
    from edge.store.events import CountingConnection
    from edge.store.sqlite import _Writer, connect

    writers = []
    for name in ("batched", "one-by-one"):
        conn = connect(tmp_path / f"{name}.db", factory=CountingConnection)
        apply_migrations(conn)
        writer = _Writer(conn)
        writer._commit([_impression_job(_impression(stored_keys))])
        writers.append(writer)
    return writers


def _outcome(job):
    exc = job.future.exception()
    return type(exc).__name__ if exc is not None else job.future.result()


def _tables(conn):
    tables = ("impressions", "impression_keys", "billing_events", "hovers")
    out = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables}
    counters = conn.execute("SELECT * FROM counters ORDER BY 1, 2, 3").fetchall()
    return out, counters


def test_a_run_of_impressions_is_written_batched_with_the_outcome_of_one_by_one(tmp_path):
    """The writer's batched form for the run of impressions that opens a group commit (one
    lookup, one executemany per table) leaves exactly the rows, ids, answers and counters
    of running the same jobs one per transaction; a later run that holds a job the table
    refuses fails its batched form and goes one by one, so that job fails alone."""

    batched, single = _batched_and_one_by_one(tmp_path, ("tok:0",))  # stored before the burst
    jobs_a, jobs_b = _burst(), _burst()
    batched._commit(jobs_a)
    for job in jobs_b:
        single._commit([job])
    expected = [True, False, False, True, True, False, True, "IntegrityError", True]
    assert [_outcome(j) for j in jobs_a] == [_outcome(j) for j in jobs_b] == expected
    assert batched.batched == 6 and single.batched == 0  # the run opening the transaction
    rows_a, counters_a = _tables(batched._conn)
    rows_b, counters_b = _tables(single._conn)
    assert rows_a == rows_b
    assert [r[:3] for r in counters_a] == [r[:3] for r in counters_b]
    assert [r[3] for r in counters_a] == pytest.approx([r[3] for r in counters_b])
    assert len(rows_a["impressions"]) == 5 and len(rows_a["billing_events"]) == 2


def test_impressions_sharing_their_bumps_count_each_once_batched_or_not(tmp_path):
    """Impressions alike are handed one shared tuple of bumps (the ledger's
    ``impression_counts_of_day``); a batched run adds it once times the impressions it
    counted (replays among them count nothing), as one by one does row by row."""
    import concurrent.futures as cf

    from edge import ledger
    from edge.store.events import CountingConnection, _save_impression
    from edge.store.sqlite import _Job, _Writer, connect

    def jobs():
        out = []
        for i, keys in enumerate([("tok:1",), ("tok:2",), ("tok:1",), ("tok:3",), ("tok:4",)]):
            imp = _impression(keys, cpm_usd=2.0, at=86_400.0 * 400 + i)
            billed = ledger.billing_usd(imp)
            counts = ledger.impression_counts_of_day(imp, billed)
            out.append(_Job(_save_impression, (imp, billed, counts), cf.Future()))
        other = _impression(("tok:9",), ad_id="ad-2", at=86_400.0 * 400)  # its own bumps
        out.append(_Job(_save_impression, (other, None, ledger.impression_counts(other, None)),
                        cf.Future()))  # fmt: skip
        return out

    def day_counters(conn):
        return conn.execute("SELECT * FROM daily_counters ORDER BY 1, 2, 3, 4").fetchall()

    found = []
    for batched in (True, False):
        conn = connect(tmp_path / f"{batched}.db", factory=CountingConnection)
        apply_migrations(conn)
        writer = _Writer(conn)
        run = jobs()
        if batched:
            writer._commit(run)
            assert writer.batched == len(run)
        else:
            for job in run:
                writer._commit([job])
        assert [j.future.result() for j in run] == [True, True, False, True, True, True]
        found.append((_tables(conn)[1], day_counters(conn)))
    (totals_a, days_a), (totals_b, days_b) = found
    assert [r[:3] for r in totals_a] == [r[:3] for r in totals_b]
    assert [r[3] for r in totals_a] == pytest.approx([r[3] for r in totals_b])
    assert [r[:4] for r in days_a] == [r[:4] for r in days_b]
    assert [r[4] for r in days_a] == pytest.approx([r[4] for r in days_b])
    counted = {r[:3]: r[3] for r in totals_a}
    assert counted[("ad", "ad-1", "impressions")] == 4
    assert counted[("ad", "ad-2", "impressions")] == 1
    assert counted[("campaign", "cmp-1", "billable_usd")] == pytest.approx(4 * 2.0 / 1000)


def test_save_impression_hands_the_writer_the_ledgers_shared_bumps(store, monkeypatch):
    """The shared tuple of bumps reaches the writer as itself, so a batched run can add it
    once per batch (a copy per impression made every impression's bumps its own); a list
    is copied, as its caller may change it afterwards."""
    from edge import ledger

    handed = []

    async def written():
        return True

    def write_soon(fn, *args):
        handed.append(args)
        return written()

    monkeypatch.setattr(store, "write_soon", write_soon)
    imp = _impression(("tok:1", "iid:1"), cpm_usd=2.0)
    billed = ledger.billing_usd(imp)
    shared = ledger.impression_counts_of_day(imp, billed)
    mine = list(shared)
    for counts in (shared, shared, mine):
        assert asyncio.run(store.save_impression(imp, billed, counts)) is True
    assert handed[0][2] is shared and handed[1][2] is shared
    assert handed[2][2] == shared and handed[2][2] is not mine


def test_an_impression_is_an_immutable_value():
    """What the edge hands the store cannot change on the way to the writer."""
    imp = _impression(("tok:1", "iid:1"), cpm_usd=2.0)
    with pytest.raises(AttributeError):
        imp.cpm_usd = None  # type: ignore[misc]
    same = _impression(("tok:1", "iid:1"), cpm_usd=2.0)
    assert imp == same and hash(imp) == hash(same)
    assert imp != _impression(("tok:1", "iid:1"), cpm_usd=3.0)
    assert imp.publisher_id == "pub-1" and imp.post_id is None and imp.invalid_reason is None


def test_a_batch_that_fails_is_undone_and_its_jobs_run_one_by_one(tmp_path):
    from edge.store.events import CountingConnection
    from edge.store.sqlite import _Writer, connect

    conn = connect(tmp_path / "edge.db", factory=CountingConnection)
    apply_migrations(conn)
    writer = _Writer(conn)
    jobs = [
        _impression_job(_impression(("tok:1",), cpm_usd=2.0)),
        _impression_job(_impression(("tok:2",), kind="bogus")),  # the CHECK refuses it
        _impression_job(_impression(("tok:3",))),
    ]
    writer._commit(jobs)
    assert [_outcome(j) for j in jobs] == [True, "IntegrityError", True]
    assert writer.batched == 0 and writer.batches == 1  # still one commit
    rows, counters = _tables(conn)
    assert [r[0] for r in rows["impression_keys"]] == ["tok:1", "tok:3"]
    assert len(rows["billing_events"]) == 1
    impressions = {r[:3]: r[3] for r in counters}[("ad", "ad-1", "impressions")]
    assert impressions == 2  # the refused job's bumps are gone with it


def test_a_run_with_no_stored_key_is_written_without_the_lookup(tmp_path, monkeypatch):
    """The first batched form skips the dedupe-key lookup; a stored key makes its insert
    fail, and the form with the lookup writes the run instead, with the same outcome."""
    from edge.store import events
    from edge.store.events import CountingConnection, _save_impression
    from edge.store.sqlite import _Writer, connect

    tried = []

    def recording(form):
        def run(conn, args):
            tried.append(form.__name__)
            return form(conn, args)

        return run

    forms = tuple(recording(f) for f in events.BATCHED[_save_impression])
    monkeypatch.setitem(events.BATCHED, _save_impression, forms)
    conn = connect(tmp_path / "edge.db", factory=CountingConnection)
    apply_migrations(conn)
    writer = _Writer(conn)
    fresh = [
        _impression_job(_impression(("tok:1", "iid:1"), cpm_usd=2.0)),
        _impression_job(_impression(("tok:1", "iid:2"))),  # a replay inside the run
        _impression_job(_impression(("tok:3", "iid:3"))),
    ]
    writer._commit(fresh)
    assert [_outcome(j) for j in fresh] == [True, False, True]
    assert tried == ["_save_new_impressions"]
    tried.clear()
    again = [
        _impression_job(_impression(("tok:4", "iid:4"))),
        _impression_job(_impression(("tok:5", "iid:3"))),  # a replay of a stored impression
        _impression_job(_impression(("tok:6", "iid:6"))),
    ]
    writer._commit(again)
    assert [_outcome(j) for j in again] == [True, False, True]
    assert tried == ["_save_new_impressions", "_save_impressions"]
    assert writer.batched == 6
    rows, counters = _tables(conn)
    assert len(rows["impressions"]) == 4 and len(rows["billing_events"]) == 1
    keys = dict(r[:2] for r in rows["impression_keys"])
    assert keys["tok:5"] == keys["iid:3"] and keys["iid:2"] == keys["tok:1"]
    impressions = {r[:3]: r[3] for r in counters}[("ad", "ad-1", "impressions")]
    assert impressions == 4  # the undone first try left no bumps behind


def test_every_run_of_impressions_is_written_batched_not_only_the_first(tmp_path):
    """A run of impressions after another write (a hover, a housekeeping prune) goes
    through the batched forms too, in its own savepoint: a stored key makes the first form
    fail and the second write it, a refused job undoes only its run's try, and the rows,
    answers and counters are those of one job per transaction."""

    def jobs():
        return [
            _hover_job("tok:0"),
            _impression_job(_impression(("tok:1", "iid:1"), cpm_usd=2.0)),
            _impression_job(_impression(("tok:2", "iid:1"))),  # a replay inside the run
            _impression_job(_impression(("tok:3", "iid:3"))),
            _hover_job("tok:1"),
            _impression_job(_impression(("tok:4", "iid:0"))),  # a replay of a stored one
            _impression_job(_impression(("tok:5", "iid:5"), cpm_usd=3.0)),
            _hover_job("tok:5"),
            _impression_job(_impression(("tok:6",), kind="bogus")),  # the CHECK refuses it
            _impression_job(_impression(("tok:7", "iid:7"))),
        ]

    batched, single = _batched_and_one_by_one(tmp_path, ("tok:0", "iid:0"))
    jobs_a, jobs_b = jobs(), jobs()
    batched._commit(jobs_a)
    for job in jobs_b:
        single._commit([job])
    expected = [True, True, False, True, True, False, True, True, "IntegrityError", True]
    assert [_outcome(j) for j in jobs_a] == [_outcome(j) for j in jobs_b] == expected
    assert batched.batches == 2 and batched.batched == 3 + 2  # the last run went 1 by 1
    rows_a, counters_a = _tables(batched._conn)
    rows_b, counters_b = _tables(single._conn)
    assert rows_a == rows_b
    assert [r[:3] for r in counters_a] == [r[:3] for r in counters_b]
    assert [r[3] for r in counters_a] == pytest.approx([r[3] for r in counters_b])


def _gathering_writer(tmp_path, last_size, gap_s, max_s):
    from edge.store.events import CountingConnection
    from edge.store.sqlite import _Writer, connect

    conn = connect(tmp_path / "edge.db", factory=CountingConnection)
    writer = _Writer(conn)
    writer._last_size = last_size
    writer.gather_gap_s, writer.gather_max_s = gap_s, max_s
    return writer


def _fed(writer, items, every_s):
    """A thread handing ``items`` to the writer's queue one by one, ``every_s`` apart."""

    def feed():
        for item in items:
            time.sleep(every_s)
            writer._queue.put(item)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    return feeder


def test_a_batch_smaller_than_the_last_gathers_the_writes_that_follow(tmp_path):
    """After a batch of four, a batch begun by one write takes the next hand-overs as they
    come (each within the gap) until it holds four, then commits: one batch, not four."""
    writer = _gathering_writer(tmp_path, last_size=4, gap_s=5.0, max_s=30.0)
    feeder = _fed(writer, [["b"], ["c", "d"], ["e"]], every_s=0.02)
    batch, stopping = writer._gather(["a"])
    feeder.join()
    assert batch == ["a", "b", "c", "d"] and not stopping
    assert writer._queue.get_nowait() == ["e"]  # left for the next batch
    writer._conn.close()


def test_a_batch_no_smaller_than_the_last_waits_for_nothing(tmp_path):
    """One caller at a time: each batch is as large as the last, so none waits (with an
    hour's gap, waiting would not end within the join below)."""
    writer = _gathering_writer(tmp_path, last_size=1, gap_s=3600.0, max_s=3600.0)
    writer._queue.put(["b"])  # queued already: taken without waiting
    result = []
    gathering = threading.Thread(target=lambda: result.append(writer._gather(["a"])), daemon=True)
    gathering.start()
    gathering.join(timeout=10)
    assert not gathering.is_alive()
    assert result == [(["a", "b"], False)]
    assert writer._last_size == 2
    writer._conn.close()


def test_gathering_ends_at_a_gap_at_the_bound_and_at_stop(tmp_path):
    from edge.store.sqlite import _STOP

    # No more writes come: the batch ends after one gap, with what it holds.
    writer = _gathering_writer(tmp_path, last_size=32, gap_s=0.05, max_s=30.0)
    assert writer._gather(["a"]) == (["a"], False)
    assert writer._last_size == 1  # the next lone write waits for nothing
    writer._conn.close()
    # Writes keep coming within the gap: the bound ends the batch before they do.
    writer = _gathering_writer(tmp_path, last_size=10_000, gap_s=5.0, max_s=0.3)
    feeder = _fed(writer, [[i] for i in range(100)], every_s=0.01)
    batch, _ = writer._gather(["a"])
    assert 1 < len(batch) < 100
    feeder.join()
    writer._conn.close()
    # Stopping while gathering: the batch so far is committed, then the writer stops.
    writer = _gathering_writer(tmp_path, last_size=32, gap_s=5.0, max_s=30.0)
    feeder = _fed(writer, [["b"], _STOP, ["c"]], every_s=0.01)
    assert writer._gather(["a"]) == (["a", "b"], True)
    feeder.join()
    writer._conn.close()


def test_connections_read_through_a_map_and_keep_journals_in_memory(store):
    """Every connection maps the file and keeps savepoint journals in memory; the writer
    checkpoints the WAL every few thousand pages."""
    from edge.store import sqlite as backend

    def pragmas(conn):
        names = ("mmap_size", "temp_store", "wal_autocheckpoint")
        return [conn.execute(f"PRAGMA {n}").fetchone()[0] for n in names]

    reader = store.read_blocking(pragmas)
    writer = store.write_blocking(pragmas)
    assert reader[:2] == writer[:2] == [backend._MMAP_BYTES, 2]  # 2: MEMORY
    assert backend._MMAP_BYTES >= 64 << 20
    assert writer[2] == backend._CHECKPOINT_PAGES > 1000


def test_opening_waits_for_wal_mode_while_another_process_writes(tmp_path):
    # A second worker opening a new database while the first writes to it: changing the
    # journal mode is refused at once (no busy wait) until the writer commits; the open must
    # wait for it rather than fail the worker's start.
    import sqlite3
    import threading
    import time

    from edge.store.sqlite import connect

    path = tmp_path / "edge.db"
    first = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    first.execute("CREATE TABLE t (x)")
    first.execute("BEGIN IMMEDIATE")
    first.execute("INSERT INTO t VALUES (1)")
    threading.Timer(0.3, lambda: first.execute("COMMIT")).start()
    started = time.monotonic()
    second = connect(path)
    try:
        assert second.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert time.monotonic() - started >= 0.25  # it waited for the writer's commit
    finally:
        second.close()
        first.close()
