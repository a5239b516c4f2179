"""The HTTP/1.1 protocol the edge serves with: uvicorn's httptools protocol with the
limits it lacks, and a response cycle that writes whole answers in one call.

Connection limits, each a setting:
- ``EDGE_MAX_CONNECTIONS``: open connections and requests in progress; past it a request
  gets 503 in the error shape, with ``Retry-After``.
- ``EDGE_MAX_CLIENT_CONNECTIONS``: open connections from one client address (the trusted
  proxies of ``EDGE_TRUSTED_PROXIES`` excepted); one past it is closed as it is accepted,
  before it can hold a slot of ``EDGE_MAX_CONNECTIONS``: otherwise one address reopening
  a thousand idle sockets as the header timeout closes them kept every other client, health
  checks included, at 503.
- ``EDGE_KEEP_ALIVE_SECONDS``: uvicorn's ``timeout_keep_alive``, idle time between requests.
- ``EDGE_HEADER_TIMEOUT_SECONDS`` and ``EDGE_MAX_HEADER_BYTES``: uvicorn's httptools
  protocol has neither (a socket that never sends, or sends one byte at a time, stays open;
  a 100 MB header is buffered whole), so ``GuardedHttpToolsProtocol`` adds them: a timer
  from the connection (or a request's first byte) to the end of the headers, closing the
  socket when it fires, and a count of the bytes read before the headers ended, answering
  431 past the limit. h11's ``max_incomplete_event_size`` would bound the size but not the
  time, and h11 costs the hot path more CPU per request.
- ``EDGE_BODY_TIMEOUT_SECONDS``: neither has uvicorn a bound on the body (headers with a
  ``Content-Length`` and then a stalled or trickled body held the connection, and its slot
  of ``EDGE_MAX_CONNECTIONS``, for ever), so the same class bounds the time from the end of
  the headers to the end of the body: 408 and close, or just close once an answer started.
  Nor has it a bound on a client that does not take its answers (a request waited in
  ``FlowControl.drain()`` for ever): each time the server's writes pause, the client has
  the same time to take enough of them for writes to resume, or the connection is aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Iterable
from functools import partial
from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from edge.client_ip import IPAddress, parse_address, trusted
from edge.errors import error_body
from edge.lane import Finished, RawHeaders
from edge.settings import Settings

log = logging.getLogger("edge.protocol")


def _refusal(status: int, reason: str, code: str, message: str, extra: str = "") -> bytes:
    body = error_body(code, message)
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        "x-content-type-options: nosniff\r\n"
        "cache-control: no-store\r\n"
        f"{extra}"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


# Past EDGE_MAX_CONNECTIONS: the error shape of every other answer, and when to try again.
_BUSY = _refusal(
    503,
    "Service Unavailable",
    "overloaded",
    "the edge has as many connections and requests in progress as it takes; retry shortly",
    "retry-after: 1\r\n",
)


# A response's headers as written: (the headers object, its "name: value\r\n" lines, its
# content length), or (headers, None, 0) when the shortcut does not apply to them.
_Rendered = tuple[tuple[tuple[bytes, bytes], ...], bytes | None, int]
_RENDERED_SIZE = 1024
_rendered: dict[int, _Rendered] = {}


def _header_lines(headers: Iterable[tuple[bytes, bytes]]) -> tuple[bytes, int | None] | None:
    """``headers`` checked and written as uvicorn's ``send`` does it, with the content
    length they declare; None for what the shortcut leaves to uvicorn: a header uvicorn
    would refuse, a second ``content-length``, ``transfer-encoding`` or ``connection``."""
    lines: list[bytes] = []
    length: int | None = None
    for name, value in headers:
        if HEADER_RE.search(name) or HEADER_VALUE_RE.search(value):
            return None
        name = name.lower()
        if name == b"content-length" and length is None:
            try:
                length = int(value.decode())
            except ValueError:
                return None
        elif name in (b"content-length", b"transfer-encoding", b"connection"):
            return None
        lines += (name, b": ", value, b"\r\n")
    return b"".join(lines), length


def _render(headers: tuple[tuple[bytes, bytes], ...]) -> _Rendered:
    """A response's headers for the shortcut: a plain answer of known length only."""
    checked = _header_lines(headers)
    if checked is None or checked[1] is None:
        return headers, None, 0
    return headers, checked[0], checked[1]


