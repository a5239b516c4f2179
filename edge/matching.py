"""The edge's one way into the matcher: loaded once at start-up, called with a deadline.

Both the partner routes (/v1) and the delivery routes (/dea) call ``match`` here, so they
share the one in-process matcher instance. This module also adapts the store to
the matcher's ``MatchState`` protocol (the matcher never imports edge) and feeds it the
spend per campaign for the pacing gate from the in-memory ledger (``edge.spend``), so no
request waits on a billing query.

The writes after a decision (serves, no-match windows) are not billing-grade, so they run in
the background (``StateWrites``) instead of holding the answer for a group-commit fsync. A
later match of the same thread or post first waits for that thread's or post's pending
writes, so what one request recorded is what the next one reads; shutdown drains them all.
Matches of one conversation that arrive together take turns (``ThreadTurns``), so each
reads the serves of the ones before it and the frequency cap holds within the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from edge.errors import BadGateway
from edge.preflight import invalid_catalogue
from edge.settings import Settings
from matcher import Matcher
from matcher.catalogue import CatalogueError
from matcher.embeddings import CachedEmbedder, MiniLM
from matcher.engine import Lane
from matcher.state import Backoff, ThreadState
from matcher.types import MatchRequest, MatchResult

if TYPE_CHECKING:
    from edge.context import Context
    from edge.store import Store

log = logging.getLogger("edge.matching")

RETRY_AFTER_SECONDS = 1  # a matcher hiccup is short-lived; the caller backs off from here


class StateWrites:
    """Post-decision state writes in flight: background tasks held here until they finish.

    Each is tagged with the thread and post it touches; ``settled(keys)`` waits for the
    pending writes of those (the store's one writer commits in submission order, so waiting
    for the latest write of a key covers the earlier ones) and ``drain()`` for all of them.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._latest: dict[str, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, what: str, keys: tuple[str, ...], write: Awaitable[None]) -> None:
        task = asyncio.ensure_future(_best_effort(what, write))
        self._tasks.add(task)
        for key in keys:
            self._latest[key] = task
        task.add_done_callback(lambda done: self._forget(done, keys))

    def _forget(self, task: asyncio.Task[None], keys: tuple[str, ...]) -> None:
        self._tasks.discard(task)
        for key in keys:
            if self._latest.get(key) is task:
                del self._latest[key]

    async def settled(self, keys: Iterable[str]) -> None:
        pending = {self._latest[k] for k in keys if k in self._latest}
        if pending:
            await asyncio.wait(pending)  # wait, not gather: a cancelled caller cancels no write

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.wait(set(self._tasks))


class ThreadTurns:
    """One match at a time per thread, for the threads whose matches can cap each other.

    A match reads its thread's serves, decides, then records its own; two matches of one
    conversation that overlap would both read the serves from before either, so four turns
    sent at once all got an ad capped at three. ``hold(key)`` makes the matches of ``key``
    take turns (first come, first served), each from its state read to its writes being
    queued (``StateWrites``; the next one's read waits for them). Other keys, and ``None``,
    never wait. A key's lock exists only while a match holds or awaits it, so memory is
    bounded by the matches in flight, not by the threads ever seen.
    """

    def __init__(self) -> None:
        self._slots: dict[str, _Slot] = {}

    def __len__(self) -> int:
        return len(self._slots)

    def hold(self, key: str | None) -> _Turn | contextlib.nullcontext[None]:
        return _NO_TURN if key is None else _Turn(self._slots, key)


class _Slot:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # holding or waiting; the slot goes when this is back to 0


class _Turn:
    __slots__ = ("key", "slot", "slots")

    def __init__(self, slots: dict[str, _Slot], key: str) -> None:
        self.slots, self.key = slots, key

    async def __aenter__(self) -> None:
        slot = self.slots.get(self.key)
        if slot is None:
            slot = self.slots[self.key] = _Slot()
        slot.users += 1
        self.slot = slot
        try:
            await slot.lock.acquire()  # no suspension when the key is free
        except BaseException:  # cancelled while waiting: leave the queue, block nobody
            self._leave()
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.slot.lock.release()
        self._leave()

    def _leave(self) -> None:
        self.slot.users -= 1
        if not self.slot.users:
            del self.slots[self.key]


_NO_TURN: contextlib.nullcontext[None] = contextlib.nullcontext()


def turn_key(request: MatchRequest) -> str | None:
    """The thread whose matches must take turns, or None when they may overlap.

    Only a thread of several units (an AI conversation: one unit per turn) needs it: one
    unit's serve counts against the cap of the next. A post that is its own thread (UGC
    posts, the tag's posts: thread id and post id are the same scoped id) has one unit, so
    its serves never cap another request of it, and a popular post's concurrent views keep
    running side by side (batched) rather than queueing behind each other; concurrent misses
    of one post each run the model once before its no-match window is read (docs/decisions.md).
    A match without a unit (a tag page without a post) records nothing."""
    unit = request.post_id or request.turn_id
    if request.thread_id is None or unit is None or unit == request.thread_id:
        return None
    return request.thread_id


def _keys(thread_id: str | None, post_id: str | None) -> tuple[str, ...]:
    keys = () if thread_id is None else (f"thread:{thread_id}",)
    return keys if post_id is None else (*keys, f"post:{post_id}")


