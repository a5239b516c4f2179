"""SQLite backend: WAL mode, one writer thread with group commit, a small reader pool.

The event loop never touches SQLite. Writes are queued to one thread that takes every job
waiting (and, when fewer are waiting than its last batch held, those that follow within a
fraction of a millisecond), runs each in its own savepoint inside one transaction, commits
once (one fsync for the whole group, ``synchronous=FULL``) and only then resolves the
callers' futures. So an acknowledged write is on disk, a failing job does not spoil its
neighbours, and a burst of beacons costs a few fsyncs instead of one each. Reads run on
pooled read-only connections, which WAL lets proceed while the writer commits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from edge.store.base import (
    CatalogueVersion,
    KeyRecord,
    Store,
    StoreUnavailable,
    TagVersionRecord,
)
from edge.store.events import (
    BATCHED,
    CountingConnection,
    SQLiteEventStore,
    flush_counts,
    runs_of,
)
from edge.store.matcher_state import SQLiteMatcherState
from edge.store.migrations import apply_migrations
from edge.store.turns import WriteTurns

log = logging.getLogger("edge.store")
T = TypeVar("T")
WriteFn = Callable[..., Any]

_BUSY_TIMEOUT_MS = 10_000  # several worker processes take turns at the write lock
_MAX_BATCH = 512
_MMAP_BYTES = 256 << 20  # beyond it, pages are read with read() as before
_CHECKPOINT_PAGES = 2000  # WAL pages between automatic checkpoints (SQLite's default: 1000)
# A batch smaller than the last one waits up to this long for each next hand-over of
# writes, and this long in all (see ``_Writer._gather``).
_GATHER_GAP_S = 0.0005
_GATHER_MAX_S = 0.003
_STOP = object()


@dataclass(slots=True)
class _Job:
    fn: WriteFn
    args: tuple[Any, ...]
    # Exactly one of these: a concurrent future (blocking callers) or an asyncio future with
    # its loop (``write``), resolved per batch with one loop callback (see ``_resolve``).
    future: cf.Future[Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    afuture: asyncio.Future[Any] | None = None


Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


def _resolve(outcomes: list[Outcome]) -> None:
    """Settle a committed batch's asyncio futures; runs on their event loop."""
    for future, result, exc in outcomes:
        if future.done():  # the caller was cancelled; the write stands regardless
            continue
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)


