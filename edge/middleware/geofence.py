"""US-only geofence for production (SPEC 1, 5.11; DESIGN 4.6). Never installed in the sandbox.

Every path is fenced except the ``open_paths`` (health checks for load balancers, the
OpenAPI document, the tag script): default-deny, so a route added later is fenced without
anyone remembering to list it. Refusals are 403 in the one error shape. The address judged
is the peer or, behind ``trusted_proxies``, the rightmost untrusted X-Forwarded-For hop;
it is left in ``scope["state"]["client_ip"]`` for the routes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from edge.delivery.client_ip import IPNetwork, from_scope
from edge.errors import error_body
from geoip import us_only
from geoip.fence import CountryLookup

_MESSAGES = {
    "not_us": "this service accepts requests from US addresses only",
    "unknown": "the client address could not be placed in the US; requests are refused",
    "not_an_ip": "the client address is not an IP address; requests are refused",
}


class GeofenceMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        geo: Callable[[], CountryLookup | None],
        trusted_proxies: tuple[IPNetwork, ...] = (),
        allow_private: bool = False,
        open_paths: Iterable[str] = (),
        open_prefixes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.geo = geo  # a getter: the reader is opened at start-up, after the stack is built
        self.trusted_proxies = tuple(trusted_proxies)
        self.allow_private = bool(allow_private)
        self.open_paths = frozenset(open_paths)
        self.open_prefixes = tuple(open_prefixes)
        if any(not p.startswith("/") for p in (*self.open_paths, *self.open_prefixes)):
            raise ValueError("open paths and prefixes must start with /")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in self.open_paths or path.startswith(self.open_prefixes):
            await self.app(scope, receive, send)
            return
        ip = from_scope(scope, self.trusted_proxies)
        geo = self.geo()
        if geo is None:  # not started: fail closed rather than serve unfenced
            await _refuse(send, 503, "unavailable", "the geo database is not loaded yet")
            return
        verdict = us_only(geo, ip, allow_private=self.allow_private)
        if not verdict.allowed:
            await _refuse(send, 403, "geo_restricted", _MESSAGES.get(verdict.reason, "refused"))
            return
        scope.setdefault("state", {})["client_ip"] = str(ip)
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = error_body(code, message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
