"""Pipelined requests over real sockets: every request gets its answer, in order, whatever
the reads the bytes arrive in; the connection limits apply per request."""

from __future__ import annotations

import re
import secrets
import socket
import threading
import time
import uuid
from collections import Counter

import orjson
import pytest

from edge.beacons import issue_impression_token
from edge.qa import EdgeProcess
from edge.signing import Signer

MAX_HEAD = 4096
SETTINGS = {
    "EDGE_MAX_HEADER_BYTES": str(MAX_HEAD),
    "EDGE_HEADER_TIMEOUT_SECONDS": "5",
    "EDGE_KEEP_ALIVE_SECONDS": "2",
    "EDGE_BODY_TIMEOUT_SECONDS": "2",
    "EDGE_MAX_CONNECTIONS": "6",
    "EDGE_SIGNING_KEY": secrets.token_urlsafe(32),
}
HEALTH = b"GET /dea/health HTTP/1.1\r\nHost: x\r\n\r\n"  # 38 bytes
LAST = b"GET /dea/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    with EdgeProcess(db=tmp_path_factory.mktemp("pipelining") / "edge.db", settings=SETTINGS) as e:
        yield e


def _connect(edge) -> socket.socket:
    return socket.create_connection((edge.host, edge.port), timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    """What the server sent until it closed (a reset, when it closed with bytes of ours
    unread, ends it too)."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def _statuses(data: bytes) -> list[int]:
    return [int(s) for s in STATUS.findall(data)]


def _split_pipeline(edge, first: bytes, last: bytes, cut: int) -> bytes:
    """``first`` and the first ``cut`` bytes of ``last`` in one write, the rest of ``last``
    0.3 s later (so the server reads the two apart); everything the server answered."""
    with _connect(edge) as sock:
        sock.sendall(first + last[:cut])
        time.sleep(0.3)
        sock.sendall(last[cut:])
        return _read_all(sock)


def _click(key: str) -> bytes:
    token, _ = issue_impression_token(
        Signer(key.encode()), surface="url", env="production", ad_id="ad-pipe",
        campaign_id="cmp-pipe", now=time.time(), publisher_id="pub-pipe", slot_id="slot-1",
    )  # fmt: skip
    body = orjson.dumps({"impression_token": token, "click_id": str(uuid.uuid4()), "v": "p"})
    return (
        b"POST /dea/url/click HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


# -- the header size limit counts each head alone ------------------------------------------


def test_a_read_of_many_small_requests_ending_inside_a_head_is_not_431(edge):
    # 300 heads of 38 bytes (11 KB, past the 4 KB limit) and the start of the last head in
    # one read, its end in the next: each head is small, so each gets its 200.
    data = _split_pipeline(edge, HEALTH * 300, LAST, 20)
    assert Counter(_statuses(data)) == {200: 301}, Counter(_statuses(data))


def test_a_large_pipeline_written_at_once_is_answered_whole(edge):
    # 10,000 requests (380 KB) written in one go while the answers are read: the server reads
    # them as it can, many reads ending inside a head.
    n = 10_000
    with _connect(edge) as sock:
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(_read_all(sock)))
        reader.start()
        sock.sendall(HEALTH * (n - 1) + LAST)
        reader.join(30)
    assert Counter(_statuses(received[0])) == {200: n}, Counter(_statuses(received[0]))


def test_a_beacon_before_a_pipeline_gets_its_answer(edge):
    data = _split_pipeline(edge, _click(SETTINGS["EDGE_SIGNING_KEY"]) + HEALTH * 200, LAST, 20)
    assert _statuses(data) == [200] * 202, Counter(_statuses(data))
    assert b'"acknowledged":true,"counted":true' in data.partition(b"\r\n\r\n")[2][:200]


def test_a_head_within_the_limit_after_a_full_read_passes(edge):
    # A head of ~3.9 KB begun in a read that holds 7.6 KB of earlier requests, ended in the
    # next read: within the limit on its own.
    big = b"GET /dea/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (MAX_HEAD - 200)
    big += b"\r\nConnection: close\r\n\r\n"
    data = _split_pipeline(edge, HEALTH * 200, big, len(big) - 30)
    assert Counter(_statuses(data)) == {200: 201}, Counter(_statuses(data))


def test_a_head_past_the_limit_split_over_reads_is_still_431(edge):
    # The same, 200 bytes past the limit: counted by itself, it is too large.
    big = b"GET /dea/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (MAX_HEAD + 200)
    big += b"\r\nConnection: close\r\n\r\n"
    data = _split_pipeline(edge, HEALTH * 200, big, len(big) - 30)
    assert _statuses(data)[-1] == 431, Counter(_statuses(data))
    assert b'"headers_too_large"' in data


# -- a connection that ends with answers still due ------------------------------------------

OPENAPI = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"  # a 180 KB answer


def _slow_reader(edge) -> socket.socket:
    """A socket with a small receive buffer: what the server writes to it while it does not
    read soon fills every buffer on the way, and the server's writes pause."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((edge.host, edge.port))
    return sock


def _wait_for(edge, text: str, since: int, seconds: float = 8) -> str:
    """The server's output from ``since`` on, once it holds ``text``."""
    deadline = time.monotonic() + seconds
    while text not in (out := edge.output()[since:]):
        assert time.monotonic() < deadline, f"no {text!r} in:\n{out[-3000:]}"
        time.sleep(0.05)
    return out


def _assert_no_traceback(output: str) -> None:
    for text in ("Traceback", "unhandled error", "Exception in ASGI application"):
        assert text not in output, output[-3000:]


def _send_until_stuck(sock: socket.socket, data: bytes, seconds: float = 1.0) -> None:
    """Send ``data`` until it is all sent or the server took none of it for ``seconds``."""
    sock.setblocking(False)
    sent, stuck_since = 0, 0.0
    while sent < len(data):
        try:
            sent += sock.send(data[sent : sent + 65536])
            stuck_since = 0.0
        except BlockingIOError:
            stuck_since = stuck_since or time.monotonic()
            if time.monotonic() - stuck_since > seconds:
                return
            time.sleep(0.01)


@pytest.mark.parametrize(
    ("kind", "wait"),
    [("openapi", 1.0), ("click-beacons", 0.0)],
    ids=["while-writes-are-paused", "while-beacons-are-in-flight"],
)
def test_a_pipelining_client_that_hangs_up_is_one_info_line(edge, kind, wait):
    # Pipelined requests, no answer read, and the client hangs up: while the server's writes
    # are paused (60 answers of 180 KB), or at once while the first beacon is being stored.
    # The request in flight and those queued behind it all see the client gone (the beacon
    # lane's included): none writes to the closed socket, one line says so.
    since = len(edge.output())
    pipeline = OPENAPI * 60 if kind == "openapi" else _click(SETTINGS["EDGE_SIGNING_KEY"]) * 200
    with _slow_reader(edge) as sock:
        _send_until_stuck(sock, pipeline)
        time.sleep(wait)
    _wait_for(edge, "client gone", since)
    time.sleep(0.5)  # what the requests in flight would log comes right after
    output = edge.output()[since:]
    _assert_no_traceback(output)
    assert output.count("client gone") == 1, output[-3000:]


@pytest.mark.parametrize("kind", ["openapi", "click-beacons"])
def test_a_refusal_behind_requests_in_flight_comes_after_their_answers(edge, kind):
    # Two requests in flight and a head past the limit, in one read: the two get their
    # answers, then the 431, in the order asked (a client matches answers to requests by
    # their order); nothing writes to the socket once it is closed.
    since = len(edge.output())
    first = OPENAPI if kind == "openapi" else _click(SETTINGS["EDGE_SIGNING_KEY"])
    big = b"GET /dea/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (MAX_HEAD + 200) + b"\r\n\r\n"
    with _slow_reader(edge) as sock:
        sock.sendall(first * 2 + big)
        time.sleep(0.5)  # the server's writes of 180 KB answers pause meanwhile
        data = _read_all(sock)
    assert _statuses(data) == [200, 200, 431], _statuses(data)
    assert data.endswith(b'"the request line and headers exceed 4096 bytes"}}')
    time.sleep(0.3)
    _assert_no_traceback(edge.output()[since:])


def test_a_refusal_decided_before_malformed_bytes_in_the_same_read_stands(edge):
    # A head past the limit behind a request in flight, and bytes the parser refuses after
    # it, in one read: the 431 waits for the answer before it, and the parser's error on the
    # bytes after it is moot: no 400 in its place (uvicorn still logs its one warning line).
    since = len(edge.output())
    big = b"GET /dea/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (MAX_HEAD + 1000) + b"\r\n\r\n"
    with _slow_reader(edge) as sock:
        sock.sendall(OPENAPI + big + b"BAD\x01 / HTTP/1.1\r\n\r\n")
        time.sleep(0.5)
        data = _read_all(sock)
    assert _statuses(data) == [200, 431], _statuses(data)
    assert data.endswith(b'"the request line and headers exceed 4096 bytes"}}')
    time.sleep(0.3)
    output = edge.output()[since:]
    _assert_no_traceback(output)


def test_a_503_behind_a_request_in_flight_comes_after_its_answer(edge):
    since = len(edge.output())
    with _slow_reader(edge) as sock:
        # 30 answers of 180 KB, more than the socket buffers take: most wait to be read.
        sock.sendall(OPENAPI * 30)
        time.sleep(0.3)
        idle = [_connect(edge) for _ in range(6)]  # past EDGE_MAX_CONNECTIONS (6) with it
        try:
            time.sleep(0.3)  # all accepted
            sock.sendall(HEALTH)
            time.sleep(0.3)
            data = _read_all(sock)
        finally:
            for s in idle:
                s.close()
    assert _statuses(data) == [200] * 30 + [503], Counter(_statuses(data))
    assert b'"code":"overloaded"' in data.partition(b"HTTP/1.1 503 ")[2]
    time.sleep(0.3)
    _assert_no_traceback(edge.output()[since:])


def test_a_stalled_body_queued_behind_answers_gets_its_408_after_them(edge):
    # 30 requests for 180 KB answers, then a body that stalls: its body timeout (2 s) ends
    # while it still waits behind them (the client takes them slowly), so it never runs, and
    # its 408 comes after the 30 answers.
    stalled = (
        b"POST /dea/url/impression HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{"
    )
    with _slow_reader(edge) as sock:
        sock.sendall(OPENAPI * 30 + stalled)
        data = b""
        for burst in range(1, 4):  # 1 MB every 1.2 s: never a pause as long as the timeout
            time.sleep(1.2)
            while len(data) < burst << 20:
                data += sock.recv(65536)
        data += _read_all(sock)
    assert _statuses(data) == [200] * 30 + [408], Counter(_statuses(data))
    assert data.endswith(b'"the body came too slowly"}}')


# -- a client that does not read its answers ------------------------------------------------


def test_clients_that_read_no_answer_lose_their_slots_at_the_body_timeout(edge):
    # Five clients pipeline 60 requests for answers of 180 KB and read none (each keeps one
    # request in progress); with one idle connection, they take the six connection slots.
    # The server's writes to them pause, and 2 s (EDGE_BODY_TIMEOUT_SECONDS) later it closes
    # them: until then others get 503, after it 200 (the idle one is closed at the 5 s
    # header timeout).
    since = len(edge.output())
    readers = [_slow_reader(edge) for _ in range(5)]
    idle = _connect(edge)
    try:
        began = time.monotonic()
        for sock in readers:
            sock.sendall(OPENAPI * 60)
            time.sleep(0.05)
        with _connect(edge) as sock:
            sock.sendall(LAST)
            assert _statuses(_read_all(sock)) == [503]
        data = b""
        while time.monotonic() - began < 10:
            with _connect(edge) as sock:
                sock.sendall(LAST)
                data = _read_all(sock)
            if _statuses(data) == [200]:
                break
            time.sleep(0.1)
        after = time.monotonic() - began
        assert _statuses(data) == [200], data[:200]
        assert 1.5 < after < 4, after
        for sock in readers:  # each was closed: its socket ends after what it was sent
            sock.settimeout(5)
            assert len(_read_all(sock)) < 60 * 180_000
    finally:
        idle.close()
        for sock in readers:
            sock.close()
    output = _wait_for(edge, "left its answers unread", since)
    assert output.count("left its answers unread") == 5, output[-3000:]
    _assert_no_traceback(output)


def test_a_client_that_reads_in_bursts_gets_every_answer(edge):
    # 40 answers of 180 KB (7 MB, more than the socket buffers hold), read 1 MB at a time
    # with 1.2 s pauses: 3.6 s or more in all, longer than the body timeout, but each time
    # the server's writes pause the client takes enough of them within it.
    with _slow_reader(edge) as sock:
        sock.sendall(OPENAPI * 39 + LAST.replace(b"/dea/health", b"/openapi.json"))
        began = time.monotonic()
        data = b""
        for burst in range(1, 4):
            time.sleep(1.2)
            while len(data) < burst << 20:
                data += sock.recv(65536)
        data += _read_all(sock)
        after = time.monotonic() - began
    assert _statuses(data) == [200] * 40, Counter(_statuses(data))
    assert after > 3.6, after
