"""SIGKILL in the middle of a burst of impressions loses nothing acknowledged (issue 5, 7).

Each round: concurrent clients fire impressions with unique tokens and ids at a real
``edge serve`` process, the process is killed with SIGKILL mid-burst, the database is
inspected with the server down, then the edge is restarted on the same database and every
impression of the burst is fired again. The rules checked:

- every impression answered 2xx before the kill is stored: its replay after the restart
  answers ``counted: false``;
- it is stored exactly once: the rows on disk are exactly the acknowledged impressions
  plus those whose answer the kill cut off (their replay also says ``counted: false``);
- nothing is half-written: every impression row has its dedupe keys, its billing event and
  its counter bumps (one job, one savepoint), no key points at a missing row, the file
  passes ``integrity_check``;
- after the replays every impression fired is stored once, however many times it was sent.
"""

from __future__ import annotations

import http.client
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from edge.beacons import issue_impression_token
from edge.qa import EdgeProcess
from edge.signing import Signer

PATH = "/dea/url/impression"
ROUNDS = 3
CLIENTS = 8
# A CPM ad of the live (bundled) catalogue: an impression of a campaign it lacks bills nothing.
AD_ID, CAMPAIGN_ID, PUBLISHER_ID = "ad-gps-watch", "cmp-stride", "fault-pub"
# A reader's browser (a bot's impressions would be stored as invalid and never billed).
READER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0"
CPM_USD = 2.5  # priced per mille: each impression also writes a billing event


@dataclass
class Burst:
    """What the clients sent and what the edge acknowledged, by impression id."""

    sent: dict[str, bytes] = field(default_factory=dict)  # impression_id -> body
    acked: set[str] = field(default_factory=set)
    answers: list[tuple[int, bytes]] = field(default_factory=list)  # unexpected answers
    lock: threading.Lock = field(default_factory=threading.Lock)


def _body(signer: Signer) -> tuple[str, bytes]:
    token, _ = issue_impression_token(
        signer,
        surface="url",
        env="production",
        ad_id=AD_ID,
        campaign_id=CAMPAIGN_ID,
        now=time.time(),
        cpm_usd=CPM_USD,
        publisher_id=PUBLISHER_ID,
        slot_id="slot-1",
    )
    imp_id = str(uuid.uuid4())
    body = {"impression_token": token, "impression_id": imp_id, "v": "fault-test"}
    return imp_id, orjson.dumps(body)


@dataclass(frozen=True)
class Beacon:
    """One kind of durable beacon under test: where it goes and how one is made."""

    path: str
    content_type: str
    make: Callable[[Signer], tuple[str, bytes]]  # -> (its dedupe id, the body)


IMPRESSION = Beacon(PATH, "application/json", _body)


