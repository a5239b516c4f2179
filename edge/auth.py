"""Key check for partner routes: one product per key, one environment per process."""

from __future__ import annotations

from starlette.requests import Request

from edge.context import Context
from edge.store import KeyRecord


async def require_key(ctx: Context, request: Request, product: str) -> KeyRecord:
    """The caller's key record, or Unauthorized (401) in the one error shape."""
    return await ctx.keyring.verify(
        request.headers.get("x-api-key"), env=ctx.settings.env, product=product
    )