class EdgeCycle(RequestResponseCycle):
    """uvicorn's response cycle with one shortcut: a response start whose headers are the
    beacon lane's finished headers (``edge.lane.Finished``: a list copied from a constant
    tuple, still equal to it) is written from that tuple's rendering, checked by uvicorn's
    rules once per tuple, so a beacon's answer no longer runs two regular-expression
    searches and a lower() per header in Python. What uvicorn's ``send`` does around the
    headers is done the same way here: its default headers (the date) first,
    ``connection: close`` when the connection is not kept alive, the content length the
    body is held to. Anything else (other headers, finished headers changed since, an
    access log, a paused or lost connection, HEAD) is uvicorn's own ``send``.

    Such a head is held until the body comes: a body that completes the answer (exactly
    its declared length, no more to come) is written with it in one ``write``, so the
    answer leaves as one TCP segment instead of two (on loopback each segment's send
    costs the server its own pass through the TCP stack). Any other next message writes
    the held head first, then goes to uvicorn's ``send``, so the bytes are uvicorn's.
    """

    _defaults: tuple[object, bytes | None] = (None, None)  # (the list, its lines)
    _held: bytes | None = None  # a shortcut's head, not written yet

    async def send(self, message: Any) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if self._complete_with(held, message):
                return
            if not self.disconnected:
                self.transport.write(held)
            await super().send(message)
            return
        headers = message.get("headers")
        if type(headers) is not Finished or message["type"] != "http.response.start":
            await super().send(message)
            return
        source = headers.source
        head = self._head(message["status"], source)
        if head is None or tuple(headers) != source:
            await super().send(message)
            return
        self._started(head[1])
        self._held = head[0]

    def send_whole(self, status: int, headers: RawHeaders, body: bytes) -> bool:
        """A whole answer with a constant tuple of headers (the beacon lane's finished
        headers) and a body of exactly their declared length, written at once: what a start
        with ``Finished(headers)`` and one last body message do through ``send``, without
        the two messages. False, with nothing done, wherever ``send`` would not take its
        shortcut or not write the answer whole; the caller then sends the two messages."""
        head = self._head(status, headers)
        if head is None or len(body) != head[1]:
            return False
        self._started(head[1])
        return self._complete_with(head[0], {"type": "http.response.body", "body": body})

    def _head(self, status: int, source: RawHeaders) -> tuple[bytes, int] | None:
        """The head of an answer with the headers ``source`` (a constant tuple) and their
        content length, rendered by uvicorn's rules once per tuple; None where the shortcut
        does not apply (see the class's note)."""
        if (
            self.response_started
            or self.disconnected
            or self.flow.write_paused
            or self.access_log
            or self.scope["method"] == "HEAD"
        ):
            return None
        entry = _rendered.get(id(source))
        if entry is None or entry[0] is not source:
            if len(_rendered) >= _RENDERED_SIZE:
                _rendered.clear()
            entry = _rendered[id(source)] = _render(source)
        lines = entry[1]
        defaults = self._default_lines()
        if lines is None or defaults is None:
            return None
        if self.keep_alive:
            return b"".join((STATUS_LINE[status], defaults, lines, b"\r\n")), entry[2]
        close = b"connection: close\r\n\r\n"
        return b"".join((STATUS_LINE[status], defaults, lines, close)), entry[2]

    def _started(self, length: int) -> None:
        """What uvicorn's ``send`` notes when it writes a start of known length."""
        self.response_started = True
        self.waiting_for_100_continue = False
        self.expected_content_length = length
        self.chunked_encoding = False

    async def receive(self) -> Any:
        """uvicorn's ``receive``, without awaiting the request's event when it is set
        already (the usual beacon: its body arrived with its head): that await returns at
        once, so the message and the state afterwards are the same."""
        if (
            self.message_event.is_set()
            and not self.waiting_for_100_continue
            and not self.disconnected
            and not self.response_complete
        ):
            self.flow.resume_reading()
            self.message_event.clear()
            body, self.body = bytes(self.body), bytearray()
            return {"type": "http.request", "body": body, "more_body": self.more_body}
        return await super().receive()

    def _complete_with(self, head: bytes, message: Any) -> bool:
        """Write ``head`` and ``message``'s body together when the body completes the answer,
        with what uvicorn's ``send`` does then; False (nothing done) otherwise."""
        if (
            message["type"] != "http.response.body"
            or message.get("more_body", False)
            or self.disconnected
            or self.flow.write_paused
        ):
            return False
        body = message.get("body", b"")
        if len(body) != self.expected_content_length:
            return False
        self.expected_content_length = 0
        self.transport.write(head + body)
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()
        return True

    def _default_lines(self) -> bytes | None:
        """The server's default headers (a new list each second: the date) as lines,
        rendered once per list; None when they are not plain headers."""
        last, lines = EdgeCycle._defaults
        if last is not self.default_headers:
            checked = _header_lines(self.default_headers)
            lines = checked[0] if checked is not None and checked[1] is None else None
            EdgeCycle._defaults = (self.default_headers, lines)
        return lines


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header timeout, a header size limit and a body
    timeout.

    All run per request, so all are kept cheap: the header timeout is a deadline noted when
    a request begins and one timer per connection that is re-armed only when it fires before
    the deadline (no timer is made and cancelled per request), and the headers are measured
    only when the bytes received could exceed the limit. The body timeout costs a request
    whose body comes with its headers (a beacon, any GET) two flag writes and one test per
    chunk: its deadline is noted, and its own timer per connection armed, only when a chunk
    ends inside a body; the timer is re-armed, like the head's, when it fires before the
    deadline of a later body.

    uvicorn's keep-alive timeout is kept the same way: uvicorn makes a timer after every
    response and cancels it when the next request's bytes come (~1.6 us a request); here
    a response notes the deadline, bytes received clear it, and one timer per connection
    closes the connection when it fires at a deadline still set (re-armed when the
    deadline moved later since).
    """

    header_timeout: float = 10.0
    body_timeout: float = 20.0
    max_header_bytes: int = 16_384
    max_connections: int = 1000
    max_client_connections: int = 128
    trusted_proxies: tuple[Any, ...] = ()
    # Open connections per client address, shared by the process's connections (each
    # process's class gets its own, ``guarded_protocol``); an address leaves it at 0.
    client_connections: dict[IPAddress, int] = {}  # noqa: RUF012 (replaced per process)
    refused_clients = 0  # connections closed for their address's count, since start
    _refusal_logged = 0.0  # loop time of the last warning about them

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client_address: IPAddress | None = None  # counted in client_connections
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_deadline = 0.0  # loop time by which the current head must have ended
        self._in_head = False  # a request has begun and its headers have not ended
        self._head_bytes = 0  # bytes of earlier reads that ended inside the current head
        self._head_first = 0  # of those, the bytes of the read the head began in
        self._chunk_bytes = 0  # size of the chunk the parser is reading now
        self._refused = False  # answered and closing: the parser's later callbacks are moot
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_deadline: float | None = None  # loop time to close by, while idle
        self._in_body = False  # a request's headers have ended and its body has not
        self._body_deadline = 0.0  # loop time by which that body must have ended; 0: not noted
        self._body_timer: asyncio.TimerHandle | None = None
        # The cycle whose task runs while later requests wait in uvicorn's pipeline (noted
        # only when one waits: otherwise it is self.cycle, the last request read).
        self._running: RequestResponseCycle | None = None
        self._eof = False  # the client closed its side
        self._write_timer: asyncio.TimerHandle | None = None
        self._write_deadline = 0.0  # loop time by which writes paused now must resume

    # uvicorn's protocol narrows asyncio's BaseTransport to Transport; this keeps its signature.
    def _unsupported_upgrade_warning(self) -> None:
        """Nothing: an upgrade request (``Upgrade: websocket``, ``h2c``) is answered as plain
        HTTP. uvicorn would log two warnings per such request, one of them advice to install
        a WebSocket library: a log any client could fill."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self._admit_client(transport):
            return
        self._start_head_clock()

    def _admit_client(self, transport: asyncio.Transport) -> bool:
        """Count the connection for its address; close it when the address is at its limit."""
        peer = transport.get_extra_info("peername")
        address = parse_address(peer[0]) if isinstance(peer, tuple) and peer else None
        if address is None or trusted(address, self.trusted_proxies):
            return True
        counts = self.client_connections
        held = counts.get(address, 0)
        if held >= self.max_client_connections:
            cls = type(self)
            cls.refused_clients += 1
            now = self.loop.time()
            if now - cls._refusal_logged >= 10.0:  # a flood must not flood the log too
                cls._refusal_logged = now
                self.logger.warning(
                    "a client address reached EDGE_MAX_CLIENT_CONNECTIONS (%d): its further "
                    "connections are closed (%d so far)",
                    self.max_client_connections,
                    cls.refused_clients,
                )
            self._refused = True
            transport.abort()
            return False
        counts[address] = held + 1
        self._client_address = address
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        address, self._client_address = self._client_address, None
        if address is not None:
            left = self.client_connections.get(address, 1) - 1
            if left > 0:
                self.client_connections[address] = left
            else:
                self.client_connections.pop(address, None)
        # uvicorn tells only the last request read (self.cycle) that the client is gone: the
        # one answering, and those queued behind it, would write to the closed socket.
        first, unanswered = self._disconnect_all()
        gone = exc is not None or self._eof  # not closed by the server
        if first is not None and gone and not self._refused and not self._in_body:
            # (a client gone mid-body is the app's line: "client gone before the body")
            log.info(
                "client gone before the answer to %s %s (%d request(s) unanswered)",
                first.scope["method"],
                first.scope["path"],
                unanswered,
            )
        self._stop_head_clock()
        self._in_body = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._idle_deadline = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        # The transport holds more than its high-water mark of answers the client has not
        # taken: writes (the app's send) wait for it to drain. The client has the body
        # timeout to take enough of it for writes to resume, each time they pause.
        super().pause_writing()
        self._write_deadline = self.loop.time() + self.body_timeout
        if self._write_timer is None:
            self._write_timer = self.loop.call_at(self._write_deadline, self._write_clock_rang)

    def _write_clock_rang(self) -> None:
        self._write_timer = None
        if not self.flow.write_paused:
            return  # writes resumed: the next pause arms it again
        if self._write_deadline - self.loop.time() > 0.001:  # paused again since it was set
            self._write_timer = self.loop.call_at(self._write_deadline, self._write_clock_rang)
            return
        log.info(
            "closed a connection whose client left its answers unread for %g s "
            "(EDGE_BODY_TIMEOUT_SECONDS)",
            self.body_timeout,
        )
        self._refused = True
        self._disconnect_all()
        self.transport.abort()  # close() would wait for the client to take what is written

    def eof_received(self) -> None:
        self._eof = True  # uvicorn's does nothing: the transport then closes

    def _unset_keepalive_if_required(self) -> None:
        self._idle_deadline = None
        if self.timeout_keep_alive_task is not None:  # uvicorn's timer: never made here
            super()._unset_keepalive_if_required()

    def on_response_complete(self) -> None:
        # uvicorn's, with its keep-alive timer made a deadline (see the class's note).
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._running = cycle
            self._start_asgi_task(cycle, app)
        else:
            self._idle_deadline = self.loop.time() + self.timeout_keep_alive
            if self._idle_timer is None:
                self._idle_timer = self.loop.call_at(self._idle_deadline, self._idle_clock_rang)

    def _idle_clock_rang(self) -> None:
        self._idle_timer = None
        deadline = self._idle_deadline
        if deadline is None:
            return  # a request came since: the next response sets a deadline again
        if deadline - self.loop.time() > 0.001:  # later responses moved it
            self._idle_timer = self.loop.call_at(deadline, self._idle_clock_rang)
        else:
            self._idle_deadline = None
            self.timeout_keep_alive_handler()

    def data_received(self, data: bytes) -> None:
        if self._refused or self.transport.is_closing():
            return
        self._chunk_bytes = len(data)
        super().data_received(data)
        if self._in_body and not self._body_deadline and not self._refused:
            self._start_body_clock()  # this chunk ended inside a body: it is due by then
        if self._in_head and not self._refused:
            # This read ended inside a head (httptools buffers a header until it ends, so
            # this count is what bounds memory); the read that completes it is measured in
            # on_headers_complete. The read a head began in may also hold earlier pipelined
            # requests and bodies, so it is left out of the count judged here: a head that
            # never ends is cut one read later, and the exact measure at its end decides.
            if not self._head_bytes:
                self._head_first = len(data)
            self._head_bytes += len(data)
            if self._head_bytes - self._head_first > self.max_header_bytes:
                self._too_large()

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0
        self._start_head_clock()

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        # The head is at most the bytes received since it began; measure it exactly only
        # when that bound passes the limit.
        if self._head_bytes + self._chunk_bytes > self.max_header_bytes:
            size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
            if size > self.max_header_bytes:
                self._too_large()
                return
        # An HTTP/1.1 request names its host exactly once (RFC 9112, 3.2): a server must
        # answer 400 to one with none or several.
        if sum(name == b"host" for name, _ in self.headers) != 1 and (
            self.parser.get_http_version() != "1.0"
        ):
            self._refuse(
                _refusal(
                    400,
                    "Bad Request",
                    "bad_request",
                    "an HTTP/1.1 request carries exactly one Host header",
                )
            )
            return
        # EDGE_MAX_CONNECTIONS open connections (this one among them) and as many requests
        # in progress are taken; past either, a 503 in the error shape with Retry-After.
        # (uvicorn's own limit_concurrency refused the Nth connection, in plain text.)
        if len(self.connections) > self.max_connections or len(self.tasks) >= self.max_connections:
            self.logger.warning("Exceeded the connection limit (EDGE_MAX_CONNECTIONS).")
            self._refuse(_BUSY)
            return
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not before:  # a request (not an upgrade): its body is due
            self._in_body = True  # until on_message_complete (the same feed, for most)
            self._body_deadline = 0.0
            if type(cycle) is RequestResponseCycle:
                cycle.__class__ = EdgeCycle  # before its task first runs
            if self.pipeline and len(self.pipeline) == 1:  # the first to wait: before runs
                self._running = before

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        if not self._refused:
            super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        # uvicorn's answer to bytes its parser refuses (a second Content-Length, a bad chunk
        # size, a control character in a header, an unknown method) was plain text without
        # the safe headers: now the one error shape, after the answers due before it. It is
        # called from uvicorn's ``except httptools.HttpParserError``, whose reason (llhttp's
        # fixed words, never the client's bytes) says what was wrong. A refusal decided
        # earlier in the same read (a 431 or 503 waiting for the answers before it) stands.
        if self._refused:
            return
        error = sys.exc_info()[1]
        reason = f": {str(error).rstrip('.')}" if error is not None and str(error) else ""
        self._refuse(
            _refusal(
                400,
                "Bad Request",
                "bad_request",
                f"the request is not valid HTTP/1.1{reason}",
            ),
            this=self.cycle if self._in_body else None,  # its body was malformed
        )

    def _too_large(self) -> None:
        self._refuse(
            _refusal(
                431,
                "Request Header Fields Too Large",
                "headers_too_large",
                f"the request line and headers exceed {self.max_header_bytes} bytes",
            )
        )

    def _start_head_clock(self) -> None:
        """A head (or, on a new connection, its first byte) is due within the timeout."""
        self._head_deadline = self.loop.time() + self.header_timeout
        if self._head_timer is None:
            self._head_timer = self.loop.call_at(self._head_deadline, self._head_clock_rang)

    def _stop_head_clock(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_clock_rang(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        waiting = self._in_head or getattr(self, "cycle", None) is None
        if not waiting:
            return  # between requests: the keep-alive timeout governs; the next head re-arms
        if self._head_deadline - self.loop.time() > 0.001:  # a later head began since it was set
            self._head_timer = self.loop.call_at(self._head_deadline, self._head_clock_rang)
        elif self._in_head:
            self._refuse(
                _refusal(408, "Request Timeout", "request_timeout", "the headers came too slowly")
            )
        else:  # connected and never sent a byte
            self.transport.close()

    def _start_body_clock(self) -> None:
        """The body whose headers ended in this chunk is due within the body timeout."""
        self._body_deadline = self.loop.time() + self.body_timeout
        if self._body_timer is None:
            self._body_timer = self.loop.call_at(self._body_deadline, self._body_clock_rang)

    def _body_clock_rang(self) -> None:
        self._body_timer = None
        if not self._in_body or self._refused or self.transport.is_closing():
            return  # the body ended: the next one that spans chunks re-arms
        now = self.loop.time()
        if self._body_deadline - now > 0.001:  # a later body began since it was set
            self._body_timer = self.loop.call_at(self._body_deadline, self._body_clock_rang)
        elif self.flow.read_paused:
            # The server stopped reading (a pipelined request waiting for the one before,
            # or a large body the app has not read yet): the wait is not the client's.
            # Reading resumes once the app reads or answers; the client then has a timeout.
            self._body_deadline = now + self.body_timeout
            self._body_timer = self.loop.call_at(self._body_deadline, self._body_clock_rang)
        else:
            self._body_too_slow()

    def _body_too_slow(self) -> None:
        """Past the body timeout: 408 and close, or only close when an answer has begun
        (the app answered without reading the whole body, or is answering: nothing more
        can be said on this connection)."""
        self._refuse(
            _refusal(408, "Request Timeout", "request_timeout", "the body came too slowly"),
            this=self.cycle,
        )

    def _refuse(self, raw: bytes, *, this: RequestResponseCycle | None = None) -> None:
        """Answer ``raw`` and close the connection. The request refused is the one whose
        head is being read, or ``this``, the last one read, whose body is (its app then
        sees the client gone, and its answer, if begun, ends with the connection). Answers
        still due to the requests before it go first: a client matches answers to its
        pipelined requests by their order, so a refusal written at once would pass for the
        answer to an earlier one, whose own answer would then be lost."""
        self._refused = True
        self._stop_head_clock()
        self._in_head = False
        self._in_body = False
        before: RequestResponseCycle | None = self.cycle  # the last answer due before it
        if this is not None:
            if not this.response_complete:
                this.disconnected = True
            this.message_event.set()
            if this.response_started:  # too late for another answer
                self._close(None)
                return
            before = None  # it runs: the answers before it are written
            if self.pipeline and self.pipeline[0][0] is this:  # it waits behind others
                self.pipeline.popleft()
                before = self.pipeline[0][0] if self.pipeline else self._running
        if before is not None and not before.response_complete and not before.disconnected:
            self.flow.pause_reading()
            before.on_response = partial(self._answer_after, raw)
            return
        self._close(raw)

    def _answer_after(self, raw: bytes) -> None:
        """The last answer due before a refusal is written: now the refusal."""
        self.server_state.total_requests += 1
        self._close(raw)

    def _close(self, raw: bytes | None) -> None:
        """Write ``raw`` (unless the connection is closing already) and close: every request
        of the connection still unanswered sees the client gone."""
        self._refused = True
        self._disconnect_all()
        if raw is not None and not self.transport.is_closing():
            with contextlib.suppress(Exception):
                self.transport.write(raw)
        self.transport.close()

    def _disconnect_all(self) -> tuple[RequestResponseCycle | None, int]:
        """Tell every request of this connection not answered yet that the client is gone
        (its receive() gets http.disconnect, its send() writes nothing): the one answering,
        those queued behind it, the last one read. The first of them, and how many."""
        cycles = [self._running, *reversed([c for c, _ in self.pipeline]), self.cycle]
        unanswered: list[RequestResponseCycle] = []
        for cycle in cycles:
            if cycle is None or cycle.response_complete or cycle in unanswered:
                continue
            unanswered.append(cycle)
            cycle.disconnected = True
            cycle.message_event.set()
        return (unanswered[0] if unanswered else None), len(unanswered)


def guarded_protocol(settings: Settings) -> type[GuardedHttpToolsProtocol]:
    """The protocol class with this process's limits (uvicorn instantiates it per socket)."""
    return type(
        "EdgeHttpProtocol",
        (GuardedHttpToolsProtocol,),
        {
            "header_timeout": float(settings.header_timeout_seconds),
            "body_timeout": float(settings.body_timeout_seconds),
            "max_header_bytes": settings.max_header_bytes,
            "max_connections": settings.max_connections,
            "max_client_connections": settings.max_client_connections,
            "trusted_proxies": settings.trusted_proxies,
            "client_connections": {},
        },
    )