def create_private(path: Path) -> None:
    """Create the database file readable and writable by its owner only, unless it exists.
    It holds the token signing key and partner data; SQLite gives its -wal and -shm files
    the database file's mode. A file that exists keeps the mode its operator gave it."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def connect(
    path: Path, *, readonly: bool = False, factory: type[sqlite3.Connection] = sqlite3.Connection
) -> sqlite3.Connection:
    if not readonly:
        create_private(path)
    # isolation_level=None: we issue BEGIN/COMMIT ourselves.
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=5.0, factory=factory
    )
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    # Pages are read through a memory map of the file instead of a read() call each: the
    # dedupe keys are random, so every impression reads leaf pages a small page cache lacks.
    conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
    # Savepoint journals (one per write job) stay in memory instead of spilling to a file.
    conn.execute("PRAGMA temp_store = MEMORY")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    else:
        _use_wal(conn)
        # FULL: a commit is fsynced before it returns; group commit pays for it.
        conn.execute("PRAGMA synchronous = FULL")
        # A checkpoint copies each page once however many commits wrote it, and every page
        # read looks for its latest frame in the WAL index first: with a group commit
        # writing ~15 pages, mostly the same recent ones, 2,000 frames cost the writer less
        # CPU per impression than 4,000 or 16,000 (measured), and no more than 1,000.
        conn.execute(f"PRAGMA wal_autocheckpoint = {_CHECKPOINT_PAGES}")
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode (a no-op once it is). Changing the mode takes the file's
    exclusive lock, and a connection that holds a shared lock while another process writes
    is refused at once instead of waiting in the busy handler (SQLite's deadlock rule): two
    workers opening a new database together meet exactly that. So the change is retried
    until the busy timeout has passed."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.01)


class _Writer(threading.Thread):
    def __init__(self, conn: CountingConnection) -> None:
        super().__init__(name="edge-store-writer", daemon=True)
        self._conn = conn
        # The write lock, taken in turn with the other processes' writers of this file.
        self._turns = WriteTurns(Path(conn.execute("PRAGMA database_list").fetchone()[2]))
        # Items: lists of jobs (a tick's writes from one event loop, or one blocking write),
        # or _STOP.
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Per event loop, the writes its current tick submitted, handed over together.
        self._pending: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        # Writes a batch smaller than the last one waits for (see ``_gather``).
        self.gather_gap_s = _GATHER_GAP_S
        self.gather_max_s = _GATHER_MAX_S
        self._last_size = 0  # writes in the last batch
        self.batches = 0
        self.jobs = 0
        self.batched = 0  # jobs written through a batched form
        self.turn_failures = 0  # batches the write turns failed for (committed without)

    def submit(self, fn: Callable[..., T], args: tuple[Any, ...]) -> cf.Future[T]:
        future: cf.Future[T] = cf.Future()
        self._queue.put([_Job(fn, args, future)])
        return future

    def submit_async(self, fn: Callable[..., T], args: tuple[Any, ...]) -> asyncio.Future[T]:
        """Queue a write for the writer; the returned future settles after its batch's
        commit. The writes one tick of the event loop submits are handed to the writer
        together, at the start of the next tick (``_hand_over``): one queue item and one
        wake-up of the writer thread per tick instead of one per write, so the writer does
        not take the GIL from the loop in the middle of a tick to commit a batch of one."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = _Job(fn, args, None, loop, future)
        pending = self._pending.get(loop)
        if pending is None:
            self._pending[loop] = [job]
            loop.call_soon(self._hand_over, loop)
        else:
            pending.append(job)
        return future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        jobs = self._pending.pop(loop, None)
        if jobs:
            self._queue.put(jobs)

    def stop(self) -> None:
        # Writes submitted but not yet handed over go first: each caller is answered.
        for loop in list(self._pending):
            self._hand_over(loop)
        self._queue.put(_STOP)

    def run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                break
            batch, stopping = self._gather(list(first))
            self._commit(batch)
            if stopping:
                break
        self._conn.close()
        self._turns.close()

    def _gather(self, batch: list[_Job]) -> tuple[list[_Job], bool]:
        """The batch that ``batch`` begins, and whether the writer stops after it: every
        write queued now, and while the batch is smaller than the last one, the writes that
        follow within ``gather_gap_s`` of each other, for at most ``gather_max_s`` in all.

        The callers a commit answers send their next writes while the event loop works
        through their requests, a few per tick, each tick handed over on its own; taken as
        they come, a burst of 32 became a batch of 31 and one of 1 as often as one of 32,
        and every batch pays the same commit (its fsync, the counters' upserts) however
        few it holds. A batch no smaller than the last one (one caller at a time, a load
        that is not falling) waits for nothing."""
        deadline: float | None = None
        while len(batch) < _MAX_BATCH:
            try:
                if len(batch) >= self._last_size:
                    nxt = self._queue.get_nowait()
                else:
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + self.gather_max_s
                    wait = min(self.gather_gap_s, deadline - now)
                    if wait <= 0:
                        break
                    nxt = self._queue.get(timeout=wait)
            except queue.Empty:
                break
            if nxt is _STOP:
                return batch, True
            batch += nxt
        self._last_size = len(batch)
        return batch, False

    def _commit(self, batch: list[_Job]) -> None:
        # The turns only make several workers' writers fair; SQLite's own lock keeps the
        # writes right. So a lock file that fails (a full or read-only folder, a lost
        # descriptor) costs fairness, never this thread: every later batch would wait
        # for an answer forever.
        try:
            taken = self._turns.take()
        except OSError as exc:
            self._turns_failed(exc)
            taken = False
        try:
            self._commit_in_turn(batch)
        finally:
            if taken:
                try:
                    self._turns.give()
                except OSError as exc:
                    self._turns_failed(exc)

    def _turns_failed(self, exc: OSError) -> None:
        self.turn_failures += 1
        if self.turn_failures == 1:  # once per writer, not once per batch
            log.warning("write turns failed, committing without them: %s", exc)

    def _commit_in_turn(self, batch: list[_Job]) -> None:
        conn = self._conn
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for i, run in enumerate(runs_of(batch)):
                if len(run) > 1 and run[0].fn in BATCHED:
                    # The opening run is undone by rolling the transaction back; a later
                    # one, which must keep what came before it, by its own savepoint.
                    written = self._opening_run if i == 0 else self._saved_run
                    if written(run, outcomes):
                        continue
                for job in run:
                    self._run_one(job, outcomes)
            flush_counts(conn)  # the batch's counter bumps, in the same transaction
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.deferred_counts.clear()
            log.error("store commit failed for %d writes: %s", len(batch), exc)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            message = f"the store could not commit: {exc}"
            self._settle([(job, None, StoreUnavailable(message)) for job in batch])
            return
        self.batches += 1
        self.jobs += len(batch)
        self._settle(outcomes)

    def _run_one(self, job: _Job, outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
        conn = self._conn
        mark = conn.deferred_counts.mark()
        conn.execute("SAVEPOINT job")
        try:
            result = job.fn(conn, *job.args)
        except Exception as exc:  # this job only: undo it, keep the others
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            conn.deferred_counts.drop_since(mark)
            outcomes.append((job, None, exc))
        else:
            conn.execute("RELEASE job")
            outcomes.append((job, result, None))

    def _opening_run(
        self, run: list[_Job], outcomes: list[tuple[_Job, Any, BaseException | None]]
    ) -> bool:
        """The transaction's first run of one function's jobs, through that function's
        batched forms (``BATCHED``, tried in order) when it has them; False (nothing kept)
        when it has none or every form failed: after a failed form the transaction, which
        held nothing else, is begun again, and in the end the caller runs the jobs one by
        one, so a failure stays its own job's.

        No savepoint: one over a whole batch copies every page the run touches into the
        savepoint's journal (when that journal spilled to a file, it cost more than the
        batch saved, measured); the first run is undone by rolling back the transaction.
        """
        conn = self._conn

        def begin_again() -> None:
            conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")

        return self._batched_run(run, outcomes, begin_again)

    def _saved_run(
        self, run: list[_Job], outcomes: list[tuple[_Job, Any, BaseException | None]]
    ) -> bool:
        """A later run of one function's jobs through its batched forms, in one savepoint
        (the jobs one by one would each take their own); False (nothing kept) when every
        form failed, and the caller then runs the jobs one by one."""
        conn = self._conn
        conn.execute("SAVEPOINT run")
        kept = self._batched_run(run, outcomes, lambda: conn.execute("ROLLBACK TO run"))
        conn.execute("RELEASE run")
        return kept

    def _batched_run(
        self,
        run: list[_Job],
        outcomes: list[tuple[_Job, Any, BaseException | None]],
        undo: Callable[[], object],
    ) -> bool:
        """``run`` through its function's batched forms, in order, until one writes it whole;
        ``undo`` takes back what a failed form wrote. False when none did."""
        conn = self._conn
        args = [job.args for job in run]
        for many in BATCHED.get(run[0].fn, ()):
            mark = conn.deferred_counts.mark()
            try:
                results = many(conn, args)
                if len(results) != len(run):
                    raise ValueError(f"{len(results)} results for {len(run)} jobs")
            except Exception as exc:
                log.debug("a batch of %d writes failed (%s); trying without it", len(run), exc)
                conn.deferred_counts.drop_since(mark)
                undo()
                continue
            outcomes.extend((job, result, None) for job, result in zip(run, results, strict=True))
            self.batched += len(run)
            return True
        return False

    @staticmethod
    def _settle(outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
        # One call_soon_threadsafe per event loop and batch (each wakes the loop through its
        # self-pipe) instead of one per job, which is what asyncio.wrap_future would cost.
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for job, result, exc in outcomes:
            if job.loop is not None and job.afuture is not None:
                by_loop.setdefault(job.loop, []).append((job.afuture, result, exc))
                continue
            future = job.future
            if future is None or not future.set_running_or_notify_cancel():
                continue  # cancelled before it ran: nobody waits for it
            if exc is None:
                future.set_result(result)
            else:
                future.set_exception(exc)
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, settled)
            except RuntimeError:  # that loop is closed: nobody is left to tell
                log.warning("store writes committed for a closed event loop: %d", len(settled))


class SQLiteStore(SQLiteMatcherState, SQLiteEventStore, Store):
    """The default store. ``path`` is created with its folder when missing."""

    def __init__(self, path: Path | str, *, readers: int = 2) -> None:
        self.path = Path(path)
        self._readers = readers
        self._writer: _Writer | None = None
        self._pool: cf.ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._read_conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        await asyncio.to_thread(self.open_blocking)

    def open_blocking(self) -> None:
        if self._writer is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(self.path, factory=CountingConnection)
        try:
            apply_migrations(conn)
        except BaseException:
            conn.close()
            raise
        assert isinstance(conn, CountingConnection)  # what the factory makes
        self._writer = _Writer(conn)
        self._writer.start()
        self._pool = cf.ThreadPoolExecutor(self._readers, thread_name_prefix="edge-store-read")

    async def close(self) -> None:
        await asyncio.to_thread(self.close_blocking)

    def close_blocking(self) -> None:
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        writer.stop()
        writer.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            for conn in self._read_conns:
                conn.close()
            self._read_conns.clear()
        self._local = threading.local()

    @property
    def group_commit_stats(self) -> tuple[int, int]:
        """(transactions committed, writes in them) since open."""
        w = self._writer
        return (w.batches, w.jobs) if w else (0, 0)

    # -- the two primitives every domain method is built on ----------------------------------

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in the writer thread; return after it is committed."""
        return await self.write_soon(fn, *args)

    def write_soon(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if self._writer is None:
            raise StoreUnavailable("the store is not open")
        return self._writer.submit_async(fn, args)

    def write_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return self._submit(fn, args).result()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a read-only pooled connection."""
        if self._pool is None:
            raise StoreUnavailable("the store is not open")
        return await asyncio.wrap_future(self._pool.submit(self._run_read, fn, args))

    def read_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            raise StoreUnavailable("the store is not open")
        return self._pool.submit(self._run_read, fn, args).result()

    def _submit(self, fn: Callable[..., T], args: tuple[Any, ...]) -> cf.Future[T]:
        if self._writer is None:
            raise StoreUnavailable("the store is not open")
        return self._writer.submit(fn, args)

    def _run_read(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, readonly=True)
            self._local.conn = conn
            with self._lock:
                self._read_conns.append(conn)
        try:
            return fn(conn, *args)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the store could not answer: {exc}") from exc

    # -- meta ------------------------------------------------------------------------------

    async def get_meta(self, name: str) -> bytes | None:
        return await self.read(_get_meta, name)

    async def put_meta_if_absent(self, name: str, value: bytes) -> bytes:
        return await self.write(_put_meta_if_absent, name, value)

    # -- keys ------------------------------------------------------------------------------

    async def insert_key(self, record: KeyRecord) -> None:
        await self.write(_insert_key, record)

    async def key_by_lookup(self, lookup: str) -> KeyRecord | None:
        return await self.read(_key_where, "lookup", lookup)

    async def key_by_id(self, key_id: str) -> KeyRecord | None:
        return await self.read(_key_where, "key_id", key_id)

    async def list_keys(self) -> list[KeyRecord]:
        return await self.read(_list_keys)

    async def keys_in_family(self, family: str) -> list[KeyRecord]:
        return await self.read(_keys_in_family, family)

    async def rotate_key(
        self,
        old_key_id: str,
        new: KeyRecord,
        secondary_expires_at: float,
        now: float,
        expire_key_ids: tuple[str, ...] = (),
    ) -> bool:
        return await self.write(
            _rotate_key, old_key_id, new, secondary_expires_at, now, expire_key_ids
        )

    async def revoke_key(self, key_id: str, at: float) -> bool:
        return await self.write(_revoke_key, key_id, at)

    async def end_session(self, session_id: str, expires_at: float, now: float) -> None:
        await self.write(_end_session, session_id, expires_at, now)

    async def session_ended(self, session_id: str) -> bool:
        return await self.read(_session_ended, session_id)

    # -- the live catalogue -----------------------------------------------------------------

    async def put_catalogue(
        self, content_hash: str, body: bytes, at: float, *, keep_previous: int
    ) -> int:
        return await self.write(_put_catalogue, content_hash, body, at, keep_previous)

    async def live_catalogue(self) -> tuple[int, str] | None:
        return await self.read(_live_catalogue)

    async def catalogue_body(self, version: int) -> bytes | None:
        return await self.read(_catalogue_body, version)

    async def catalogue_versions(self) -> list[CatalogueVersion]:
        return await self.read(_catalogue_versions)

    # -- browser tag versions ----------------------------------------------------------------

    async def put_tag_version(self, version: str, body: bytes, integrity: str, at: float) -> float:
        return await self.write(_put_tag_version, version, body, integrity, at)

    async def tag_versions(self) -> list[TagVersionRecord]:
        return await self.read(_tag_versions)

    async def tag_version_body(self, version: str) -> bytes | None:
        return await self.read(_tag_version_body, version)


# -- SQL, run in the writer thread or a reader ----------------------------------------------

_KEY_COLUMNS = (
    "key_id, lookup, key_hash, env, product, name, created_at, expires_at, revoked_at, "
    "replaced_by, family_id"
)


def _get_meta(conn: sqlite3.Connection, name: str) -> bytes | None:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else bytes(row[0])


def _put_meta_if_absent(conn: sqlite3.Connection, name: str, value: bytes) -> bytes:
    conn.execute("INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)", (name, value))
    return bytes(conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()[0])


def _insert_key(conn: sqlite3.Connection, r: KeyRecord) -> None:
    conn.execute(
        f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            r.key_id,
            r.lookup,
            r.key_hash,
            r.env,
            r.product,
            r.name,
            r.created_at,
            r.expires_at,
            r.revoked_at,
            r.replaced_by,
            r.family_id,
        ),
    )


