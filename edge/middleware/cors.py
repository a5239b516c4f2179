"""CORS for the tag's calls to /dea: registered publisher origins only.

Preflights (OPTIONS with ``Access-Control-Request-Method``) to the listed paths are answered
here, before the geofence and the routes: granted with ``Access-Control-Max-Age: 7200`` for
a registered origin asking for a method the route has, refused with a 403 in the error
shape otherwise. Actual responses on /dea get ``Vary: Origin`` always and the grant only
for a registered origin. Credentials are never allowed: the tag sends no cookies, and
``sendBeacon`` with a JSON Blob (which would need them) is not used.

``grant_headers`` is the rule for actual responses, used by this middleware and by the
beacon lane (``edge.lane``) alike.

The match routes (``explained_paths``) refuse an unregistered origin themselves, with a
reason (``origin_not_allowed``: "origin ... is not registered for publisher ..."). A refused
preflight is only "Failed to fetch" to the page, so there a preflight from any origin is
granted (for ``EXPLAIN_MAX_AGE_SECONDS``) and an error response to an unregistered origin
carries a grant for that origin: the tag reads why, and nothing but refusals is readable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edge.errors import error_body
from edge.http import header

MAX_AGE_SECONDS = 7200  # Chromium caps preflight caching at 2 h; longer buys nothing
EXPLAIN_MAX_AGE_SECONDS = 600  # an origin registered later is granted in full soon
ALLOW_HEADERS = frozenset({"content-type"})
EXPOSE_HEADERS = "Retry-After"


_ALLOW_ORIGIN = b"access-control-allow-origin"
_EXPOSE = b"access-control-expose-headers"


def grant_headers(
    raw: list[tuple[bytes, bytes]], granted: str | None, refused: str | None = None
) -> None:
    """Add the CORS answer to an actual /dea response's raw headers, in place:
    ``Vary: Origin`` always (merged into any Vary the route set), and the grant for a
    registered origin (``granted``: its canonical form, None when not registered), or for
    ``refused``, the unregistered origin of a refusal it may read."""
    vary = []
    for name, value in raw:
        if name == _ALLOW_ORIGIN:
            # The route chose its own policy (the public tag script: "*", so SRI works on
            # any page); it does not vary by origin, so CDNs keep one copy.
            return
        if name == b"vary":
            vary.append(value)
    _set(raw, b"vary", b", ".join([*vary, b"Origin"]))
    if granted is not None:
        _set(raw, _ALLOW_ORIGIN, granted.encode("latin-1"))
        _set(raw, _EXPOSE, EXPOSE_HEADERS.encode("latin-1"))
    elif refused is not None:
        _set(raw, _ALLOW_ORIGIN, refused.encode("latin-1"))


def _set(raw: list[tuple[bytes, bytes]], name: bytes, value: bytes) -> None:
    """One header ``name``: its first occurrence replaced (others dropped), else appended."""
    found = [i for i, (n, _) in enumerate(raw) if n == name]
    if not found:
        raw.append((name, value))
        return
    for i in reversed(found[1:]):
        del raw[i]
    raw[found[0]] = (name, value)


def granted_origin(scope: Scope, registered_origin: Callable[[str], str | None]) -> str | None:
    """The canonical form of the request's ``Origin`` when it is registered, else None."""
    origin = header(scope, b"origin")
    return None if origin is None else registered_origin(origin)


class CORSMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        registered_origin: Callable[[str], str | None],
        preflight_paths: Mapping[str, frozenset[str]],
        explained_paths: frozenset[str] = frozenset(),
        prefix: str = "/dea/",
    ) -> None:
        """``registered_origin`` gives the registered, canonical form of an allowed origin
        (None otherwise): the grant names that form, never the header as sent.
        ``preflight_paths`` maps a path to the methods a preflight may ask for;
        ``explained_paths`` are those whose refusals any origin may read (see above)."""
        self.app = app
        self.explained_paths = explained_paths
        self.registered_origin = registered_origin
        self.preflight_paths = {
            p: frozenset(m.upper() for m in ms) for p, ms in preflight_paths.items()
        }
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if scope["method"] == "OPTIONS" and scope["path"] in self.preflight_paths:
            await self._preflight(scope["path"], origin, headers, send)
            return
        granted = granted_origin(scope, self.registered_origin)
        # An unregistered origin may read a match route's refusal (see above).
        explain = origin if granted is None and scope["path"] in self.explained_paths else None

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = message["headers"] = list(message.get("headers", ()))
                grant_headers(raw, granted, explain if message["status"] >= 400 else None)
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _preflight(self, path: str, origin: str | None, headers: Headers, send: Send) -> None:
        vary = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"
        if "access-control-request-method" not in headers:
            # An OPTIONS that is not a CORS preflight: say what is missing rather than 405.
            body = error_body(
                "bad_request",
                "not a CORS preflight: Access-Control-Request-Method is missing",
                "Access-Control-Request-Method",
            )
            await _send(send, 400, body, [("content-type", "application/json"), ("vary", vary)])
            return
        method = headers["access-control-request-method"].strip().upper()
        asked = {
            h.strip().lower()
            for h in headers.get("access-control-request-headers", "").split(",")
            if h.strip()
        }
        allowed_methods = self.preflight_paths[path]
        problem = None
        granted = None if origin is None else self.registered_origin(origin)
        max_age = MAX_AGE_SECONDS
        if granted is None and origin is not None and path in self.explained_paths:
            granted, max_age = origin, EXPLAIN_MAX_AGE_SECONDS  # the route says why it refuses
        if granted is None:
            problem = (
                "cors_origin_not_allowed",
                f"origin {origin!r} is not a registered publisher",
            )
        elif method not in allowed_methods:
            problem = ("cors_method_not_allowed", f"{method} is not allowed on {path}")
        elif not asked <= ALLOW_HEADERS:
            bad = ", ".join(sorted(asked - ALLOW_HEADERS))
            problem = ("cors_headers_not_allowed", f"request headers not allowed: {bad}")
        if problem is not None:
            body = error_body(*problem)
            await _send(send, 403, body, [("content-type", "application/json"), ("vary", vary)])
            return
        assert granted is not None  # refused above when not registered
        out = [
            ("access-control-allow-origin", granted),
            ("access-control-allow-methods", ", ".join(sorted(allowed_methods))),
            ("access-control-allow-headers", "Content-Type"),
            ("access-control-max-age", str(max_age)),
            ("vary", vary),
        ]
        # Chrome's Private Network Access asks before a public page calls a private edge.
        if headers.get("access-control-request-private-network") == "true":
            out.append(("access-control-allow-private-network", "true"))
        await _send(send, 204, b"", out)


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