def post(
    conn: http.client.HTTPConnection, body: bytes, beacon: Beacon = IMPRESSION
) -> tuple[int, bytes]:
    headers = {"Content-Type": beacon.content_type, "User-Agent": READER}
    conn.request("POST", beacon.path, body, headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _client(port: int, signer: Signer, beacon: Beacon, burst: Burst, stop: threading.Event) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        while not stop.is_set():
            imp_id, body = beacon.make(signer)
            with burst.lock:
                burst.sent[imp_id] = body  # recorded as sent before it leaves
            try:
                status, payload = post(conn, body, beacon)
            except (OSError, http.client.HTTPException):
                return  # the server was killed: this request's fate is unknown
            if 200 <= status < 300 and orjson.loads(payload) == {
                "acknowledged": True,
                "counted": True,
            }:
                with burst.lock:
                    burst.acked.add(imp_id)
            else:
                with burst.lock:
                    burst.answers.append((status, payload))
    finally:
        conn.close()


def fire_burst_and_kill(
    edge: EdgeProcess, signer: Signer, kill_after_acks: int, beacon: Beacon = IMPRESSION
) -> Burst:
    """CLIENTS concurrent clients fire ``beacon``s until ``kill_after_acks`` are acknowledged;
    then the edge is SIGKILLed while they are still firing."""
    burst = Burst()
    stop = threading.Event()
    args = (edge.port, signer, beacon, burst, stop)
    threads = [threading.Thread(target=_client, args=args, daemon=True) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(burst.acked) < kill_after_acks and time.monotonic() < deadline:
        assert not burst.answers, f"unexpected answers mid-burst: {burst.answers[:3]}"
        time.sleep(0.005)
    assert len(burst.acked) >= kill_after_acks, f"only {len(burst.acked)} acks in 20 s"
    edge.kill()  # SIGKILL while the clients are still firing
    stop.set()
    for t in threads:
        t.join(timeout=15)
        assert not t.is_alive()
    return burst


def _inspect(db: Path) -> dict[str, int]:
    """The database as the killed process left it (opened only while the edge is down)."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        rows = conn.execute("SELECT count(*) FROM impressions").fetchone()[0]
        keyless = conn.execute(
            "SELECT count(*) FROM impressions i WHERE NOT EXISTS "
            "(SELECT 1 FROM impression_keys k WHERE k.impression_id = i.id)"
        ).fetchone()[0]
        orphan_keys = conn.execute(
            "SELECT count(*) FROM impression_keys k WHERE NOT EXISTS "
            "(SELECT 1 FROM impressions i WHERE i.id = k.impression_id)"
        ).fetchone()[0]
        counted = conn.execute(
            "SELECT coalesce(sum(amount), 0) FROM counters "
            "WHERE scope = 'ad' AND scope_id = ? AND counter = 'impressions'",
            (AD_ID,),
        ).fetchone()[0]
        billed, billed_usd = conn.execute(
            "SELECT count(*), coalesce(sum(amount_usd), 0) FROM billing_events"
        ).fetchone()
        return {
            "rows": rows,
            "keyless": keyless,
            "orphan_keys": orphan_keys,
            "counted": counted,
            "billed": billed,
            "billed_usd": billed_usd,
        }
    finally:
        conn.close()


def _replay(edge: EdgeProcess, bodies: dict[str, bytes]) -> dict[str, bool]:
    """Fire each body again; impression id -> the ``counted`` the edge answered."""
    counted: dict[str, bool] = {}
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
    try:
        for imp_id, body in bodies.items():
            status, payload = post(conn, body)
            assert status == 200, (status, payload)
            answer = orjson.loads(payload)
            assert answer["acknowledged"] is True
            counted[imp_id] = answer["counted"]
    finally:
        conn.close()
    return counted


@pytest.mark.slow
def test_sigkill_mid_burst_loses_no_acknowledged_impression(tmp_path):
    db = tmp_path / "edge.db"
    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    settings = {"EDGE_SIGNING_KEY": key, "EDGE_ALLOW_PRIVATE_IPS": "1", "EDGE_LOG_LEVEL": "warning"}
    stored_before = 0
    subprocess.run(  # a registered publisher: a removed one's impressions are invalid
        [sys.executable, "-m", "edge", "publishers", "add", PUBLISHER_ID,
         "--origin", "https://fault.example"],
        env={**os.environ, "EDGE_DB": str(db)}, check=True, capture_output=True,
    )  # fmt: skip
    for round_no in range(ROUNDS):
        with EdgeProcess(db=db, settings=settings) as edge:
            # vary the moment of the kill: early in the burst, then later
            burst = fire_burst_and_kill(edge, signer, kill_after_acks=50 + 250 * round_no)
        state = _inspect(db)
        assert state["keyless"] == 0 and state["orphan_keys"] == 0, state
        assert state["counted"] == state["rows"], f"counters half-written: {state}"
        assert state["billed"] == state["rows"], f"billing half-written: {state}"
        assert state["billed_usd"] == pytest.approx(state["rows"] * CPM_USD / 1000), state
        new_rows = state["rows"] - stored_before

        with EdgeProcess(db=db, settings=settings) as edge:
            counted = _replay(edge, burst.sent)
            lost = [i for i in burst.acked if counted[i]]
            assert not lost, f"round {round_no}: {len(lost)} acknowledged impressions lost"
            cut_off_but_stored = [i for i in burst.sent if i not in burst.acked and not counted[i]]
            # on disk: the acknowledged ones, plus those committed just before the kill whose
            # answer never left, each exactly once and nothing else
            assert new_rows == len(burst.acked) + len(cut_off_but_stored), (
                round_no,
                new_rows,
                len(burst.acked),
                len(cut_off_but_stored),
            )
            # a second replay counts nothing: every impression is now stored exactly once
            assert not any(_replay(edge, dict(list(burst.sent.items())[:200])).values())
        stored_before += len(burst.sent)
        assert _inspect(db)["rows"] == stored_before
