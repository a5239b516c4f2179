"""Retries of a partner's match are answered once: the same key, route and body (a UGC post,
an AI turn) within a window get the first answer again, without a second match, request
count or serve.

A partner whose call timed out or failed at the network level cannot know whether the edge
matched it; it retries. Without this, each retry counted a request, a match and a serve
(the thread's frequency cap then sees two), and could get different ads. A retry that
arrives while the first call is still being matched waits for that match instead of
starting another. A failed call (502) is not remembered, so its retry is matched afresh.

The memory is per process, bounded (least recently used entries go first) and never
touches the store, so the hot path gains no I/O.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from edge.http import json_response

if TYPE_CHECKING:  # both import this module's ReplayCache (Context holds one)
    from edge.context import Context
    from edge.partner.guard import Admission

WINDOW_SECONDS = 120  # covers a client timeout plus a backoff series of retries (documented
# in the OpenAPI description, README and docs/decisions.md: change them together)
MAX_ENTRIES = 20_000  # ~2 KB each at most: tens of MiB, not unbounded
REPLAY_HEADER = "Idempotent-Replayed"


@dataclass(slots=True)
class _Entry:
    answer: asyncio.Future[dict[str, Any]]
    expires_at: float | None = None  # None while the first call is still running


def fingerprint(key_id: str, path: str, body: Any, forwarded_for: str | None) -> str:
    """What makes two calls "the same": the key, the route, the whole parsed body and the
    end user's address (it picks the geo when the body has none)."""
    raw = orjson.dumps([key_id, path, body, forwarded_for or ""], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(raw).hexdigest()


class ReplayCache:
    """``await cache.answer(fp, clock, compute)`` -> (body, replayed): ``compute()``'s body,
    or the body a call with the same fingerprint got within the window."""

    def __init__(self, window: float = WINDOW_SECONDS, max_entries: int = MAX_ENTRIES) -> None:
        self.window = window
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def answer(
        self,
        fp: str,
        clock: Callable[[], float],
        compute: Callable[[], Awaitable[dict[str, Any]]],
    ) -> tuple[dict[str, Any], bool]:
        entry = self._entries.get(fp)
        if entry is not None and (entry.expires_at is None or clock() < entry.expires_at):
            self._entries.move_to_end(fp)
            try:
                # shield: a retry that gives up does not cancel the first call's match
                return await asyncio.shield(entry.answer), True
            except asyncio.CancelledError:
                if not entry.answer.cancelled():
                    raise  # this retry itself was cancelled
                # the first call was cancelled before it answered: match this one
        entry = _Entry(asyncio.get_running_loop().create_future())
        self._entries[fp] = entry
        self._entries.move_to_end(fp)
        self._evict()
        try:
            body = await compute()
        except BaseException as exc:
            # Not remembered: a later retry is matched afresh; retries already waiting get
            # the same error (a 502 with Retry-After).
            if self._entries.get(fp) is entry:
                del self._entries[fp]
            if isinstance(exc, asyncio.CancelledError):
                entry.answer.cancel()
            elif not entry.answer.done():
                entry.answer.set_exception(exc)
                entry.answer.exception()  # retrieved: no "never retrieved" warning
            raise
        entry.expires_at = clock() + self.window
        entry.answer.set_result(body)
        return body, False

    def _evict(self) -> None:
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


async def answer_once(
    ctx: Context,
    request: Request,
    admission: Admission,
    body: Any,
    compute: Callable[[], Awaitable[dict[str, Any]]],
    route: str = "ugc",
) -> Response:
    """The match's answer on ``route`` (``ugc``, ``ai``): ``compute()``'s, or the one a
    retry of the same call got within the window (then with ``Idempotent-Replayed: true``)."""
    fp = fingerprint(admission.key.key_id, route, body, request.headers.get("x-forwarded-for"))
    out, replayed = await ctx.match_replays.answer(fp, ctx.clock, compute)
    headers = {**admission.headers, "Cache-Control": "no-store"}
    if replayed:
        headers[REPLAY_HEADER] = "true"
    return json_response(out, headers=headers)
