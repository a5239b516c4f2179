"""The door of every key-protected partner route: the key (401), then its rate (429)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from edge.auth import require_key
from edge.context import Context
from edge.errors import BadGateway
from edge.store import KeyRecord, StoreUnavailable


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


def count_request(ctx: Context, admission: Admission) -> None:
    # Per family, as everything the key's serves earn: a rotated key keeps its one row.
    ctx.counters.add("key", admission.key.family, "requests")
