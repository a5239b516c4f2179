"""SIGKILL in the middle of a burst of clicks loses no acknowledged click.

Concurrent clients fire clicks (each its own token and click id) at a real ``edge serve``,
which is killed with SIGKILL mid-burst; with the server down the database must hold every
click answered ``counted: true``, each with its counter bump (one commit); after a restart
every click of the burst fired again answers ``counted: false`` for each acknowledged one,
and the rows on disk are exactly the acknowledged clicks plus those whose answer the kill
cut off. The clicks have no stored impression, so they are stored invalid: storing is what
is under test here, and it does not depend on validity.
"""

from __future__ import annotations

import http.client
import os
import secrets
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest

from edge.beacons import issue_impression_token
from edge.qa import EdgeProcess
from edge.signing import Signer
from tests.fault.test_sigkill import Beacon, fire_burst_and_kill, post

PATH = "/dea/url/click"
AD_ID, CAMPAIGN_ID, PUBLISHER_ID = "ad-dog-food", "cmp-happy-hound", "fault-pub"


def _body(signer: Signer) -> tuple[str, bytes]:
    token, _ = issue_impression_token(
        signer, surface="url", env="production", ad_id=AD_ID, campaign_id=CAMPAIGN_ID,
        now=time.time(), publisher_id=PUBLISHER_ID, slot_id="slot-1",
    )  # fmt: skip
    click_id = str(uuid.uuid4())
    return click_id, orjson.dumps({"impression_token": token, "click_id": click_id, "v": "f"})


CLICK = Beacon(PATH, "text/plain", _body)


def _stored(db: Path) -> tuple[set[str], float]:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = {row[0] for row in conn.execute("SELECT click_id FROM clicks")}
        bumps = conn.execute(
            "SELECT coalesce(sum(amount), 0) FROM counters WHERE scope = 'ad' AND scope_id = ? "
            "AND (counter = 'clicks' OR counter LIKE 'invalid_clicks_%')",
            (AD_ID,),
        ).fetchone()[0]
        return ids, bumps
    finally:
        conn.close()


@pytest.mark.slow
def test_sigkill_mid_burst_loses_no_acknowledged_click(tmp_path):
    db = tmp_path / "edge.db"
    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    settings = {"EDGE_SIGNING_KEY": key, "EDGE_ALLOW_PRIVATE_IPS": "1", "EDGE_LOG_LEVEL": "warning"}
    subprocess.run(
        [sys.executable, "-m", "edge", "publishers", "add", PUBLISHER_ID,
         "--origin", "https://fault.example"],
        env={**os.environ, "EDGE_DB": str(db)}, check=True, capture_output=True,
    )  # fmt: skip
    with EdgeProcess(db=db, settings=settings) as edge:
        burst = fire_burst_and_kill(edge, signer, kill_after_acks=200, beacon=CLICK)
    assert not burst.answers, burst.answers[:3]
    ids, bumps = _stored(db)
    missing = burst.acked - ids
    assert not missing, f"{len(missing)} acknowledged clicks lost"
    assert ids <= set(burst.sent), "a stored click nobody sent"
    assert bumps == len(ids), "a click stored without its counter bump (or the reverse)"
    with EdgeProcess(db=db, settings=settings) as edge:
        conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
        try:
            for click_id, body in burst.sent.items():
                status, payload = post(conn, body, CLICK)
                assert status == 200, payload
                counted = orjson.loads(payload)["counted"]
                # Stored before the kill (acknowledged or cut off): a replay counts nothing.
                assert counted is (click_id not in ids), click_id
        finally:
            conn.close()
    after, bumps = _stored(db)
    assert after == set(burst.sent) and bumps == len(after)  # each click stored once
