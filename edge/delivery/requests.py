"""Reading /dea requests: bounded JSON (or text/plain JSON, what sendBeacon sends) checked
against its schema, strict query strings, and the store's failures as a retryable 503."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

from starlette.requests import Request

from edge.context import Context
from edge.delivery.validate import validate
from edge.errors import BadRequest, ServiceUnavailable
from edge.http import read_json
from edge.store import StoreUnavailable

STORE_RETRY_AFTER = "1"


async def json_body(ctx: Context, request: Request, schema: dict[str, Any]) -> dict[str, Any]:
    body = await read_json(request, max_bytes=ctx.settings.max_body_bytes, allow_text_plain=True)
    validate(body, schema)  # every /dea body schema is an object
    return cast(dict[str, Any], body)


def strict_query(
    request: Request, allowed: Iterable[str], required: Iterable[str] = ()
) -> dict[str, str]:
    """The query as a dict; an unknown or repeated parameter is a 400 naming it."""
    allowed = set(allowed)
    out: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key not in allowed:
            raise BadRequest(f"unknown query parameter {key!r}", field=key)
        if key in out:
            raise BadRequest(f"query parameter {key!r} is repeated", field=key)
        out[key] = value
    for key in required:
        if key not in out:
            raise BadRequest(f"query parameter {key!r} is required", field=key)
    return out


@contextlib.asynccontextmanager
async def store_errors() -> AsyncIterator[None]:
    """A store that cannot commit is a 503 with Retry-After: the beacon is retried, not lost."""
    try:
        yield
    except StoreUnavailable:
        raise ServiceUnavailable(
            "the event could not be stored; retry shortly",
            headers={"Retry-After": STORE_RETRY_AFTER},
        ) from None
