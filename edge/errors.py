"""The error family and the one JSON error shape every route answers with.

``{"error": {"code": "...", "message": "...", "field": "..."}}``; ``field`` only where one
field is at fault. Handlers below turn our errors, Starlette's HTTP errors (404, 405), a
database outage no route answered itself (503 with Retry-After) and unexpected exceptions
into that shape; a 500 body never carries a stack trace.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from edge.store.base import StoreUnavailable

log = logging.getLogger("edge.errors")


class EdgeError(Exception):
    status = 500
    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.headers = dict(headers or {})
        if code is not None:
            self.code = code


class BadRequest(EdgeError):
    status, code = 400, "bad_request"


# The challenge every 401 carries (RFC 9110 requires one): the key goes in X-API-Key.
API_KEY_CHALLENGE = 'ApiKey header="X-API-Key"'


class Unauthorized(EdgeError):
    status, code = 401, "unauthorized"

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers.setdefault("WWW-Authenticate", API_KEY_CHALLENGE)


class Forbidden(EdgeError):
    status, code = 403, "forbidden"


class NotFound(EdgeError):
    status, code = 404, "not_found"


class Conflict(EdgeError):
    status, code = 409, "conflict"


class Gone(EdgeError):
    status, code = 410, "gone"


class PayloadTooLarge(EdgeError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(EdgeError):
    status, code = 415, "unsupported_media_type"


class Unprocessable(EdgeError):
    status, code = 422, "validation_error"


class TooManyRequests(EdgeError):
    status, code = 429, "rate_limited"


class BadGateway(EdgeError):
    status, code = 502, "upstream_unavailable"


class ServiceUnavailable(EdgeError):
    status, code = 503, "unavailable"


_STARLETTE_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


def error_body(code: str, message: str, field: str | None = None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        err["field"] = field
    return orjson.dumps({"error": err})


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    return Response(
        error_body(code, message, field),
        status_code=status,
        headers=dict(headers or {}),
        media_type="application/json",
    )


async def _edge_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EdgeError)
    # A request that passed the key and rate check spent part of its quota: say how much
    # is left on its errors too (the RateLimit fields set by the partner door).
    spent: Mapping[str, str] = getattr(request.state, "rate_limit_headers", None) or {}
    return error_response(exc.status, exc.code, exc.message, exc.field, {**spent, **exc.headers})


# Routes only a production edge serves: the AI product, its beacons and conversions. A
# sandbox's 404 for them says so, rather than that the path is unknown.
PRODUCTION_ONLY = ("/v1/ai/", "/dea/ai/", "/v1/ad-manager/conversions")


def _not_found(request: Request) -> str:
    path = request.url.path
    ctx = getattr(request.app.state, "ctx", None)
    sandbox = ctx is not None and not ctx.settings.is_production
    if sandbox and path.startswith(PRODUCTION_ONLY):
        return f"{path} is served in production only: the sandbox has no AI product or conversions"
    # The earlier partner API, served only when an operator turns it on: its 404 says how.
    from edge.routes.legacy import PATHS as LEGACY  # a route module imports this one

    if ctx is not None and not ctx.settings.legacy_api and path in LEGACY.values():
        return (
            f"no route for {path}: the earlier partner API is off on this edge "
            "(EDGE_LEGACY_API=1 turns it on; new integrations use /v1)"
        )
    return f"no route for {path}"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _STARLETTE_CODES.get(exc.status_code, "http_error")
    message = {
        404: _not_found(request),
        405: f"{request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, code, message, headers=exc.headers)


# What a route that does not answer a database outage itself says: the store is down for a
# while (a node reconnects on its own), not that the request was wrong or the server broke.
STORE_DOWN_RETRY_AFTER = "5"


async def _store_down(request: Request, exc: Exception) -> Response:
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_response(
        503,
        "unavailable",
        "the database is not answering; retry shortly",
        headers={"Retry-After": STORE_DOWN_RETRY_AFTER},
    )


def log_unhandled(method: str, path: str, exc: BaseException) -> None:
    """An error no handler answered, logged with its traceback for operators; a client gone
    before its body ended (it hung up, or the server's body timeout closed it) is no fault
    of the server's: one line, no traceback (the answer goes nowhere)."""
    if isinstance(exc, ClientDisconnect):
        log.info("client gone before the body of %s %s ended", method, path)
    else:
        log.error("unhandled error on %s %s", method, path, exc_info=exc)


async def _unexpected(request: Request, exc: Exception) -> Response:
    # Logged for operators; the caller learns only that it failed.
    log_unhandled(request.method, request.url.path, exc)
    return error_response(500, "internal_error", "the server failed to answer this request")


async def known_error(request: Request, exc: Exception) -> Response | None:
    """The answer to one of our errors or Starlette's HTTP errors, with the same handlers
    ``exception_handlers`` gives the app; None for any other exception (a 500)."""
    if isinstance(exc, EdgeError):
        return await _edge_error(request, exc)
    if isinstance(exc, HTTPException):
        return await _http_error(request, exc)
    if isinstance(exc, StoreUnavailable):
        return await _store_down(request, exc)
    return None


def exception_handlers() -> dict[Any, Any]:
    return {
        EdgeError: _edge_error,
        HTTPException: _http_error,
        StoreUnavailable: _store_down,
        Exception: _unexpected,
    }