class StoreMatchState:
    """``matcher.state.MatchState`` on top of the store's matcher-state methods.

    A failed read fails the match (502): without the thread's disables we could show an ad
    the user asked never to see there again. A failed write after the decision only loses
    a frequency count or a backoff window, so it is logged and the answer still goes out;
    those writes run in the background (``writes``), never on the response path.
    """

    def __init__(
        self,
        store: Store,
        writes: StateWrites | None = None,
        unscoped_disables: str | None = None,
    ) -> None:
        """``unscoped_disables``: a thread id whose disables count too (the bare id a
        partner's disables were stored under before ids were scoped, see edge.threads)."""
        self.store = store
        self.writes = writes if writes is not None else StateWrites()
        self.unscoped_disables = unscoped_disables

    async def load(
        self, thread_id: str | None, post_id: str | None, unit_id: str | None, now: float
    ) -> ThreadState:
        await self.writes.settled(_keys(thread_id, post_id))
        return await self.store.load_matcher_state(
            thread_id, post_id, now, unit_id, also_disabled_in=self.unscoped_disables
        )

    async def record_served(
        self, thread_id: str, unit_id: str, ad_ids: list[str], now: float
    ) -> None:
        write = self.store.record_serves(thread_id, unit_id, ad_ids, now)
        self.writes.spawn("serves", _keys(thread_id, None), write)

    async def record_miss(self, post_id: str, backoff: Backoff, now: float) -> None:
        write = self.store.put_backoff(post_id, backoff, now)
        self.writes.spawn("no-match window", _keys(None, post_id), write)

    async def clear_backoff(self, post_id: str) -> None:
        self.writes.spawn("window clear", _keys(None, post_id), self.store.clear_backoff(post_id))

    async def disable(
        self, pairs: list[tuple[str, str, dict[str, Any] | None]], now: float
    ) -> None:
        await self.store.disable_ads(pairs, now)


async def _best_effort(what: str, write: Awaitable[None]) -> None:
    try:
        await write
    except Exception as exc:
        log.warning("matcher state write (%s) failed; answering anyway: %s", what, exc)


def preload_model(settings: Settings) -> MiniLM | None:
    """The embedding model, loaded by ``edge serve --workers N`` before it forks, so the
    workers share its ~65 MB of weights and buffers (copy-on-write pages nobody writes)
    instead of loading one each. None (each worker loads its own) with more than one model
    thread: an onnxruntime session's thread pool does not survive a fork
    (https://github.com/microsoft/onnxruntime/issues/9800); with one it has no pool."""
    if settings.model_threads != 1:
        return None
    return MiniLM(threads=1, cache_dir=settings.cache_dir)


async def load_matcher(settings: Settings, model: MiniLM | None = None) -> Matcher:
    """The catalogue and the model (``model``: one loaded already), loaded off the event loop
    (it takes seconds). A catalogue file that does not validate is a ``SettingsError`` naming
    the setting and its first error."""
    try:
        matcher = await asyncio.to_thread(
            Matcher.load,
            settings.catalogue,
            threads=settings.model_threads,
            cache_dir=settings.cache_dir,
            embedder=CachedEmbedder(model) if model is not None else None,
            dma_table=settings.dma_table,
        )
    except CatalogueError as exc:
        if settings.catalogue is None:
            raise  # the bundled catalogue: a packaging fault, not a setting
        raise invalid_catalogue(settings.catalogue, exc) from None
    log.info(
        "matcher ready: %d ads in %d campaigns",
        len(matcher.catalogue),
        len(matcher.catalogue.campaigns),
    )
    return matcher


async def match(
    ctx: Context,
    request: MatchRequest,
    *,
    lane: Lane = "partner",
    unscoped_disables: str | None = None,
) -> MatchResult:
    """One match within ``EDGE_MATCH_TIMEOUT_MS``; a timeout or failure is a 502.

    ``lane``: ``partner`` for /v1 and the other keyed routes, ``tag`` for the tag's match
    routes; each lane has its own model thread (see edge.admission).
    ``unscoped_disables``: see ``StoreMatchState``."""
    matcher = ctx.matcher
    if matcher is None:
        raise BadGateway(
            "the matcher is not loaded yet", headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
        )
    timeout = ctx.settings.match_timeout_ms / 1000
    deadline = time.monotonic() + timeout
    try:
        async with asyncio.timeout(timeout):
            spend = await ctx.spend.snapshot(ctx.store)
            state = StoreMatchState(ctx.store, ctx.state_writes, unscoped_disables)
            # Waiting for this thread's earlier turn counts against the deadline too.
            async with ctx.thread_turns.hold(turn_key(request)):
                return await matcher.match(
                    request, state, ctx.clock(), spend, deadline=deadline, lane=lane
                )
    except TimeoutError:
        log.warning("match over its %d ms deadline", ctx.settings.match_timeout_ms)
        raise BadGateway(
            "matching did not finish in time; retry shortly",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        ) from None
    except Exception as exc:
        log.error("matcher failure", exc_info=exc)
        raise BadGateway(
            "the matching service failed; retry shortly",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        ) from None
