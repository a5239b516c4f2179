"""US-only geofence for production. Never installed in the sandbox.

Every path is fenced except the ``open_paths`` and those under an ``open_prefixes`` entry
(``edge.app.build_fence``: health checks for load balancers, the OpenAPI document, the tag's
files, the demo page): default-deny, so a route added later is fenced without anyone
remembering to list it. Refusals are 403 in the one error shape. The address judged
is the peer or, behind ``trusted_proxies``, the rightmost untrusted X-Forwarded-For hop;
it is left in ``scope["state"]["client_ip"]`` for the routes.

Verdicts are remembered in the edge's client cache (``edge.clients.ClientCache``), with
everything else derived from the client's address, keyed by the peer and X-Forwarded-For
values (a browser sends many beacons from one address): parsing the address and the
database lookup then cost a dict hit. A verdict is judged again whenever the geo reader
object changes.

``Geofence`` is the rule; this middleware and the beacon lane (``edge.lane``) share one
instance, so both judge alike and share the client cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edge.clients import CACHE_SIZE, ClientCache
from edge.errors import error_body
from edge.settings import IPNetwork
from geoip import us_only
from geoip.fence import CountryLookup

_MESSAGES = {
    "not_us": "this service accepts requests from US addresses only",
    "unknown": "the client address could not be placed in the US; requests are refused",
    "not_an_ip": "the client address is not an IP address; requests are refused",
}


Refusal = tuple[int, str, str]  # status, error code, message


class Geofence:
    """The US-only rule for one edge: which paths are open, and each request's verdict."""

    def __init__(
        self,
        *,
        geo: Callable[[], CountryLookup | None],
        trusted_proxies: tuple[IPNetwork, ...] = (),
        allow_private: bool = False,
        open_paths: Iterable[str] = (),
        open_prefixes: Iterable[str] = (),
        cache_size: int = CACHE_SIZE,
        clients: ClientCache | None = None,
    ) -> None:
        """``clients``: the edge's client cache, shared with the routes (one of its own,
        of ``cache_size`` entries, when None)."""
        self.geo = geo  # a getter: the reader is opened at start-up, after the stack is built
        self.trusted_proxies = tuple(trusted_proxies)
        self.allow_private = bool(allow_private)
        self.open_paths = frozenset(open_paths)
        self.open_prefixes = tuple(open_prefixes)
        if any(not p.startswith("/") for p in (*self.open_paths, *self.open_prefixes)):
            raise ValueError("open paths and prefixes must start with /")
        if clients is None:
            clients = ClientCache(self.trusted_proxies, signer=lambda: None, size=cache_size)
        elif clients.trusted_proxies != self.trusted_proxies:
            raise ValueError("the client cache resolves addresses behind other proxies")
        self.clients = clients

    def is_open(self, path: str) -> bool:
        return path in self.open_paths or path.startswith(self.open_prefixes)

    def check(self, scope: Scope) -> Refusal | None:
        """The refusal for a fenced request, or None when it may pass; a passing request's
        client address is left in ``scope["state"]["client_ip"]`` for the routes."""
        geo = self.geo()
        if geo is None:  # not started: fail closed rather than serve unfenced
            return 503, "unavailable", "the geo database is not loaded yet"
        client = self.clients.of_scope(scope)
        fenced = client.fenced
        if fenced is None or fenced[0] is not geo or fenced[1] is not self:
            verdict = us_only(geo, client.address, allow_private=self.allow_private)
            fenced = client.fenced = (geo, self, verdict)
        verdict = fenced[2]
        if not verdict.allowed:
            return 403, "geo_restricted", _MESSAGES.get(verdict.reason, "refused")
        scope.setdefault("state", {})["client_ip"] = client.ip
        return None


def refusal_messages(refusal: Refusal) -> tuple[Message, Message]:
    """A refusal's answer in the one error shape: start and body messages."""
    status, code, message = refusal
    body = error_body(code, message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    start = {"type": "http.response.start", "status": status, "headers": headers}
    return start, {"type": "http.response.body", "body": body}


class GeofenceMiddleware:
    def __init__(self, app: ASGIApp, *, fence: Geofence) -> None:
        self.app = app
        self.fence = fence

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.fence.is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        refusal = self.fence.check(scope)
        if refusal is not None:
            for message in refusal_messages(refusal):
                await send(message)
            return
        await self.app(scope, receive, send)
