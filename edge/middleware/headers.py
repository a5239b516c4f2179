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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edge.errors import error_body

log = logging.getLogger("edge.errors")


class SecurityHeadersMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        prefix: str = "/dea/",
        timing_paths: Iterable[str] = (),
        timing_prefixes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.prefix = prefix
        self.timing_paths = frozenset(timing_paths)
        self.timing_prefixes = tuple(timing_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        dea = path.startswith(self.prefix)
        timing = path in self.timing_paths or path.startswith(self.timing_prefixes)

        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                out = MutableHeaders(scope=message)
                out.setdefault("X-Content-Type-Options", "nosniff")
                if dea:
                    out.setdefault("Cross-Origin-Resource-Policy", "cross-origin")
                    out.setdefault("Cache-Control", "no-store")
                if timing:
                    out.setdefault("Timing-Allow-Origin", "*")
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:
            if started:
                raise  # too late for an answer: the server closes the connection
            log.error("unhandled error on %s %s", scope["method"], path, exc_info=exc)
            body = error_body("internal_error", "the server failed to answer this request")
            await send_with_headers(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send_with_headers({"type": "http.response.body", "body": body})
