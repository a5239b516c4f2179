"""Request and response helpers shared by every route: bounded JSON bodies, JSON answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from edge.errors import BadRequest, EdgeError, PayloadTooLarge, UnsupportedMediaType


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def json_response(
    data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=dict(headers or {}))


def counting_route(path: str, endpoint: Any, methods: list[str]) -> Route:
    """A route whose GET changes state (a beacon, a key rotation): no implicit HEAD.

    Starlette answers HEAD with the GET endpoint; link checkers, proxies and ``curl -I``
    send HEAD freely, and one must never count an impression or rotate a key. HEAD gets
    405 with ``Allow``, the same as on the POST-only beacons.
    """
    route = Route(path, endpoint, methods=methods)
    assert route.methods is not None
    route.methods.discard("HEAD")
    return route


async def read_json(
    request: Request,
    *,
    max_bytes: int,
    allow_text_plain: bool = False,
    invalid: type[EdgeError] = BadRequest,
) -> Any:
    """The parsed JSON body, or an error in the one shape.

    ``allow_text_plain`` admits ``text/plain`` bodies (``navigator.sendBeacon`` sends them
    without a CORS preflight). ``invalid`` is the error for unparsable JSON: 400 on most
    routes, 422 on ``/v1/ai/process``.
    """
    body = await read_body(request, max_bytes=max_bytes, allow_text_plain=allow_text_plain)
    if not body:
        raise invalid("the body is empty; a JSON document is required")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"the body is not valid JSON: {exc.msg} at position {exc.pos}") from None


async def read_body(request: Request, *, max_bytes: int, allow_text_plain: bool = False) -> bytes:
    """The raw body of a JSON request (its media type and size checked), for routes that
    decode it straight into a declared type (``edge.partner.declare``)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    accepted = ("application/json", "text/plain") if allow_text_plain else ("application/json",)
    if ctype not in accepted:
        raise UnsupportedMediaType(
            f"Content-Type must be {' or '.join(accepted)}", field="Content-Type"
        )
    declared = request.headers.get("content-length")
    if (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and int(declared) > max_bytes
    ):
        raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes")
    return bytes(body)
