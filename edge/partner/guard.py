"""The door of every key-protected partner route: the key (401), then its rate (429)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from edge.auth import require_key
from edge.context import Context
from edge.errors import BadGateway
from edge.partner.idempotency import answer_once
from edge.store import KeyRecord, StoreUnavailable

Body = TypeVar("Body")


@dataclass(frozen=True, slots=True)
class Admission:
    key: KeyRecord
    headers: dict[str, str]  # the RateLimit fields, sent on the answer too


async def admit(ctx: Context, request: Request, product: str, *, count: bool = True) -> Admission:
    """The caller's key if it is valid for ``product`` and within its rate; else 401/429.

    The key is checked first so an unknown caller cannot spend a real key's budget. With
    ``count=False`` the route counts the request itself (``count_request``): a retry it
    answers from memory is not a new request.
    """
    try:
        key = await require_key(ctx, request, product)
    except StoreUnavailable:  # the key could not be looked up: a retryable 502, not a 500
        raise BadGateway(
            "the key store is unavailable; retry shortly", headers={"Retry-After": "5"}
        ) from None
    # Per family: a rotated key and its secondary share one bucket, so rotating does not
    # add a second quota.
    headers = await ctx.rate_limits.admit(product, key.family)
    # Errors raised after this point (a bad body: 400/413/415/422, a 502) carry them too;
    # the error handler reads them from here.
    request.state.rate_limit_headers = headers
    admission = Admission(key, headers)
    if count:
        count_request(ctx, admission)
    return admission


async def match_once(
    ctx: Context,
    request: Request,
    product: str,
    parse: Callable[[], Awaitable[Body]],
    match: Callable[[Admission, Body], Awaitable[dict[str, Any]]],
    *,
    route: str | None = None,
) -> Response:
    """A partner match route from key to answer: the key and its rate; the body
    (``parse``; a refused body counts as a request); the match, answered once per call on
    ``route`` (default ``product``): a retry within the window gets the first answer again
    and counts nothing (edge.partner.idempotency)."""
    admission = await admit(ctx, request, product, count=False)
    try:
        body = await parse()
    except Exception:
        count_request(ctx, admission)  # a refused body is a request, never a retry
        raise

    async def answer() -> dict[str, Any]:
        count_request(ctx, admission)
        return await match(admission, body)

    return await answer_once(ctx, request, admission, body, answer, route=route or product)


def count_request(ctx: Context, admission: Admission) -> None:
    # Per family, as everything the key's serves earn: a rotated key keeps its one row.
    ctx.counters.add("key", admission.key.family, "requests")
