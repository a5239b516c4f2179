"""PostgreSQL backend: several edge nodes on one database (``EDGE_DB=postgresql://...``).

Same interface and same behaviour as the SQLite backend; only the storage differs.

- Writes go through one group-commit task per process: it takes every job waiting, runs
  each in its own savepoint inside one transaction, applies the batch's counter bumps
  summed (one upsert, in key order so two nodes never deadlock on counters), commits once
  and only then resolves the callers. An acknowledged write is committed. An impression
  alone is one statement (one round trip) and needs no savepoint of its own: if it fails,
  the batch runs again without it. A run of consecutive impressions is written at once
  (``_save_impressions``: two statements for the whole run, in one savepoint); if that
  fails or meets a key another node committed meanwhile, the run is undone and written
  one impression at a time, so the outcome is always that of one by one.
- Uniqueness lives in the database (primary keys on dedupe keys, hover tokens), so an
  impression counts once however many nodes receive its beacons: a node that loses the
  race for a key sees the winner's row once the winner commits, and answers "replay".
- A transaction the server aborts for a deadlock or a serialisation failure is retried
  whole (each job is a pure function of its arguments); a connection that drops, a server
  that restarts or refuses is ``StoreUnavailable`` (the routes answer 503 + Retry-After),
  and the pool reconnects by itself. Once the database has failed to answer, one request
  at a time waits for it (up to ``_CONNECT_TIMEOUT_S``) and the others fail at once, until
  one gets a connection: an outage is answered in milliseconds, not in 5 s per request
  (which let waiting connections pile up against the connection limit).
- Reads take a pooled connection in autocommit mode; nothing blocks the event loop
  (psycopg's async connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from edge.counters import CountBuffer, CountRow, DayRow, split_rows
from edge.origins import normalise_origin
from edge.store.base import (
    CatalogueVersion,
    KeyRecord,
    Store,
    StoreUnavailable,
    TagVersionRecord,
)
from edge.store.events import (
    TAG_ID_PREFIX,
    Click,
    ClickConflict,
    Conversion,
    Hover,
    Impression,
    ImpressionKind,
    PlacementFailure,
    Publisher,
    StoredClick,
    StoredImpression,
    pricing_columns,
    runs_of,
    valid_publisher_id,
)
from edge.store.matcher_state import DisablePair
from edge.store.migrations import apply_postgres_migrations
from matcher.state import FREQUENCY_WINDOW_SECONDS, Backoff, ThreadState

log = logging.getLogger("edge.store")
T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]

_CHANNEL = "edge_changes"
_MAX_BATCH = 512
_RETRIES = 5  # deadlock / serialisation failure: the whole batch runs again
_RETRIED = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
# The pause before the next try, in seconds: drawn from (0, base * 2**try) so that two nodes
# whose batches deadlocked on the same keys do not retry in step and meet again.
_RETRY_PAUSE = 0.01
_CONNECT_TIMEOUT_S = 5.0  # a pool that cannot hand out a connection in this time is down
# The pool retries a lost connection with a pause that doubles each time (1, 2, 4, 8 s ...),
# so after a long outage its next try could come as long after the database is back as the
# outage lasted. It gives a run of tries up after this long instead, and the next request
# that waits starts a new run from a 1 s pause: a node is back within a few seconds.
_RECONNECT_RUN_S = 8.0
_STOP = object()


def is_postgres_url(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


class WriteConn:
    """What a write job receives: the batch's connection and its deferred counter bumps."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.counts = CountBuffer()


WriteFn = Callable[..., Awaitable[Any]]


def _new_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True)
class _Job:
    fn: WriteFn
    args: tuple[Any, ...]
    savepoint: bool = True
    future: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class _JobFailed(Exception):
    """A job run without a savepoint failed; the batch's transaction is rolled back."""

    def __init__(self, job: _Job, error: Exception) -> None:
        super().__init__(str(error))
        self.job = job
        self.error = error


