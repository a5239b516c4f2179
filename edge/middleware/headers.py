"""Safe, CSP-friendly headers on every response, and the /dea specifics.

- ``X-Content-Type-Options: nosniff`` everywhere: a JSON answer is never run as a script.
- On /dea: ``Cross-Origin-Resource-Policy: cross-origin`` (the tag and pixels are loaded by
  other sites' pages, which may set ``Cross-Origin-Embedder-Policy``), and
  ``Cache-Control: no-store`` unless the route chose its own (the tag script is cacheable;
  beacons and matches must never be answered from a cache, or an impression is lost).
- ``Timing-Allow-Origin: *`` on the ``timing_paths`` (the tag script and the match routes),
  so a publisher's own performance monitoring can see what the tag costs its page.

An unexpected exception is answered here with the one error shape (500), so it carries these
headers too: Starlette's own 500 is sent from outside every user middleware.

The rules are ``HeaderRules`` and ``unexpected_error``, used by this middleware and by the
beacon lane (``edge.lane``) alike, so the two paths cannot answer differently.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edge.errors import error_body, log_unhandled

RawHeaders = list[tuple[bytes, bytes]]
_NOSNIFF = (b"x-content-type-options", b"nosniff")
_DEA = ((b"cross-origin-resource-policy", b"cross-origin"), (b"cache-control", b"no-store"))
_TIMING = ((b"timing-allow-origin", b"*"),)


class HeaderRules:
    """Which headers a path's responses get unless the route set them itself."""

    def __init__(
        self,
        *,
        prefix: str = "/dea/",
        timing_paths: Iterable[str] = (),
        timing_prefixes: Iterable[str] = (),
    ) -> None:
        self.prefix = prefix
        self.timing_paths = frozenset(timing_paths)
        self.timing_prefixes = tuple(timing_prefixes)

    def defaults(self, path: str) -> tuple[tuple[bytes, bytes], ...]:
        out: tuple[tuple[bytes, bytes], ...] = (_NOSNIFF,)
        if path.startswith(self.prefix):
            out += _DEA
        if path in self.timing_paths or path.startswith(self.timing_prefixes):
            out += _TIMING
        return out


def set_defaults(raw: RawHeaders, defaults: tuple[tuple[bytes, bytes], ...]) -> None:
    """Append each default whose name the response does not carry yet (raw names are
    lower case in ASGI)."""
    present = {name.lower() for name, _ in raw}
    for name, value in defaults:
        if name not in present:
            raw.append((name, value))


def unexpected_error(scope: Scope, exc: BaseException) -> tuple[Message, Message]:
    """Log an unhandled error and give the 500 answer (start and body messages): the one
    error shape, never a stack trace."""
    log_unhandled(scope["method"], scope["path"], exc)
    body = error_body("internal_error", "the server failed to answer this request")
    start = {
        "type": "http.response.start",
        "status": 500,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    return start, {"type": "http.response.body", "body": body}


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp, *, rules: HeaderRules) -> None:
        self.app = app
        self.rules = rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        defaults = self.rules.defaults(scope["path"])
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                raw = message["headers"] = list(message.get("headers", ()))
                set_defaults(raw, defaults)
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:
            if started:
                raise  # too late for an answer: the server closes the connection
            for message in unexpected_error(scope, exc):
                await send_with_headers(message)
