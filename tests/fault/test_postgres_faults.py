"""Faults with PostgreSQL (fsync on: these tests are about durability).

- SIGKILL of one of two nodes in the middle of a burst loses no acknowledged impression,
  stores each exactly once, and the other node keeps serving.
- The database restarted under load: clients get 200 or 503 + Retry-After, never another
  status, never a 2xx for an impression that was not saved; the edge recovers by itself.
"""

from __future__ import annotations

import http.client
import secrets
import threading
import time
import uuid

import orjson
import psycopg
import pytest

from edge.beacons import issue_impression_token
from edge.qa import EdgeProcess
from edge.signing import Signer
from tests.pgserver import PostgresServer

pytestmark = pytest.mark.slow
PATH = "/dea/url/impression"
# A reader's browser, a registered publisher and a generous per-client rate: these
# impressions are valid, so each is billed (invalid traffic is stored but never billed),
# their ad a CPM ad of the live (bundled) catalogue (a campaign it lacks bills nothing).
READER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0"
VALID = {"EDGE_IVT_IMPRESSIONS": "1000000/1s"}


def register_publisher(url: str) -> None:
    import asyncio

    from edge.store import PostgresStore

    async def go() -> None:
        store = PostgresStore(url)
        await store.open()
        try:
            await store.upsert_publisher("f-pub", ["https://fault.example"], time.time())
        finally:
            await store.close()

    asyncio.run(go())


@pytest.fixture(scope="module")
def durable_postgres():
    server = PostgresServer(fsync=True)
    yield server
    server.close()


def body(signer: Signer) -> tuple[str, bytes]:
    token, _ = issue_impression_token(
        signer, surface="url", env="production", ad_id="ad-gps-watch", campaign_id="cmp-stride",
        now=time.time(), cpm_usd=2.0, publisher_id="f-pub", slot_id="s",
    )  # fmt: skip
    iid = str(uuid.uuid4())
    return iid, orjson.dumps({"impression_token": token, "impression_id": iid, "v": "fault"})


def post(port: int, payload: bytes) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST", PATH, payload, {"Content-Type": "application/json", "User-Agent": READER}
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class Load:
    """Client threads firing fresh impressions at a node until stopped."""

    def __init__(self, port: int, signer: Signer, threads: int = 6) -> None:
        self.port, self.signer = port, signer
        self.sent: dict[str, bytes] = {}
        self.acked: set[str] = set()
        self.statuses: list[int] = []
        self.bad: list[tuple[int, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        while not self.stop.is_set():
            iid, payload = body(self.signer)
            with self.lock:
                self.sent[iid] = payload
            try:
                status, headers, answer = post(self.port, payload)
            except (OSError, http.client.HTTPException):
                continue  # the node died under us: the answer never came
            with self.lock:
                self.statuses.append(status)
                if status == 200 and orjson.loads(answer)["counted"] is True:
                    self.acked.add(iid)
                elif not (status == 503 and headers.get("retry-after")):
                    self.bad.append((status, headers, answer))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def wait_acks(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acknowledged"
            time.sleep(0.01)


def replay_counted(port: int, sent: dict[str, bytes]) -> dict[str, bool]:
    out = {}
    for iid, payload in sent.items():
        status, _, answer = post(port, payload)
        assert status == 200, (status, answer)
        out[iid] = orjson.loads(answer)["counted"]
    return out


def rows(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql.encode()).fetchone()
        assert row is not None
        return int(row[0])


def test_sigkill_of_one_node_mid_burst_loses_nothing_and_the_other_serves(durable_postgres):
    url = durable_postgres.new_database()
    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    settings = {"EDGE_SIGNING_KEY": key, "EDGE_LOG_LEVEL": "warning", **VALID}
    register_publisher(url)
    with EdgeProcess(db=url, settings=settings) as a, EdgeProcess(db=url, settings=settings) as b:
        with Load(a.port, signer) as load:
            load.wait_acks(150)
            a.kill()
        # The other node keeps serving.
        _, fresh = body(signer)
        assert orjson.loads(post(b.port, fresh)[2])["counted"] is True
        counted = replay_counted(b.port, load.sent)
    lost = [i for i in load.acked if counted[i]]
    assert not lost, f"{len(lost)} acknowledged impressions lost"
    cut_off_but_stored = [i for i in load.sent if i not in load.acked and not counted[i]]
    stored = rows(url, "SELECT count(*) FROM impressions")
    # The acknowledged ones, those committed whose answer the kill cut off, the node b
    # probe, and the replays of the rest: every impression sent, each exactly once.
    assert stored == len(load.sent) + 1
    assert len(load.acked) + len(cut_off_but_stored) <= len(load.sent)
    assert rows(url, "SELECT count(*) FROM billing_events") == stored  # all valid, all billed
    assert not load.bad, load.bad[:3]


def test_a_database_restart_under_load_is_503_then_recovery(durable_postgres):
    url = durable_postgres.new_database()
    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    settings = {"EDGE_SIGNING_KEY": key, "EDGE_LOG_LEVEL": "error", **VALID}
    register_publisher(url)
    with EdgeProcess(db=url, settings=settings) as edge:
        with Load(edge.port, signer) as load:
            load.wait_acks(50)
            durable_postgres.stop()
            time.sleep(1.0)  # load keeps coming while the database is down
            durable_postgres.start()
            before = len(load.acked)
            load.wait_acks(before + 50, timeout=30)  # recovered by itself
        counted = replay_counted(edge.port, load.sent)
    assert 503 in load.statuses, "the outage was never seen"
    assert not load.bad, f"answers other than 200 or 503 + Retry-After: {load.bad[:3]}"
    lost = [i for i in load.acked if counted[i]]
    assert not lost, f"{len(lost)} acknowledged impressions were not saved"
    assert rows(url, "SELECT count(*) FROM impressions") == len(load.sent)