def _key_where(conn: sqlite3.Connection, column: str, value: str) -> KeyRecord | None:
    assert column in ("lookup", "key_id")
    row = conn.execute(
        f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE {column} = ?",
        (value,),
    ).fetchone()
    return None if row is None else KeyRecord(*row)


def _list_keys(conn: sqlite3.Connection) -> list[KeyRecord]:
    rows = conn.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, key_id")
    return [KeyRecord(*row) for row in rows]


def _keys_in_family(conn: sqlite3.Connection, family: str) -> list[KeyRecord]:
    rows = conn.execute(
        f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE family_id = ? OR key_id = ? "
        "ORDER BY created_at, key_id",
        (family, family),
    )
    return [KeyRecord(*row) for row in rows]


def _rotate_key(
    conn: sqlite3.Connection,
    old_id: str,
    new: KeyRecord,
    expires_at: float,
    now: float,
    expire_ids: tuple[str, ...],
) -> bool:
    old = _key_where(conn, "key_id", old_id)
    if old is None or old.status(now) != "active":
        return False
    _insert_key(conn, new)
    for key_id in expire_ids:
        conn.execute(
            "UPDATE api_keys SET expires_at = ? WHERE key_id = ? AND expires_at > ?",
            (now, key_id, now),
        )
    conn.execute(
        "UPDATE api_keys SET expires_at = ?, replaced_by = ? WHERE key_id = ?",
        (expires_at, new.key_id, old_id),
    )
    return True


