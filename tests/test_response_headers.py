"""``edge serve``'s response cycle (``EdgeCycle``) writes exactly what uvicorn's would: the
same bytes, the same refusals and the same connection state, whether its shortcut for the
beacon lane's finished headers (``edge.lane.Finished``) applies or not."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from edge.delivery.events import IMPRESSION_ANSWERS
from edge.lane import Finished
from edge.protocol import EdgeCycle, _rendered


class Transport:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.data += data
        self.writes += 1

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


DATE = [(b"date", b"Thu, 26 Nov 2026 22:00:00 GMT")]
ANSWER_HEADERS = IMPRESSION_ANSWERS[True][1]  # the lane's constant answer, a tuple


def _cycle(kind: type[RequestResponseCycle], *, method="POST", keep_alive=True, defaults=None):
    transport = Transport()
    done: list[bool] = []
    cycle = kind(
        scope={"method": method, "type": "http"},  # type: ignore[arg-type]
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=DATE if defaults is None else defaults,
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: done.append(True),
    )
    return cycle, transport, done


def _answer(kind, headers, body: bytes, **kw) -> tuple[Any, ...]:
    cycle, transport, done = _cycle(kind, **kw)

    async def go():
        await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
        await cycle.send({"type": "http.response.body", "body": body})

    try:
        asyncio.run(go())
    except (RuntimeError, ValueError) as exc:  # uvicorn's refusals
        return ("refused", type(exc), str(exc), transport.data)
    state = (cycle.keep_alive, cycle.response_complete, cycle.chunked_encoding)
    return transport.data, transport.closed, done, state


BODY = IMPRESSION_ANSWERS[True][2]
CASES = {
    "the lane's answer": (ANSWER_HEADERS, BODY),
    "upper-case names": (((b"Content-Length", b"2"), (b"X-A", b"b")), b"{}"),
    "no length: chunked": (((b"content-type", b"text/plain"),), b"abc"),
    "two lengths": (((b"content-length", b"2"), (b"content-length", b"9")), b"{}"),
    "connection close": (((b"content-length", b"2"), (b"connection", b"close")), b"{}"),
    "bad value": (((b"content-length", b"2"), (b"x-a", b"b\r\nx: y")), b"{}"),
    "bad name": (((b"content-length", b"2"), (b"x a", b"b")), b"{}"),
    "bad length": (((b"content-length", b"two"),), b"{}"),
    "body longer than its length": (((b"content-length", b"1"),), b"{}"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize("method", ["POST", "HEAD"])
def test_the_same_bytes_and_state_as_uvicorns_cycle(case, keep_alive, method):
    headers, body = CASES[case]
    kw = {"keep_alive": keep_alive, "method": method}
    for _ in range(2):  # the second time from the remembered rendering
        ours = _answer(EdgeCycle, Finished(headers), body, **kw)
        assert ours == _answer(RequestResponseCycle, Finished(headers), body, **kw)
        assert _answer(EdgeCycle, headers, body, **kw) == ours  # a plain tuple: uvicorn's


def _messages(
    kind, headers, bodies: list[tuple[bytes, bool]], *, disconnect_after_start=False, **kw
) -> tuple[Any, ...]:
    """The bytes, writes and state after a start and the given (body, more_body) messages."""
    cycle, transport, done = _cycle(kind, **kw)

    async def go():
        await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
        if disconnect_after_start:
            cycle.disconnected = True
        for body, more in bodies:
            await cycle.send({"type": "http.response.body", "body": body, "more_body": more})

    try:
        asyncio.run(go())
    except (RuntimeError, ValueError) as exc:
        return ("refused", type(exc), str(exc), transport.data)
    state = (cycle.keep_alive, cycle.response_complete, cycle.expected_content_length)
    return transport.data, transport.closed, done, state


BODIES = {
    "in one message": [(BODY, False)],
    "in two messages": [(BODY[:5], True), (BODY[5:], False)],
    "then an empty last message": [(BODY, True), (b"", False)],
    "short": [(BODY[:-1], False)],
    "long": [(BODY + b" ", False)],
    "unfinished": [(BODY[:5], True)],
    "nothing after the start": [],
}


@pytest.mark.parametrize("bodies", BODIES)
@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize("disconnect", [False, True])
def test_a_held_head_leaves_as_uvicorns_does_whatever_follows_it(bodies, keep_alive, disconnect):
    kw = {"keep_alive": keep_alive, "disconnect_after_start": disconnect}
    messages = BODIES[bodies]
    ours = _messages(EdgeCycle, Finished(ANSWER_HEADERS), messages, **kw)
    theirs = _messages(RequestResponseCycle, Finished(ANSWER_HEADERS), messages, **kw)
    if disconnect or bodies == "nothing after the start":
        # The head waits for its body: once the client is gone it is never written (uvicorn
        # wrote it before it knew), and an app that ends after its start (uvicorn then
        # closes the connection) leaves it unwritten, an incomplete answer either way.
        assert ours[0] == b"" and theirs[0] != b"" and ours[1:] == theirs[1:]
    else:
        assert ours == theirs


def test_the_lanes_answer_is_written_in_one_write():
    cycle, transport, done = _cycle(EdgeCycle)

    async def go():
        await cycle.send({"type": "http.response.start", "status": 200,
                          "headers": Finished(ANSWER_HEADERS)})  # fmt: skip
        assert transport.writes == 0  # held for the body
        await cycle.send({"type": "http.response.body", "body": BODY})

    asyncio.run(go())
    assert transport.writes == 1 and transport.data.endswith(b"\r\n\r\n" + BODY) and done
    assert _answer(RequestResponseCycle, Finished(ANSWER_HEADERS), BODY)[0] == transport.data


def test_finished_headers_are_rendered_once_per_tuple_and_others_never_remembered():
    _rendered.clear()
    headers = ((b"content-length", b"2"), (b"x-seen", b"1"))
    for _ in range(3):
        _answer(EdgeCycle, Finished(headers), b"{}")
    _answer(EdgeCycle, list(headers), b"{}")
    _answer(EdgeCycle, headers, b"{}")
    assert list(_rendered) == [id(headers)] and _rendered[id(headers)][0] is headers


def test_finished_headers_changed_since_are_written_as_they_are_now():
    headers = ((b"content-length", b"2"), (b"x-seen", b"1"))
    _answer(EdgeCycle, Finished(headers), b"{}")  # remembered
    for change in (lambda h: h.append((b"x-added", b"2")), lambda h: h.pop(),
                   lambda h: h.__setitem__(1, (b"x-seen", b"2"))):  # fmt: skip
        ours, theirs = Finished(headers), Finished(headers)
        change(ours)
        change(theirs)
        assert _answer(EdgeCycle, ours, b"{}") == _answer(RequestResponseCycle, theirs, b"{}")


def test_new_default_headers_each_second_are_written_as_given():
    headers = ((b"content-length", b"2"),)
    for date in (b"Thu, 26 Nov 2026 22:00:00 GMT", b"Thu, 26 Nov 2026 22:00:01 GMT"):
        defaults = [(b"date", date)]
        ours = _answer(EdgeCycle, Finished(headers), b"{}", defaults=defaults)
        assert ours == _answer(RequestResponseCycle, headers, b"{}", defaults=defaults)
        assert b"date: " + date + b"\r\n" in ours[0]
    odd = [(b"date", b"x"), (b"content-length", b"5")]  # not plain: left to uvicorn
    assert _answer(EdgeCycle, Finished(headers), b"{}", defaults=odd) == _answer(
        RequestResponseCycle, headers, b"{}", defaults=odd
    )


def test_the_lanes_answer_takes_the_shortcut():
    _answer(EdgeCycle, Finished(ANSWER_HEADERS), BODY)
    entry = _rendered[id(ANSWER_HEADERS)]
    assert entry[0] is ANSWER_HEADERS and entry[1] is not None and entry[2] == len(BODY)


def test_the_served_protocol_answers_through_the_edge_cycle():
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from edge.protocol import guarded_protocol
    from edge.settings import Settings

    async def app(scope, receive, send):
        await receive()
        headers = Finished(ANSWER_HEADERS)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})

    async def go():
        config = Config(app=app, loop="asyncio", lifespan="off", log_level="warning")
        config.load()
        protocol_class = guarded_protocol(Settings())
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
        transport = Transport()
        transport.get_extra_info = lambda name, default=None: default  # type: ignore[method-assign]
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(b"POST /dea/url/impression HTTP/1.1\r\nHost: e\r\n"
                               b"Content-Length: 2\r\n\r\n{}")  # fmt: skip
        assert type(protocol.cycle) is EdgeCycle
        while not transport.data.endswith(BODY):
            await asyncio.sleep(0.01)
        protocol.connection_lost(None)
        return transport.data

    data = asyncio.run(go())
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\n" + BODY)


def _whole(kind, headers, body: bytes, **kw) -> tuple[Any, ...]:
    """``_answer`` through ``send_whole`` where it takes the answer, else the two messages."""
    cycle, transport, done = _cycle(kind, **kw)
    taken = False

    async def go():
        nonlocal taken
        taken = cycle.send_whole(200, headers, body)
        if not taken:
            assert transport.data == b"" and not cycle.response_started  # nothing done
            await cycle.send({"type": "http.response.start", "status": 200,
                              "headers": Finished(headers)})  # fmt: skip
            await cycle.send({"type": "http.response.body", "body": body})

    try:
        asyncio.run(go())
    except (RuntimeError, ValueError) as exc:
        return ("refused", type(exc), str(exc), transport.data)
    if taken:
        assert transport.writes == 1
    state = (cycle.keep_alive, cycle.response_complete, cycle.chunked_encoding)
    return transport.data, transport.closed, done, state


@pytest.mark.parametrize("case", [*CASES, "short body", "long body"])
@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize("method", ["POST", "HEAD"])
def test_a_whole_answer_is_what_uvicorns_cycle_writes_for_its_two_messages(
    case, keep_alive, method
):
    """``send_whole`` writes the bytes, and leaves the state, of uvicorn's ``send`` given
    the start and the body; where it declines (HEAD, headers uvicorn would refuse or treat
    otherwise, a body not of the declared length) it has done nothing."""
    headers, body = CASES.get(case, (ANSWER_HEADERS, BODY))
    if case == "short body":
        body = BODY[:-1]
    elif case == "long body":
        body = BODY + b" "
    kw = {"keep_alive": keep_alive, "method": method}
    for _ in range(2):  # the second time from the remembered rendering
        theirs = _answer(RequestResponseCycle, Finished(headers), body, **kw)
        assert _whole(EdgeCycle, headers, body, **kw) == theirs


def test_the_lanes_answer_is_taken_whole_and_declined_once_the_client_is_gone():
    cycle, transport, done = _cycle(EdgeCycle)
    assert cycle.send_whole(200, ANSWER_HEADERS, BODY) is True
    assert transport.writes == 1 and transport.data.endswith(b"\r\n\r\n" + BODY) and done
    assert _answer(RequestResponseCycle, Finished(ANSWER_HEADERS), BODY)[0] == transport.data
    gone, transport, done = _cycle(EdgeCycle)
    gone.disconnected = True
    assert gone.send_whole(200, ANSWER_HEADERS, BODY) is False
    assert transport.writes == 0 and not gone.response_started and not done


RECEIVE_STATES = {
    "whole body in": dict(body=b'{"a":1}', more_body=False, event=True),
    "part of the body in": dict(body=b'{"a"', more_body=True, event=True),
    "empty body": dict(body=b"", more_body=False, event=True),
    "waiting for 100-continue": dict(body=b"{}", more_body=False, event=True, expect=True),
    "client gone": dict(body=b"{}", more_body=False, event=True, disconnected=True),
    "answer complete": dict(body=b"{}", more_body=False, event=True, complete=True),
    "nothing in yet": dict(body=b"", more_body=True, event=False),
}


def _received(kind, body, more_body, event, expect=False, disconnected=False, complete=False):
    """The message ``receive`` gives in a state, and the state after it."""
    cycle, transport, _ = _cycle(kind)
    cycle.body = bytearray(body)
    cycle.more_body = more_body
    cycle.waiting_for_100_continue = expect
    cycle.disconnected = disconnected
    cycle.response_complete = complete
    cycle.flow.read_paused = True
    paused: list[bool] = []
    transport.resume_reading = lambda: paused.append(False)  # type: ignore[method-assign]

    async def go():
        if event:
            cycle.message_event.set()
        else:  # the rest of the body comes while receive waits
            asyncio.get_running_loop().call_soon(cycle.message_event.set)
        return await cycle.receive()

    message = asyncio.run(go())
    state = (bytes(cycle.body), cycle.message_event.is_set(), cycle.flow.read_paused, paused,
             cycle.waiting_for_100_continue, transport.data)  # fmt: skip
    return message, state


@pytest.mark.parametrize("case", RECEIVE_STATES)
def test_receive_gives_uvicorns_message_and_state(case):
    ours = _received(EdgeCycle, **RECEIVE_STATES[case])
    assert ours == _received(RequestResponseCycle, **RECEIVE_STATES[case])
