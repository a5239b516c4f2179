"""Pipelined requests over real sockets: every request gets its answer, in order, whatever
the reads the bytes arrive in; the connection limits apply per request."""

from __future__ import annotations

import re
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
    "EDGE_HEADER_TIMEOUT_SECONDS": "2",
    "EDGE_KEEP_ALIVE_SECONDS": "2",
    "EDGE_BODY_TIMEOUT_SECONDS": "2",
    "EDGE_MAX_CONNECTIONS": "6",
    "EDGE_SIGNING_KEY": "pipelining-" + "k" * 40,
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
