"""The door of every key-protected partner route: the key (401), then its rate (429)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from edge.auth import require_key
from edge.context import Context
from edge.errors import BadGateway
from edge.ratelimit import RateLimits
from edge.store import KeyRecord, StoreUnavailable

_LIMITS = "partner_rate_limits"


@dataclass(frozen=True, slots=True)
class Admission:
    key: KeyRecord
    headers: dict[str, str]  # the RateLimit fields, sent on the answer too


def rate_limits(ctx: Context) -> RateLimits:
    """The process's limiters, made on first use from the settings (one per product)."""
    limits = ctx.extras.get(_LIMITS)
    if limits is None:
        limits = ctx.extras[_LIMITS] = RateLimits.from_settings(ctx.settings, ctx.clock)
    return limits


async def admit(ctx: Context, request: Request, product: str) -> Admission:
    """The caller's key if it is valid for ``product`` and within its rate; else 401/429.

    The key is checked first so an unknown caller cannot spend a real key's budget.
    """
    try:
        key = await require_key(ctx, request, product)
    except StoreUnavailable:  # the key could not be looked up: a retryable 502, not a 500
        raise BadGateway(
            "the key store is unavailable; retry shortly", headers={"Retry-After": "5"}
        ) from None
    headers = rate_limits(ctx)[product].enforce(key.key_id)
    ctx.counters.add("key", key.key_id, "requests")
    return Admission(key, headers)