class PostgresStore(Store):
    """The store for several nodes. ``url`` is a libpq connection URL."""

    def __init__(self, url: str, *, pool_size: int = 4) -> None:
        self.url = url
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._callbacks: list[Callable[[str, str], None]] = []
        self.batches = 0
        self.jobs = 0
        self.reruns = 0  # batches run again after a job without a savepoint failed
        self.batched = 0  # jobs written through a batched form
        # Set when the database failed to answer; cleared by the next use of a connection
        # that succeeds. While set, only one caller at a time (the probe) may try.
        self._down = False
        self._probing = False

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self.url)!r})"

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            async with await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=int(_CONNECT_TIMEOUT_S)
            ) as conn:
                await apply_postgres_migrations(conn)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot open {redact_url(self.url)}: {exc}") from exc
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.url,
            min_size=1,
            max_size=self._pool_size,
            timeout=_CONNECT_TIMEOUT_S,
            reconnect_timeout=_RECONNECT_RUN_S,
            kwargs={"autocommit": True},
            open=False,
            name="edge-store",
        )
        await pool.open(wait=False)
        self._pool = pool
        self._queue = asyncio.Queue()
        self._writer = asyncio.create_task(self._write_loop(), name="edge-store-writer")
        self._listening = asyncio.Event()
        self._listener = asyncio.create_task(self._listen_loop(), name="edge-store-listener")

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        writer, self._writer = self._writer, None
        if writer is not None and self._queue is not None:
            await self._queue.put(_STOP)
            await writer
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def group_commit_stats(self) -> tuple[int, int]:
        """(transactions committed, writes in them) since open."""
        return self.batches, self.jobs

    # -- the two primitives ----------------------------------------------------------------

    async def write(self, fn: WriteFn, *args: Any, savepoint: bool = True) -> Any:
        """Run ``await fn(wconn, *args)`` in the next batch; return after its COMMIT.

        ``savepoint=False`` saves the job's SAVEPOINT and RELEASE round trips; for a job
        whose writes stand or fall together (one statement, or its own undo). If it fails,
        the whole transaction is lost, so the batch runs again without it.
        """
        if self._queue is None or self._writer is None or self._writer.done():
            raise StoreUnavailable("the store is not open")
        job = _Job(fn, args, savepoint)
        await self._queue.put(job)
        return await asyncio.shield(job.future)

    async def read(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(conn, *args)`` on a pooled autocommit connection."""
        async with self._connection() as conn:
            return await fn(conn, *args)

    @contextlib.asynccontextmanager
    async def _connection(self, retried: bool = False) -> AsyncIterator[Conn]:
        """A pooled connection; a database that cannot answer is ``StoreUnavailable``.
        ``retried``: the caller runs the transaction again after a deadlock or a
        serialisation failure, so those pass through as they are (psycopg files them
        under ``OperationalError``, which would otherwise make them a 503 at once)."""
        if self._pool is None:
            raise StoreUnavailable("the store is not open")
        probe = self._down
        if probe and self._probing:
            raise StoreUnavailable("the database is not answering (another request is checking)")
        self._probing = self._probing or probe
        try:
            async with self._pool.connection() as conn:
                yield conn
            self._down = False  # it answered (a connection handed out may still be broken)
        except PoolTimeout as exc:
            self._down = True
            raise StoreUnavailable("the database did not answer in time") from exc
        except psycopg.OperationalError as exc:
            if retried and isinstance(exc, _RETRIED):
                raise
            self._down = True
            raise StoreUnavailable(f"the database could not answer: {exc}") from exc
        finally:
            if probe:
                self._probing = False

    async def _write_loop(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            first = await queue.get()
            if first is _STOP:
                return
            batch: list[_Job] = [first]
            stopping = False
            while len(batch) < _MAX_BATCH and not queue.empty():
                nxt = queue.get_nowait()
                if nxt is _STOP:
                    stopping = True
                    break
                batch.append(nxt)
            try:
                await self._commit(batch)
            except Exception as exc:  # never let the writer die: fail this batch only
                log.error("store commit failed for %d writes: %s", len(batch), exc)
                _settle([(job, None, StoreUnavailable(f"the store could not commit: {exc}"))
                         for job in batch])  # fmt: skip
            if stopping:
                return

    async def _commit(self, batch: list[_Job]) -> None:
        failed: list[tuple[_Job, Any, BaseException | None]] = []
        attempt = 0
        isolate = False  # every job in a savepoint, whatever it asked for
        while batch and attempt < _RETRIES:
            try:
                outcomes = await self._run_batch(batch, isolate)
            except _JobFailed as exc:  # a job without a savepoint failed: run the rest again
                failed.append((exc.job, None, exc.error))
                batch = [job for job in batch if job is not exc.job]
                # With savepoints this time: another failing job then fails alone, and the
                # batch is not re-run once per failing job.
                isolate = True
                self.reruns += 1
                continue
            except _RETRIED as exc:
                log.info("store batch retried after %s (attempt %d)", type(exc).__name__, attempt)
                attempt += 1
                pause = random.uniform(0, _RETRY_PAUSE * 2**attempt)  # noqa: S311  # nosec B311
                await asyncio.sleep(pause)
                continue
            except (psycopg.OperationalError, StoreUnavailable, PoolTimeout) as exc:
                message = f"the store could not commit: {exc}"
                _settle([*failed, *((job, None, StoreUnavailable(message)) for job in batch)])
                return
            self.batches += 1
            self.jobs += len(batch)
            _settle([*failed, *outcomes])
            return
        log.warning(
            "store batch of %d writes given up after %d deadlocks or serialisation failures: "
            "answered 503 (retry)",
            len(batch),
            attempt,
        )
        _settle([*failed, *((job, None, StoreUnavailable("the store could not commit: contention"))
                            for job in batch)])  # fmt: skip

    async def _run_batch(
        self, batch: list[_Job], isolate: bool = False
    ) -> list[tuple[_Job, Any, BaseException | None]]:
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        async with self._connection(retried=True) as conn, conn.transaction():
            wconn = WriteConn(conn)
            for run in runs_of(batch):
                many = _BATCHED.get(run[0].fn) if len(run) > 1 else None
                if many is not None and await self._run_many(wconn, many, run, outcomes):
                    continue
                for job in run:
                    await _run_one(wconn, job, job.savepoint or isolate, outcomes)
            await _flush_counts(conn, wconn.counts.take())
        return outcomes

    async def _run_many(
        self,
        wconn: WriteConn,
        many: Callable[[WriteConn, list[tuple[Any, ...]]], Awaitable[list[Any]]],
        run: list[_Job],
        outcomes: list[tuple[_Job, Any, BaseException | None]],
    ) -> bool:
        """A run of one function's jobs through its batched form, in a savepoint; False
        (nothing kept) when that failed, and the caller then runs them one by one, so a
        failure stays its own job's."""
        mark = wconn.counts.mark()
        try:
            async with wconn.conn.transaction():
                results = await many(wconn, [job.args for job in run])
                if len(results) != len(run):
                    raise ValueError(f"{len(results)} results for {len(run)} jobs")
        except _RETRIED:
            raise  # the transaction is lost: retry the whole batch
        except psycopg.OperationalError:
            raise
        except Exception as exc:
            log.debug("a batch of %d writes failed (%s); one by one instead", len(run), exc)
            wconn.counts.drop_since(mark)
            return False
        outcomes.extend((job, result, None) for job, result in zip(run, results, strict=True))
        self.batched += len(run)
        return True

    # -- what nodes share ------------------------------------------------------------------

    async def take_rate(
        self, bucket: str, now: float, interval: float, tolerance: float
    ) -> tuple[bool, float] | None:
        # One statement, one round trip, autocommit (an UNLOGGED row, never billing): the
        # upsert moves the TAT only when the bucket has room; the outer SELECT reads the
        # row as it was before this statement, which is the refusal's TAT.
        row = await self.read(
            _one,
            "WITH moved AS ("
            " INSERT INTO rate_buckets AS b (bucket, tat) VALUES (%(b)s, %(now)s + %(i)s)"
            " ON CONFLICT (bucket) DO UPDATE SET tat = GREATEST(b.tat, %(now)s) + %(i)s"
            " WHERE GREATEST(b.tat, %(now)s) - %(now)s <= %(tol)s"
            " RETURNING tat)"
            " SELECT (SELECT tat FROM moved), (SELECT tat FROM rate_buckets WHERE bucket = %(b)s)",
            {"b": bucket, "now": now, "i": interval, "tol": tolerance},
        )
        assert row is not None
        if row[0] is not None:
            return True, float(row[0])
        return False, float(row[1])

    async def prune_rate_buckets(self, idle_before: float) -> int:
        async def prune(conn: Conn) -> int:
            cur = await conn.execute("DELETE FROM rate_buckets WHERE tat < %s", (idle_before,))
            return cur.rowcount

        return await self.read(prune)

    async def announce(self, topic: str, payload: str = "") -> None:
        await self.read(_one, "SELECT pg_notify(%s, %s)", (_CHANNEL, f"{topic}:{payload}"))

    def on_change(self, callback: Callable[[str, str], None]) -> None:
        self._callbacks.append(callback)

    async def wait_listening(self, timeout: float = 10.0) -> None:
        """Until the change listener is connected (tests: announcements are not queued)."""
        await asyncio.wait_for(self._listening.wait(), timeout)

    def _deliver(self, topic: str, payload: str) -> None:
        for callback in self._callbacks:
            try:
                callback(topic, payload)
            except Exception:  # one listener's bug must not stop the others
                log.exception("change callback failed for %s", topic)

    async def _listen_loop(self) -> None:
        """LISTEN on its own connection; reconnect with a pause when it drops."""
        first = True
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=int(_CONNECT_TIMEOUT_S)
                ) as conn:
                    await conn.execute(f"LISTEN {_CHANNEL}".encode())
                    self._listening.set()
                    if not first:  # announcements made while we were away are lost
                        self._deliver("*", "")
                    first = False
                    async for note in conn.notifies():
                        topic, _, payload = note.payload.partition(":")
                        self._deliver(topic, payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._listening.clear()
                log.warning("change listener lost the database (%s); reconnecting", exc)
                await asyncio.sleep(1.0)

    # -- meta ------------------------------------------------------------------------------

    async def get_meta(self, name: str) -> bytes | None:
        row = await self.read(_one, "SELECT value FROM meta WHERE name = %s", (name,))
        return None if row is None else bytes(row[0])

    async def put_meta_if_absent(self, name: str, value: bytes) -> bytes:
        async def put(w: WriteConn) -> bytes:
            await w.conn.execute(
                "INSERT INTO meta (name, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (name, value),
            )
            row = await _one(w.conn, "SELECT value FROM meta WHERE name = %s", (name,))
            assert row is not None
            return bytes(row[0])

        result: bytes = await self.write(put)
        return result

    # -- keys ------------------------------------------------------------------------------

    async def insert_key(self, record: KeyRecord) -> None:
        await self.write(_insert_key, record)

    async def key_by_lookup(self, lookup: str) -> KeyRecord | None:
        return await self.read(_key_where, "lookup", lookup)

    async def key_by_id(self, key_id: str) -> KeyRecord | None:
        return await self.read(_key_where, "key_id", key_id)

    async def list_keys(self) -> list[KeyRecord]:
        rows = await self.read(
            _all, f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, key_id", ()
        )
        return [KeyRecord(*r) for r in rows]

    async def keys_in_family(self, family: str) -> list[KeyRecord]:
        rows = await self.read(
            _all,
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE family_id = %s OR key_id = %s "
            "ORDER BY created_at, key_id",
            (family, family),
        )
        return [KeyRecord(*r) for r in rows]

    async def rotate_key(
        self,
        old_key_id: str,
        new: KeyRecord,
        secondary_expires_at: float,
        now: float,
        expire_key_ids: tuple[str, ...] = (),
    ) -> bool:
        async def rotate(w: WriteConn) -> bool:
            row = await _one(
                w.conn,
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = %s FOR UPDATE",
                (old_key_id,),
            )
            if row is None or KeyRecord(*row).status(now) != "active":
                return False
            await _insert_key(w, new)
            if expire_key_ids:
                await w.conn.execute(
                    "UPDATE api_keys SET expires_at = %s "
                    "WHERE key_id = ANY(%s) AND expires_at > %s",
                    (now, list(expire_key_ids), now),
                )
            await w.conn.execute(
                "UPDATE api_keys SET expires_at = %s, replaced_by = %s WHERE key_id = %s",
                (secondary_expires_at, new.key_id, old_key_id),
            )
            return True

        result: bool = await self.write(rotate)
        return result

    async def revoke_key(self, key_id: str, at: float) -> bool:
        async def revoke(w: WriteConn) -> bool:
            cur = await w.conn.execute(
                "UPDATE api_keys SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL",
                (at, key_id),
            )
            return cur.rowcount == 1

        result: bool = await self.write(revoke)
        return result

    async def end_session(self, session_id: str, expires_at: float, now: float) -> None:
        async def end(w: WriteConn) -> None:
            await w.conn.execute("DELETE FROM ended_sessions WHERE expires_at <= %s", (now,))
            await w.conn.execute(
                "INSERT INTO ended_sessions (session_id, expires_at) VALUES (%s, %s) "
                "ON CONFLICT (session_id) DO NOTHING",
                (session_id, expires_at),
            )

        await self.write(end)

    async def session_ended(self, session_id: str) -> bool:
        row = await self.read(
            _one, "SELECT 1 FROM ended_sessions WHERE session_id = %s", (session_id,)
        )
        return row is not None

    # -- the live catalogue -----------------------------------------------------------------

    async def put_catalogue(
        self, content_hash: str, body: bytes, at: float, *, keep_previous: int
    ) -> int:
        async def put(w: WriteConn) -> int:
            row = await _one(
                w.conn,
                "INSERT INTO catalogue_versions (content_hash, body, loaded_at) "
                "VALUES (%s, %s, %s) RETURNING version",
                (content_hash, body, at),
            )
            assert row is not None
            await w.conn.execute(
                "DELETE FROM catalogue_versions WHERE version NOT IN"
                " (SELECT version FROM catalogue_versions ORDER BY version DESC LIMIT %s)",
                (keep_previous + 1,),
            )
            return int(row[0])

        result: int = await self.write(put)
        return result

    async def live_catalogue(self) -> tuple[int, str] | None:
        row = await self.read(
            _one,
            "SELECT version, content_hash FROM catalogue_versions ORDER BY version DESC LIMIT 1",
            (),
        )
        return None if row is None else (int(row[0]), str(row[1]))

    async def catalogue_body(self, version: int) -> bytes | None:
        row = await self.read(
            _one, "SELECT body FROM catalogue_versions WHERE version = %s", (version,)
        )
        return None if row is None else bytes(row[0])

    async def catalogue_versions(self) -> list[CatalogueVersion]:
        rows = await self.read(
            _all,
            "SELECT version, content_hash, loaded_at FROM catalogue_versions ORDER BY version DESC",
            (),
        )
        return [CatalogueVersion(int(v), str(h), float(at)) for v, h, at in rows]

    # -- browser tag versions ----------------------------------------------------------------

    async def put_tag_version(self, version: str, body: bytes, integrity: str, at: float) -> float:
        async def put(w: WriteConn) -> float:
            await w.conn.execute(
                "INSERT INTO tag_versions (version, body, integrity, built_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (version) DO NOTHING",
                (version, body, integrity, at),
            )
            row = await _one(
                w.conn, "SELECT built_at FROM tag_versions WHERE version = %s", (version,)
            )
            assert row is not None
            return float(row[0])

        result: float = await self.write(put)
        return result

    async def tag_versions(self) -> list[TagVersionRecord]:
        rows = await self.read(
            _all,
            "SELECT version, integrity, built_at FROM tag_versions ORDER BY built_at, version",
            (),
        )
        return [TagVersionRecord(str(v), str(i), float(b)) for v, i, b in rows]

    async def tag_version_body(self, version: str) -> bytes | None:
        row = await self.read(_one, "SELECT body FROM tag_versions WHERE version = %s", (version,))
        return None if row is None else bytes(row[0])

    # -- events ----------------------------------------------------------------------------

    async def save_impression(
        self, imp: Impression, billing_usd: float | None, counts: Sequence[CountRow]
    ) -> bool:
        if not imp.dedupe_keys:
            raise ValueError("an impression needs at least one dedupe key")
        result: bool = await self.write(
            _save_impression, imp, billing_usd, tuple(counts), savepoint=False
        )
        return result

    async def save_hover(self, hover: Hover, counts: Sequence[CountRow]) -> bool:
        async def save(w: WriteConn) -> bool:
            cur = await w.conn.execute(
                "INSERT INTO hovers (token_id, ad_id, publisher_id, slot_id, hover_ms, at) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (hover.token_id, hover.ad_id, hover.publisher_id, hover.slot_id,
                 hover.hover_ms, hover.at),
            )  # fmt: skip
            if cur.rowcount != 1:
                return False
            w.counts.extend(counts)
            return True

        result: bool = await self.write(save)
        return result

    async def save_failure(self, failure: PlacementFailure, counts: Sequence[CountRow]) -> None:
        f = failure

        async def save(w: WriteConn) -> None:
            await w.conn.execute(
                "INSERT INTO placement_failures (publisher_id, slot_id, ad_id, reason, message, "
                "page_url, at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (f.publisher_id, f.slot_id, f.ad_id, f.reason, f.message, f.page_url, f.at),
            )
            w.counts.extend(counts)

        await self.write(save)

    async def spend_by_campaign(self) -> dict[str, float]:
        rows = await self.read(
            _all,
            "SELECT scope_id, amount FROM counters WHERE scope = 'campaign' AND counter = %s",
            ("billable_usd",),
        )
        return {cid: float(amount) for cid, amount in rows}

    async def spend_on_day(self, day: str) -> dict[str, float]:
        rows = await self.read(
            _all,
            "SELECT scope_id, amount FROM daily_counters"
            " WHERE day = %s AND scope = 'campaign' AND counter = %s",
            (day, "billable_usd"),
        )
        return {cid: float(amount) for cid, amount in rows}

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        if not rows:
            return

        async def add(w: WriteConn) -> None:
            w.counts.extend(rows)

        await self.write(add)

    async def counts(
        self, scopes: Sequence[str] | None = None
    ) -> list[tuple[str, str, str, float]]:
        sql = "SELECT scope, scope_id, counter, amount FROM counters"
        args: tuple[Any, ...] = ()
        if scopes is not None:
            if not scopes:
                return []
            sql += " WHERE scope = ANY(%s)"
            args = (list(scopes),)
        rows = await self.read(_all, sql + " ORDER BY scope, scope_id, counter", args)
        return [(s, i, c, float(a)) for s, i, c, a in rows]

    async def daily_counts(
        self, since: str, until: str, scopes: Sequence[str] | None = None
    ) -> list[DayRow]:
        sql = (
            "SELECT day, scope, scope_id, counter, amount FROM daily_counters"
            " WHERE day BETWEEN %s AND %s"
        )
        args: tuple[Any, ...] = (since, until)
        if scopes is not None:
            if not scopes:
                return []
            sql += " AND scope = ANY(%s)"
            args += (list(scopes),)
        rows = await self.read(_all, sql + " ORDER BY day, scope, scope_id, counter", args)
        return [(d, s, i, c, float(a)) for d, s, i, c, a in rows]

    async def impression_count(self, kind: ImpressionKind | None = None) -> int:
        if kind is None:
            row = await self.read(_one, "SELECT count(*) FROM impressions", ())
        else:
            row = await self.read(_one, "SELECT count(*) FROM impressions WHERE kind = %s", (kind,))
        assert row is not None
        return int(row[0])

    # -- clicks and conversions -----------------------------------------------------------

    async def save_click(self, click: Click, counts: Sequence[CountRow]) -> bool:
        c, bumps = click, list(counts)

        async def save(w: WriteConn) -> bool:
            try:
                async with w.conn.transaction():
                    row = await _one(
                        w.conn,
                        "INSERT INTO clicks (click_id, impression_key, kind, env, ad_id, "
                        "campaign_id, publisher_id, slot_id, invalid_reason, at, "
                        "pricing_model, bid_usd, key_family) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                        "ON CONFLICT (click_id, impression_key) DO NOTHING RETURNING id",
                        (c.click_id, c.impression_key, c.kind, c.env, c.ad_id, c.campaign_id,
                         c.publisher_id, c.slot_id, c.invalid_reason, c.at,
                         *pricing_columns(c), c.key_family),
                    )  # fmt: skip
            except pg_errors.UniqueViolation:  # a second valid click of one impression
                raise ClickConflict(c.impression_key) from None
            if row is None:
                return False  # a replay: this click id of this impression is stored
            if c.charge_usd is not None:
                await w.conn.execute(
                    "INSERT INTO charges (pricing, click_row, campaign_id, ad_id, publisher_id, "
                    "amount_usd, at) VALUES ('cpc', %s, %s, %s, %s, %s, %s)",
                    (row[0], c.campaign_id, c.ad_id, c.publisher_id, c.charge_usd, c.at),
                )
            w.counts.extend(bumps)
            return True

        result: bool = await self.write(save)
        return result

    async def clicks_by_id(self, click_id: str, env: str, limit: int) -> list[StoredClick]:
        rows = await self.read(
            _all,
            "SELECT id, click_id, impression_key, kind, env, ad_id, campaign_id, publisher_id, "
            "invalid_reason, at, pricing_model, bid_usd, key_family FROM clicks "
            "WHERE click_id = %s AND env = %s "
            "ORDER BY invalid_reason IS NOT NULL, id LIMIT %s",
            (click_id, env, limit),
        )
        return [StoredClick(*row) for row in rows]

    async def stored_impression(self, dedupe_key: str) -> StoredImpression | None:
        row = await self.read(
            _one,
            "SELECT i.post_id, i.ad_id, i.invalid_reason, i.billed_usd IS NOT NULL "
            "FROM impression_keys k "
            "JOIN impressions i ON i.id = k.impression_id WHERE k.dedupe_key = %s",
            (dedupe_key,),
        )
        return None if row is None else StoredImpression(*row)

    async def click_stored(self, click_id: str, impression_key: str) -> bool:
        row = await self.read(
            _one,
            "SELECT 1 FROM clicks WHERE click_id = %s AND impression_key = %s",
            (click_id, impression_key),
        )
        return row is not None

    async def valid_click_stored(self, impression_key: str) -> bool:
        row = await self.read(
            _one,
            "SELECT 1 FROM clicks WHERE impression_key = %s AND invalid_reason IS NULL",
            (impression_key,),
        )
        return row is not None

    async def valid_click_pricing(self, impression_key: str) -> str | None:
        row = await self.read(
            _one,
            "SELECT pricing_model FROM clicks WHERE impression_key = %s AND invalid_reason IS NULL",
            (impression_key,),
        )
        return None if row is None else row[0]

    async def save_conversion(self, conversion: Conversion, counts: Sequence[CountRow]) -> bool:
        v, c, bumps = conversion, conversion.click, list(counts)

        async def save(w: WriteConn) -> bool:
            row = await _one(
                w.conn,
                "INSERT INTO conversions (click_row, ad_id, campaign_id, value_usd, at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (click_row) DO NOTHING RETURNING id",
                (c.row, c.ad_id, c.campaign_id, v.value_usd, v.at),
            )
            if row is None:
                return False  # this click has converted already
            if v.charge_usd is not None:
                await w.conn.execute(
                    "INSERT INTO charges (pricing, click_row, conversion_row, campaign_id, "
                    "ad_id, publisher_id, amount_usd, at) "
                    "VALUES ('cpa', %s, %s, %s, %s, %s, %s, %s)",
                    (c.row, row[0], c.campaign_id, c.ad_id, c.publisher_id, v.charge_usd, v.at),
                )
            w.counts.extend(bumps)
            return True

        result: bool = await self.write(save)
        return result

    async def click_count(self, valid: bool | None = None) -> int:
        sql = "SELECT count(*) FROM clicks"
        if valid is not None:
            sql += " WHERE invalid_reason IS NULL" if valid else " WHERE invalid_reason IS NOT NULL"
        row = await self.read(_one, sql, ())
        assert row is not None
        return int(row[0])

    async def impressions_by_tag_id(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        rows = await self.read(
            _all,
            "SELECT k.dedupe_key, i.kind, i.ad_id, i.campaign_id, i.publisher_id, i.slot_id,"
            " i.post_id, i.invalid_reason, i.at"
            " FROM impression_keys k JOIN impressions i ON i.id = k.impression_id"
            " WHERE k.dedupe_key = ANY(%s)",
            ([TAG_ID_PREFIX + i for i in ids],),
        )
        names = ("kind", "ad_id", "campaign_id", "publisher_id", "slot_id", "post_id",
                 "invalid_reason", "at")  # fmt: skip
        return {
            key[len(TAG_ID_PREFIX) :]: dict(zip(names, rest, strict=True)) for key, *rest in rows
        }

    async def upsert_publisher(self, publisher_id: str, origins: list[str], at: float) -> None:
        if not valid_publisher_id(publisher_id):
            raise ValueError(f"a publisher id is 1-64 of A-Z a-z 0-9 _ . -, got {publisher_id!r}")
        normalised = [normalise_origin(o) for o in origins]

        async def upsert(w: WriteConn) -> None:
            row = await _one(
                w.conn,
                "SELECT origins FROM publishers WHERE publisher_id = %s FOR UPDATE",
                (publisher_id,),
            )
            if row is None:
                merged = list(dict.fromkeys(normalised))
                await w.conn.execute(
                    "INSERT INTO publishers (publisher_id, origins, created_at, updated_at) "
                    "VALUES (%s, %s, %s, %s)",
                    (publisher_id, orjson.dumps(merged).decode(), at, at),
                )
                return
            merged = list(dict.fromkeys([*orjson.loads(row[0]), *normalised]))
            await w.conn.execute(
                "UPDATE publishers SET origins = %s, updated_at = %s WHERE publisher_id = %s",
                (orjson.dumps(merged).decode(), at, publisher_id),
            )

        await self.write(upsert)

    async def remove_publisher(self, publisher_id: str) -> bool:
        async def remove(w: WriteConn) -> bool:
            cur = await w.conn.execute(
                "DELETE FROM publishers WHERE publisher_id = %s", (publisher_id,)
            )
            return cur.rowcount == 1

        result: bool = await self.write(remove)
        return result

    async def list_publishers(self) -> list[Publisher]:
        rows = await self.read(
            _all,
            "SELECT publisher_id, origins, created_at, updated_at FROM publishers "
            "ORDER BY publisher_id",
            (),
        )
        return [Publisher(p, tuple(orjson.loads(o)), c, u) for p, o, c, u in rows]

    # -- matcher state ---------------------------------------------------------------------

    async def disable_ads(self, pairs: list[DisablePair], at: float) -> None:
        if not pairs:
            return
        rows = [(t, a, None if m is None else orjson.dumps(m).decode(), at) for t, a, m in pairs]

        async def disable(w: WriteConn) -> None:
            async with w.conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO thread_disables (thread_id, ad_id, meta, created_at) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    rows,
                )

        await self.write(disable)

    async def load_matcher_state(
        self,
        thread_id: str | None,
        post_id: str | None,
        now: float,
        unit_id: str | None = None,
        also_disabled_in: str | None = None,
    ) -> ThreadState:
        if thread_id is None and post_id is None:
            return ThreadState()
        return await self.read(_load_state, thread_id, post_id, now, unit_id, also_disabled_in)

    async def record_serves(
        self, thread_id: str, unit_id: str, ad_ids: list[str], at: float
    ) -> None:
        if not ad_ids:
            return
        rows = [(thread_id, a, unit_id, at) for a in dict.fromkeys(ad_ids)]

        async def serve(w: WriteConn) -> None:
            async with w.conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO thread_serves (thread_id, ad_id, unit_id, served_at) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (thread_id, ad_id, unit_id) "
                    "DO UPDATE SET served_at = GREATEST(thread_serves.served_at, "
                    "excluded.served_at)",
                    rows,
                )

        await self.write(serve)

    async def put_backoff(self, post_id: str, backoff: Backoff, at: float) -> None:
        b = backoff

        async def put(w: WriteConn) -> None:
            await w.conn.execute(
                "INSERT INTO post_backoff (post_id, misses, until, demand, reason, updated_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (post_id) DO UPDATE SET misses = excluded.misses,"
                " until = excluded.until, demand = excluded.demand, reason = excluded.reason,"
                " updated_at = excluded.updated_at",
                (post_id, b.misses, b.until, b.demand, b.reason, at),
            )

        await self.write(put)

    async def clear_backoff(self, post_id: str) -> None:
        async def clear(w: WriteConn) -> None:
            await w.conn.execute("DELETE FROM post_backoff WHERE post_id = %s", (post_id,))

        await self.write(clear)

    async def prune_matcher_state(
        self, backoff_ended_before: float, served_before: float, limit: int
    ) -> int:
        async def prune(w: WriteConn) -> int:
            # Bounded batches: one prune never holds the writer for long.
            cur = await w.conn.execute(
                "DELETE FROM post_backoff WHERE post_id IN"
                " (SELECT post_id FROM post_backoff WHERE until < %s LIMIT %s)",
                (backoff_ended_before, limit),
            )
            gone = cur.rowcount
            cur = await w.conn.execute(
                "DELETE FROM thread_serves WHERE (thread_id, ad_id, unit_id) IN"
                " (SELECT thread_id, ad_id, unit_id FROM thread_serves"
                "  WHERE served_at < %s LIMIT %s)",
                (served_before, limit),
            )
            return gone + cur.rowcount

        result: int = await self.write(prune)
        return result