def _revoke_key(conn: sqlite3.Connection, key_id: str, at: float) -> bool:
    cur = conn.execute(
        "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", (at, key_id)
    )
    return cur.rowcount == 1


def _end_session(conn: sqlite3.Connection, session_id: str, expires_at: float, now: float) -> None:
    conn.execute("DELETE FROM ended_sessions WHERE expires_at <= ?", (now,))
    conn.execute(
        "INSERT OR IGNORE INTO ended_sessions (session_id, expires_at) VALUES (?, ?)",
        (session_id, expires_at),
    )


def _session_ended(conn: sqlite3.Connection, session_id: str) -> bool:
    row = conn.execute("SELECT 1 FROM ended_sessions WHERE session_id = ?", (session_id,))
    return row.fetchone() is not None


def _put_catalogue(
    conn: sqlite3.Connection, content_hash: str, body: bytes, at: float, keep_previous: int
) -> int:
    cur = conn.execute(
        "INSERT INTO catalogue_versions (content_hash, body, loaded_at) VALUES (?, ?, ?)",
        (content_hash, body, at),
    )
    assert cur.lastrowid is not None
    conn.execute(_PRUNE_CATALOGUES, (keep_previous + 1,))
    return int(cur.lastrowid)


_PRUNE_CATALOGUES = (
    "DELETE FROM catalogue_versions WHERE version NOT IN"
    " (SELECT version FROM catalogue_versions ORDER BY version DESC LIMIT ?)"
)


