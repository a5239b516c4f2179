"""The beacon lane: the durable beacons served by plain ASGI in front of the Starlette stack.

A beacon is the edge's most frequent request and its cheapest useful one, so the generic
machinery around it (Starlette's error middlewares, three middleware classes each wrapping
``send``, a router walking every route's regex) was most of its cost. The lane answers
exactly the ``(method, path)`` pairs it is given, with the same handler functions the
routes bind, and applies the same rules in the same order as the stack, through the same
functions and objects:

1. security headers (``edge.middleware.headers``: ``HeaderRules``, ``set_defaults``, and
   ``unexpected_error`` for a 500, which carries no CORS grant, as on the stack);
2. CORS for actual requests (``edge.middleware.cors``: ``granted_origin``,
   ``grant_headers``); preflights are OPTIONS, never a lane pair, so the stack answers them;
3. the geofence in production (``edge.middleware.geofence.Geofence``: the very instance the
   stack's middleware holds, so they also share its client cache, ``edge.clients``);
4. the handler, its errors answered by ``edge.errors.known_error`` (the app's handlers).

Anything else (another method on a beacon path, a trailing slash, HEAD, a mounted app's
``root_path``, lifespan) goes to the stack unchanged, so 404, 405 and the slash redirect
answer as before. Body size, content type, validation and the invalid-traffic rules are in
the handlers and need nothing here.

The most frequent beacons (the tag's impressions) also have a ``direct`` form: a function
of the ASGI scope and ``receive`` that answers with an ``Answer`` (status, raw headers,
body), usually a constant built once from the same ``Response`` its route returns
(``answer_of``), so no ``Request`` or ``Response`` object is made per beacon. The route's
handler and the direct form share the rules (body reading, validation, the count) as
functions. An error the direct form raises is answered by the same ``known_error``. A
direct answer's headers are finished (CORS grant, security defaults) by the same two
functions once per path, answer and granted origin, and reused.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from edge.errors import known_error
from edge.middleware.cors import grant_headers, granted_origin
from edge.middleware.geofence import Geofence, refusal_messages
from edge.middleware.headers import HeaderRules, set_defaults, unexpected_error

Endpoint = Callable[[Request], Awaitable[Response]]
RawHeaders = tuple[tuple[bytes, bytes], ...]
Answer = tuple[int, RawHeaders, bytes]  # status, raw headers, body
Direct = Callable[[Scope, Receive], Awaitable[Answer]]


class Finished(list[tuple[bytes, bytes]]):
    """A direct answer's finished headers as the lane sends them: a fresh list each time (a
    server or middleware may change what it is given) that names the constant tuple it
    was copied from, so a server can reuse what it made of that tuple while the list still
    equals it (``edge.protocol.EdgeCycle``)."""

    __slots__ = ("source",)

    def __init__(self, source: RawHeaders) -> None:
        super().__init__(source)
        self.source = source


def answer_of(response: Response) -> Answer:
    """A response as the lane sends it (a constant answer, built once)."""
    if response.background is not None:
        raise ValueError("an answer has no background task")
    return response.status_code, tuple(response.raw_headers), bytes(response.body)


class BeaconLane:
    def __init__(
        self,
        app: ASGIApp,
        *,
        endpoints: Mapping[tuple[str, str], Endpoint],
        headers: HeaderRules,
        registered_origin: Callable[[str], str | None],
        cors_prefix: str = "/dea/",
        fence: Geofence | None = None,
        direct: Mapping[tuple[str, str], Direct] | None = None,
    ) -> None:
        """``endpoints`` maps ``(METHOD, path)`` to a bound handler; ``direct`` maps some of
        them to their direct form, used instead; ``fence`` is None where the stack has no
        geofence (the sandbox)."""
        self.app = app
        self.endpoints = dict(endpoints)
        if any(not path.startswith(cors_prefix) for _, path in self.endpoints):
            raise ValueError(f"the lane serves only paths under {cors_prefix}")
        self.direct = dict(direct or {})
        if not set(self.direct) <= set(self.endpoints):
            raise ValueError("a direct form needs the handler of its route")
        self.registered_origin = registered_origin
        self.fence = fence
        self._defaults = {path: headers.defaults(path) for _, path in self.endpoints}
        # Per (method, path): what __call__ needs, found once (the fence's open paths are
        # fixed when it is made): the handler, its direct form, whether the path is fenced.
        self._routes = {
            key: (endpoint, self.direct.get(key), fence is not None and not fence.is_open(key[1]))
            for key, endpoint in self.endpoints.items()
        }
        # A direct form's answer finished with the CORS grant and the defaults, per (path,
        # its headers, the granted origin): the answers are mostly constants and the
        # granted origins the registered ones, so each is finished once. Emptied when full.
        self._finished: dict[tuple[str, object, str | None], tuple[RawHeaders, RawHeaders]] = {}
        # Requests answered here, by path: what tests check, and what an operator can read.
        self.handled: Counter[str] = Counter()

    def in_front_of(self, app: ASGIApp) -> BeaconLane:
        """This lane (the same routes, counts and finished answers) as the outermost app a
        server runs: what it answers reaches it with no wrapper coroutine in front, and
        everything else (lifespan included) goes to ``app``, the whole application as the
        server would run it otherwise. The lane's handlers read nothing that app would
        add to the scope."""
        front = copy.copy(self)
        front.app = app
        return front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope["type"] == "http" and not scope.get("root_path"):
            route = self._routes.get((scope["method"], scope["path"]))
        if route is None:
            await self.app(scope, receive, send)
            return
        endpoint, direct, fenced = route
        path: str = scope["path"]
        self.handled[path] += 1
        started = False
        try:
            granted = granted_origin(scope, self.registered_origin)
            refusal = self.fence.check(scope) if fenced and self.fence is not None else None
            response = None
            content: bytes
            raw: list[tuple[bytes, bytes]]
            if refusal is None and direct is not None:
                try:
                    status, headers, content = await direct(scope, receive)
                    constant = True
                except Exception as exc:
                    status, headers, content = await _known_answer(scope, receive, send, exc)
                    constant = False  # an error's answer is made for it
                finished = self._finish(path, headers, granted, constant=constant)
                # A server whose ``send`` belongs to an object that writes such an answer
                # whole (``edge.protocol.EdgeCycle.send_whole``) gets it in one call, without
                # the two messages; it says False, having done nothing, where it would not.
                whole = getattr(getattr(send, "__self__", None), "send_whole", None)
                if whole is not None:
                    started = True
                    if whole(status, finished, content):
                        return
                raw = Finished(finished)
            else:
                if refusal is not None:
                    start, body = refusal_messages(refusal)
                    raw = list(start["headers"])
                    status = start["status"]
                    content = body["body"]
                else:
                    response = await _respond(endpoint, Request(scope, receive, send))
                    status, raw, content = (
                        response.status_code,
                        list(response.raw_headers),
                        bytes(response.body),
                    )
                grant_headers(raw, granted)
                set_defaults(raw, self._defaults[path])
            started = True
            await send({"type": "http.response.start", "status": status, "headers": raw})
            await send({"type": "http.response.body", "body": content})
            if response is not None and response.background is not None:
                await response.background()
        except Exception as exc:
            if started:
                raise  # too late for an answer: the server closes the connection
            start, body = unexpected_error(scope, exc)
            set_defaults(start["headers"], self._defaults[path])
            await send(start)
            await send(body)

    def _finish(
        self, path: str, headers: RawHeaders, granted: str | None, *, constant: bool = True
    ) -> RawHeaders:
        """``headers`` with the CORS grant and the path's defaults (as on every answer).
        ``constant``: the headers are one of a direct form's constant answers."""
        # A constant's headers are keyed by their identity (hashing the nested tuple per
        # beacon cost more than the lookup); the entry holds them, so no other headers can
        # take that identity while it is kept. Other headers (an error's answer, made per
        # request) are keyed by value, so a run of equal errors shares one entry.
        key = (path, id(headers) if constant else headers, granted)
        entry = self._finished.get(key)
        if entry is None or (entry[0] is not headers and entry[0] != headers):
            raw = list(headers)
            grant_headers(raw, granted)
            set_defaults(raw, self._defaults[path])
            if len(self._finished) >= _FINISHED_SIZE:
                self._finished.clear()
            entry = self._finished[key] = (headers, tuple(raw))
        return entry[1]


_FINISHED_SIZE = 1024


async def _respond(endpoint: Endpoint, request: Request) -> Response:
    """The handler's response, or the app's handler's answer to an error it raised."""
    try:
        return await endpoint(request)
    except Exception as exc:
        known = await known_error(request, exc)
        if known is None:
            raise
        return known


async def _known_answer(scope: Scope, receive: Receive, send: Send, exc: Exception) -> Answer:
    """The app's handler's answer to an error a direct form raised (else ``exc`` again)."""
    known = await known_error(Request(scope, receive, send), exc)
    if known is None:
        raise exc
    return answer_of(known)