# -- helpers --------------------------------------------------------------------------------


async def _run_one(
    wconn: WriteConn,
    job: _Job,
    savepoint: bool,
    outcomes: list[tuple[_Job, Any, BaseException | None]],
) -> None:
    mark = wconn.counts.mark()
    try:
        if savepoint:
            async with wconn.conn.transaction():  # a failing job undoes itself
                result = await job.fn(wconn, *job.args)
        else:
            result = await job.fn(wconn, *job.args)
    except _RETRIED:
        raise  # the transaction is lost: retry the whole batch
    except psycopg.OperationalError:
        raise
    except Exception as exc:
        if not savepoint:  # the transaction may be lost with it
            raise _JobFailed(job, exc) from exc
        wconn.counts.drop_since(mark)
        outcomes.append((job, None, exc))
    else:
        outcomes.append((job, result, None))


def _settle(outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
    for job, result, exc in outcomes:
        if job.future.done():  # the caller was cancelled; the write stands regardless
            continue
        if exc is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(exc)


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(unreadable URL)"
    host = str(info.get("host") or "")
    port = str(info.get("port") or "")
    user = str(info.get("user") or "")
    db = str(info.get("dbname") or "")
    where = f"{host}:{port}" if port else str(host)
    return f"postgresql://{user + '@' if user else ''}{where}/{db}"


async def _one(
    conn: Conn, sql: str, args: Sequence[Any] | Mapping[str, Any]
) -> tuple[Any, ...] | None:
    cur = await conn.execute(sql, args)
    row: tuple[Any, ...] | None = await cur.fetchone()
    return row


async def _all(conn: Conn, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    cur = await conn.execute(sql, args)
    rows: list[tuple[Any, ...]] = await cur.fetchall()
    return rows


async def _flush_counts(conn: Conn, rows: list[CountRow]) -> None:
    """The batch's counter bumps, summed, in key order (two nodes lock rows in one order):
    one upsert for the totals, one for the day buckets."""
    totals, days = split_rows(rows)
    if totals:
        totals.sort(key=lambda r: (r[0], r[1], r[2]))
        await conn.execute(
            "INSERT INTO counters (scope, scope_id, counter, amount) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[]) "
            "ON CONFLICT (scope, scope_id, counter) "
            "DO UPDATE SET amount = counters.amount + excluded.amount",
            (
                [r[0] for r in totals],
                [r[1] for r in totals],
                [r[2] for r in totals],
                [float(r[3]) for r in totals],
            ),
        )
    if days:
        days.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
        await conn.execute(
            "INSERT INTO daily_counters (day, scope, scope_id, counter, amount) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::float8[]) "
            "ON CONFLICT (day, scope, scope_id, counter) "
            "DO UPDATE SET amount = daily_counters.amount + excluded.amount",
            (
                [r[0] for r in days],
                [r[1] for r in days],
                [r[2] for r in days],
                [r[3] for r in days],
                [float(r[4]) for r in days],
            ),
        )


_KEY_COLUMNS = (
    "key_id, lookup, key_hash, env, product, name, created_at, expires_at, revoked_at, "
    "replaced_by, family_id"
)


async def _insert_key(w: WriteConn, r: KeyRecord) -> None:
    await w.conn.execute(
        f"INSERT INTO api_keys ({_KEY_COLUMNS}) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (r.key_id, r.lookup, r.key_hash, r.env, r.product, r.name, r.created_at, r.expires_at,
         r.revoked_at, r.replaced_by, r.family_id),
    )  # fmt: skip


async def _key_where(conn: Conn, column: str, value: str) -> KeyRecord | None:
    assert column in ("lookup", "key_id")
    row = await _one(conn, f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE {column} = %s", (value,))
    return None if row is None else KeyRecord(*row)


# One statement, one round trip: look for a stored key; when none, insert the impression
# (with what it bills) and its keys; when one, tie the new keys to the stored impression. The
# keys' primary key still decides a race: ON CONFLICT waits for another node's transaction
# that holds one of the keys, and a key it committed is skipped (counted below).
_SAVE_IMPRESSION = """
WITH seen AS (
    SELECT impression_id FROM impression_keys WHERE dedupe_key = ANY(%(keys)s::text[]) LIMIT 1
), ins AS (
    INSERT INTO impressions (kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id,
                             cpm_usd, at, invalid_reason, billed_usd)
    SELECT %(kind)s::text, %(env)s::text, %(ad)s::text, %(campaign)s::text, %(publisher)s::text,
           %(post)s::text, %(slot)s::text, %(cpm)s::float8, %(at)s::float8, %(invalid)s::text,
           %(bill)s::float8
    WHERE NOT EXISTS (SELECT 1 FROM seen)
    RETURNING id
), keyed AS (
    INSERT INTO impression_keys (dedupe_key, impression_id)
    SELECT k, coalesce((SELECT id FROM ins), (SELECT impression_id FROM seen))
    FROM unnest(%(keys)s::text[]) AS k
    ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT id FROM ins), (SELECT count(*) FROM keyed)
"""


async def _save_impression(
    w: WriteConn, imp: Impression, billing_usd: float | None, counts: Sequence[CountRow]
) -> bool:
    conn = w.conn
    keys = sorted(set(imp.dedupe_keys))  # one order on every node: fewer lock waits
    row = await _one(
        conn,
        _SAVE_IMPRESSION,
        {"keys": keys, "kind": imp.kind, "env": imp.env, "ad": imp.ad_id,
         "campaign": imp.campaign_id, "publisher": imp.publisher_id, "post": imp.post_id,
         "slot": imp.slot_id, "cpm": imp.cpm_usd, "at": imp.at, "invalid": imp.invalid_reason,
         "bill": billing_usd},
    )  # fmt: skip
    assert row is not None
    impression_id, keyed = row
    if impression_id is None:
        return False  # a replay: its new keys now point at the stored impression
    if keyed == len(keys):
        w.counts.extend(counts)
        return True
    # Lost a race: another node committed one of the keys while this statement ran. Undo
    # this impression (the rows are this transaction's own) and make it that one's replay.
    for sql in (
        "DELETE FROM impression_keys WHERE impression_id = %s",
        "DELETE FROM impressions WHERE id = %s",
    ):
        await conn.execute(sql, (impression_id,))
    await conn.execute(
        "INSERT INTO impression_keys (dedupe_key, impression_id) "
        "SELECT k, (SELECT impression_id FROM impression_keys WHERE dedupe_key = ANY(%s) LIMIT 1) "
        "FROM unnest(%s::text[]) AS k ON CONFLICT DO NOTHING",
        (keys, keys),
    )
    return False


class _RaceLost(Exception):
    """Another node committed a key of the run's impressions while the run was written."""


# A run of impressions in two statements whatever its length: the stored keys, then one
# data-modifying CTE that inserts every new impression (ids drawn from the table's own
# sequence), every key (new ones tied to their impression, a replay's new ones to the
# impression it repeats), each impression with what it bills. Keys go in key order, so two
# nodes wait for each other's keys in one order.
_STORED_KEYS = (
    "SELECT dedupe_key, impression_id FROM impression_keys WHERE dedupe_key = ANY(%s::text[])"
)
_SAVE_IMPRESSIONS = """
WITH fresh AS (
    SELECT nextval((SELECT pg_get_serial_sequence('impressions', 'id'))::regclass) AS id, n.*
    FROM unnest(%(ord)s::int[], %(kind)s::text[], %(env)s::text[], %(ad)s::text[],
                %(campaign)s::text[], %(publisher)s::text[], %(post)s::text[],
                %(slot)s::text[], %(cpm)s::float8[], %(at)s::float8[], %(invalid)s::text[],
                %(bill)s::float8[])
         AS n(ord, kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id, cpm_usd, at,
              invalid_reason, bill)
), ins AS (
    INSERT INTO impressions (id, kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id,
                             cpm_usd, at, invalid_reason, billed_usd) OVERRIDING SYSTEM VALUE
    SELECT id, kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id, cpm_usd, at,
           invalid_reason, bill
    FROM fresh
), keyed AS (
    INSERT INTO impression_keys (dedupe_key, impression_id)
    SELECT k.dedupe_key, coalesce(fresh.id, k.stored)
    FROM unnest(%(key)s::text[], %(key_ord)s::int[], %(key_stored)s::bigint[])
         AS k(dedupe_key, ord, stored)
    LEFT JOIN fresh ON fresh.ord = k.ord
    ORDER BY k.dedupe_key
    ON CONFLICT DO NOTHING RETURNING 1
)
SELECT count(*) FROM keyed
"""


def _float(x: float | None) -> float | None:
    return None if x is None else float(x)


async def _save_impressions(
    w: WriteConn, jobs: Sequence[tuple[Impression, float | None, Sequence[CountRow]]]
) -> list[bool]:
    """``_save_impression`` for a run of impressions in one go, with the same outcome as
    running them one after the other: a replay of a stored impression or of one earlier
    in the run writes only its new keys; every other one is inserted with what it bills,
    its keys and its counter bumps. ``_RaceLost`` when another node committed one of
    the keys meanwhile: the caller undoes the run and writes it one by one, which settles
    each race as ``_save_impression`` does."""
    key_lists = [sorted(set(imp.dedupe_keys)) for imp, _, _ in jobs]
    if not all(key_lists):
        raise ValueError("an impression needs at least one dedupe key")
    wanted = sorted({k for keys in key_lists for k in keys})
    # A key's impression: (0, its stored id) or (its place in this run, None).
    known: dict[str, tuple[int, int | None]] = {
        k: (0, int(i)) for k, i in await _all(w.conn, _STORED_KEYS, (wanted,))
    }
    cols: dict[str, list[Any]] = {name: [] for name in (
        "ord", "kind", "env", "ad", "campaign", "publisher", "post", "slot", "cpm", "at",
        "invalid", "bill")}  # fmt: skip
    key_rows: list[tuple[str, int, int | None]] = []
    results: list[bool] = []
    for (imp, billing_usd, counts), keys in zip(jobs, key_lists, strict=True):
        seen = next((known[k] for k in keys if k in known), None)
        if seen is not None:  # a replay: it only teaches the store its other keys
            for k in keys:
                if k not in known:
                    known[k] = seen
                    key_rows.append((k, *seen))
            results.append(False)
            continue
        place = len(cols["ord"]) + 1
        for name, value in (
            ("ord", place), ("kind", imp.kind), ("env", imp.env), ("ad", imp.ad_id),
            ("campaign", imp.campaign_id), ("publisher", imp.publisher_id),
            ("post", imp.post_id), ("slot", imp.slot_id), ("cpm", _float(imp.cpm_usd)),
            ("at", float(imp.at)), ("invalid", imp.invalid_reason),
            ("bill", _float(billing_usd)),
        ):  # fmt: skip
            cols[name].append(value)
        for k in keys:
            known[k] = (place, None)
            key_rows.append((k, place, None))
        w.counts.extend(counts)
        results.append(True)
    if not key_rows:
        return results  # replays only, with no new keys
    key_rows.sort()
    row = await _one(
        w.conn,
        _SAVE_IMPRESSIONS,
        {**cols, "key": [r[0] for r in key_rows], "key_ord": [r[1] for r in key_rows],
         "key_stored": [r[2] for r in key_rows]},
    )  # fmt: skip
    assert row is not None
    if row[0] != len(key_rows):
        raise _RaceLost(f"{len(key_rows) - row[0]} of {len(key_rows)} keys taken meanwhile")
    return results


# Write jobs with a form that takes a run of the same job's arguments at once: the writer
# uses it for consecutive jobs of that function, and runs them one by one if it fails.
_BATCHED: dict[Callable[..., Any], Callable[..., Awaitable[list[Any]]]] = {
    _save_impression: _save_impressions,
}


async def _load_state(
    conn: Conn,
    thread_id: str | None,
    post_id: str | None,
    now: float,
    unit_id: str | None,
    also_disabled_in: str | None,
) -> ThreadState:
    disabled: frozenset[str] = frozenset()
    served: dict[str, int] = {}
    unit_ads: frozenset[str] = frozenset()
    if thread_id is not None:
        rows = await _all(
            conn,
            "SELECT ad_id FROM thread_disables WHERE thread_id IN (%s, %s)",
            (thread_id, thread_id if also_disabled_in is None else also_disabled_in),
        )
        disabled = frozenset(r[0] for r in rows)
        rows = await _all(
            conn,
            "SELECT ad_id, count(*) FROM thread_serves WHERE thread_id = %s AND served_at > %s"
            " GROUP BY ad_id",
            (thread_id, now - FREQUENCY_WINDOW_SECONDS),
        )
        served = {ad_id: int(n) for ad_id, n in rows}
        if unit_id is not None:
            rows = await _all(
                conn,
                "SELECT ad_id FROM thread_serves WHERE thread_id = %s AND unit_id = %s",
                (thread_id, unit_id),
            )
            unit_ads = frozenset(r[0] for r in rows)
    backoff = None
    if post_id is not None:
        row = await _one(
            conn,
            "SELECT misses, until, demand, reason FROM post_backoff WHERE post_id = %s",
            (post_id,),
        )
        if row is not None:
            backoff = Backoff(misses=row[0], until=row[1], demand=row[2], reason=row[3])
    return ThreadState(disabled=disabled, served=served, unit_ads=unit_ads, backoff=backoff)
