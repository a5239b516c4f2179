"""Request and response helpers shared by every route: bounded JSON bodies, JSON answers."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope

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


def no_query(scope: Scope, invalid: type[EdgeError] = BadRequest) -> None:
    """``invalid`` naming the first query parameter of a request to a route that takes
    none: a stray or misspelt parameter is refused, never silently ignored. Parsed as
    ``Request.query_params`` parses it, and only when there is one: an empty query string
    costs one test."""
    query: bytes = scope["query_string"]
    if query:
        for name in QueryParams(query):
            raise invalid(f"unknown query parameter {name!r} (this route takes none)", field=name)


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the request header ``name`` (lower case, as ASGI gives names),
    read straight from the scope: what ``Request.headers.get`` answers, without building a
    ``Headers`` object per request."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


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
    return parse_json(body, invalid)


def parse_json(body: bytes, invalid: type[EdgeError] = BadRequest) -> Any:
    """``body`` parsed, or ``invalid`` saying why it is not one JSON document (the field it
    names is ``body``, as for a body that is not UTF-8)."""
    if not body:
        raise invalid("the body is empty; a JSON document is required", field="body")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson calls any byte that is not UTF-8 "surrogates not allowed": said plainly.
        refusal = not_utf8(body, invalid)
        if refusal is None:
            refusal = invalid(
                f"the body is not valid JSON: {exc.msg} at position {exc.pos}", field="body"
            )
        raise refusal from None


def not_utf8(body: bytes, invalid: type[EdgeError]) -> EdgeError | None:
    """``invalid`` saying that ``body`` is not UTF-8, or None when it is. JSON is UTF-8
    whatever charset Content-Type names (RFC 8259, section 8.1), and a body that is not
    is refused as that before anything else is said of it."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as bad:
        return invalid(
            f"the body is not valid UTF-8 (byte {bad.start}); JSON must be sent as UTF-8",
            field="body",
        )
    return None


def json_refusal(body: bytes, invalid: type[EdgeError], reason: str) -> EdgeError:
    """The answer to a body another JSON decoder could not read (``reason``: its words),
    in ``parse_json``'s words, so every route says the same of the same bytes: msgspec
    raises ``UnicodeDecodeError`` for bytes that are not UTF-8 and calls a lone
    ``\\ud800`` "truncated"."""
    try:
        parse_json(body, invalid)
    except EdgeError as exc:
        return exc
    return invalid(f"the body is not valid JSON: {reason}", field="body")


async def read_body(request: Request, *, max_bytes: int, allow_text_plain: bool = False) -> bytes:
    """The raw body of a JSON request (its media type and size checked), for routes that
    decode it straight into a declared type (``edge.partner.declare``)."""
    check_body_headers(
        request.headers.get("content-type", ""),
        request.headers.get("content-length"),
        max_bytes=max_bytes,
        allow_text_plain=allow_text_plain,
    )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes")
    return bytes(body)


async def receive_body(
    scope: Scope, receive: Receive, *, max_bytes: int, allow_text_plain: bool = False
) -> bytes:
    """``read_body`` for a plain ASGI caller (the beacon lane): the same checks and errors,
    the body read from ``receive`` as ``Request.stream`` reads it (``ClientDisconnect``
    when the client goes away first)."""
    content_type: bytes | None = None
    length: bytes | None = None
    for key, value in scope["headers"]:
        if key == b"content-type" and content_type is None:
            content_type = value
        elif key == b"content-length" and length is None:
            length = value
    _check_raw_body_headers(content_type, length, max_bytes, allow_text_plain)
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get("body", b"")  # the whole body in one message: the usual case
        if len(body) > max_bytes:
            raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes")
        return body
    chunks = bytearray()
    while True:
        if message["type"] == "http.request":
            chunks += message.get("body", b"")
            if len(chunks) > max_bytes:
                raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes")
            if not message.get("more_body", False):
                return bytes(chunks)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()
        message = await receive()


@functools.lru_cache(maxsize=512)
def _check_raw_body_headers(
    content_type: bytes | None, length: bytes | None, max_bytes: int, allow_text_plain: bool
) -> None:
    """``check_body_headers`` on the raw header values. A client sends the same few values
    again and again: the cache keeps the ones that passed, and a refusal (an exception) is
    never cached, so every refusal is checked and made afresh."""
    check_body_headers(
        "" if content_type is None else content_type.decode("latin-1"),
        None if length is None else length.decode("latin-1"),
        max_bytes=max_bytes,
        allow_text_plain=allow_text_plain,
    )


def check_body_headers(
    content_type: str, content_length: str | None, *, max_bytes: int, allow_text_plain: bool
) -> None:
    """415 for a media type other than JSON (or ``text/plain`` where allowed), 413 when the
    declared length is over ``max_bytes``: checked before any of the body is read."""
    ctype = content_type.split(";")[0].strip().lower()
    accepted = ("application/json", "text/plain") if allow_text_plain else ("application/json",)
    if ctype not in accepted:
        raise UnsupportedMediaType(
            f"Content-Type must be {' or '.join(accepted)}", field="Content-Type"
        )
    declared = content_length
    if (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and int(declared) > max_bytes
    ):
        raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes")