def _live_catalogue(conn: sqlite3.Connection) -> tuple[int, str] | None:
    row = conn.execute(
        "SELECT version, content_hash FROM catalogue_versions ORDER BY version DESC LIMIT 1"
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def _catalogue_body(conn: sqlite3.Connection, version: int) -> bytes | None:
    row = conn.execute(
        "SELECT body FROM catalogue_versions WHERE version = ?", (version,)
    ).fetchone()
    return None if row is None else bytes(row[0])


def _catalogue_versions(conn: sqlite3.Connection) -> list[CatalogueVersion]:
    rows = conn.execute(
        "SELECT version, content_hash, loaded_at FROM catalogue_versions ORDER BY version DESC"
    )
    return [CatalogueVersion(int(v), str(h), float(at)) for v, h, at in rows]


def _put_tag_version(
    conn: sqlite3.Connection, version: str, body: bytes, integrity: str, at: float
) -> float:
    conn.execute(
        "INSERT INTO tag_versions (version, body, integrity, built_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (version) DO NOTHING",
        (version, body, integrity, at),
    )
    row = conn.execute("SELECT built_at FROM tag_versions WHERE version = ?", (version,)).fetchone()
    return float(row[0])


def _tag_versions(conn: sqlite3.Connection) -> list[TagVersionRecord]:
    rows = conn.execute(
        "SELECT version, integrity, built_at FROM tag_versions ORDER BY built_at, version"
    ).fetchall()
    return [TagVersionRecord(str(v), str(i), float(b)) for v, i, b in rows]


def _tag_version_body(conn: sqlite3.Connection, version: str) -> bytes | None:
    row = conn.execute("SELECT body FROM tag_versions WHERE version = ?", (version,)).fetchone()
    return None if row is None else bytes(row[0])
