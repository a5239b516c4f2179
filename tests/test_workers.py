"""``edge serve --workers N``: N processes on one port, one SQLite database, no lost or
double-counted impression, no ``database is locked`` reaching a client, a dead worker
replaced."""

from __future__ import annotations

import asyncio
import http.client
import os
import secrets
import signal
import threading
import time
import uuid
from pathlib import Path

import orjson
import pytest

from edge.beacons import issue_impression_token
from edge.qa import EdgeProcess
from edge.settings import Settings
from edge.signing import Signer
from edge.store import open_store

PATH = "/dea/url/impression"
# A reader's browser, a registered publisher and a CPM ad of the live (bundled) catalogue:
# valid impressions, each billed.
READER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0"


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(c) for c in text)
    return sorted(out)


def written_bytes(pid: int) -> int:
    """Bytes ``pid`` has written to sockets and files (its answers, its SQLite commits): an
    idle worker writes nothing, one that served beacons writes at least their answers."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError(f"no wchar in /proc/{pid}/io")


def body(signer: Signer) -> bytes:
    token, _ = issue_impression_token(
        signer, surface="url", env="production", ad_id="ad-gps-watch", campaign_id="cmp-stride",
        now=time.time(), cpm_usd=2.0, publisher_id="w-pub", slot_id="s",
    )  # fmt: skip
    return orjson.dumps(
        {"impression_token": token, "impression_id": str(uuid.uuid4()), "v": "workers-test"}
    )


def post(port: int, payload: bytes) -> tuple[int, bytes]:
    # A new connection per request, so the kernel spreads them across the workers.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST", PATH, payload, {"Content-Type": "application/json", "User-Agent": READER}
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def fire(port: int, payloads: list[bytes], threads: int = 8) -> list[tuple[int, bytes]]:
    answers: list[tuple[int, bytes]] = [(0, b"")] * len(payloads)

    def work(start: int) -> None:
        for i in range(start, len(payloads), threads):
            answers[i] = post(port, payloads[i])

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return answers


@pytest.mark.slow
def test_two_workers_share_the_port_and_the_sqlite_database(tmp_path):
    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    db = tmp_path / "edge.db"
    settings = {
        "EDGE_SIGNING_KEY": key,
        "EDGE_WORKERS": "2",
        "EDGE_LOG_LEVEL": "warning",
        "EDGE_IVT_IMPRESSIONS": "1000000/1s",
    }
    _register_publisher(db)
    with EdgeProcess(db=db, settings=settings) as edge:
        assert edge.proc is not None
        workers = children(edge.proc.pid)
        assert len(workers) == 2
        before = {w: written_bytes(w) for w in workers}
        # The edge answers its health check once the first worker is up; the second may
        # still be building its context, and until it is, the first takes every connection.
        # So beacons go in rounds until both have served (a worker that answered even 20
        # wrote more than 4 KiB; CPU time is no measure, as a worker's share of a round can
        # take under one clock tick), then each is sent once more, on whichever worker.
        payloads: list[bytes] = []
        first: list[tuple[int, bytes]] = []
        used: list[int] = []
        deadline = time.monotonic() + 60
        while len(used) < 2 and time.monotonic() < deadline:
            round_ = [body(signer) for _ in range(120)]
            payloads += round_
            first += fire(edge.port, round_)
            used = [w for w in workers if written_bytes(w) - before[w] > 4096]
        replays = fire(edge.port, payloads)

        # A worker killed outright is replaced, and the edge keeps answering meanwhile.
        os.kill(workers[0], signal.SIGKILL)
        assert post(edge.port, body(signer))[0] == 200
        # One snapshot per look: the dead worker lingers as a zombie until the supervisor
        # reaps it, and only then is its replacement started, so two separate reads could
        # see "two children" (the zombie) and then "no zombie" (before the new one).
        deadline = time.monotonic() + 60
        replaced = children(edge.proc.pid)
        while len(replaced) < 2 or workers[0] in replaced:
            assert time.monotonic() < deadline, f"the dead worker was not replaced: {replaced}"
            time.sleep(0.2)
            replaced = children(edge.proc.pid)

    assert [s for s, _ in first] == [200] * len(payloads), {s for s, _ in first}
    assert all(orjson.loads(b)["counted"] is True for _, b in first)
    assert [s for s, _ in replays] == [200] * len(payloads)
    assert all(orjson.loads(b)["counted"] is False for _, b in replays)
    assert len(used) == 2, "both workers should have served"
    assert workers[1] in replaced and len(replaced) == 2

    store = open_store(Settings(db=db))

    async def stored() -> tuple[int, float]:
        await store.open()
        try:
            spend = await store.spend_by_campaign()
            return await store.impression_count(), spend.get("cmp-stride", 0.0)
        finally:
            await store.close()

    count, spend = asyncio.run(stored())
    assert count == len(payloads) + 1
    assert spend == pytest.approx((len(payloads) + 1) * 2.0 / 1000)


def inherited_anonymous_mib(pid: int) -> float:
    """Memory of ``pid``'s anonymous mappings (heap, not files) that it still shares: pages
    it inherited through fork and nobody has written since."""
    kib, anonymous = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and not head[0].endswith(":"):  # a mapping's line: address perms ... [path]
            anonymous = len(head) < 6 or head[5] == "[heap]"
        elif anonymous and head[0] in ("Shared_Clean:", "Shared_Dirty:"):
            kib += int(head[1])
    return kib / 1024


@pytest.mark.slow
def test_workers_share_the_model_loaded_before_the_fork_and_end_with_it(tmp_path):
    """The supervisor loads the embedding model before it forks: its weights and buffers
    (~95 MB that a worker would otherwise hold privately) stay shared pages in every worker.
    Killed outright, it takes the workers with it."""
    settings = {"EDGE_WORKERS": "2", "EDGE_LOG_LEVEL": "warning"}
    with EdgeProcess(db=tmp_path / "edge.db", settings=settings) as edge:
        assert edge.proc is not None
        workers = children(edge.proc.pid)
        assert len(workers) == 2
        shared = [inherited_anonymous_mib(w) for w in workers]
        # A supervisor killed outright (SIGKILL, the OOM killer) takes its workers with it,
        # instead of leaving them on the port with nobody to replace them.
        os.kill(edge.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while alive := [w for w in workers if running(w)]:
            assert time.monotonic() < deadline, f"workers outlived their supervisor: {alive}"
            time.sleep(0.1)
    assert min(shared) > 80, shared


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie nobody reaped has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_worker_that_cannot_start_stops_the_edge_with_its_status(tmp_path):
    # A catalogue that does not validate (a readable file: the start check passes, each
    # worker's start-up refuses it): the supervisor exits with the worker's status rather
    # than restarting them in a loop.
    catalogue = tmp_path / "catalogue.json"
    catalogue.write_text('{"campaigns": [{"id": "x"}]}')
    edge = EdgeProcess(
        db=tmp_path / "edge.db",
        settings={
            "EDGE_WORKERS": "2",
            "EDGE_LOG_LEVEL": "warning",
            "EDGE_CATALOGUE": str(catalogue),
        },
        start_timeout=60,
    )
    try:
        with pytest.raises(RuntimeError, match="exited with 2 while starting"):
            edge.start()
        assert "while starting; stopping" in edge.output()
    finally:
        edge.__exit__(None, None, None)  # stops it and closes its log


@pytest.mark.slow
def test_sighup_reloads_the_catalogue_file_in_every_worker(tmp_path):
    from tests.test_live_catalogue import bundled, with_new_campaign

    catalogue = tmp_path / "catalogue.json"
    catalogue.write_bytes(orjson.dumps(bundled()))
    db = tmp_path / "edge.db"
    settings = {
        "EDGE_WORKERS": "2",
        "EDGE_CATALOGUE": str(catalogue),
        "EDGE_LOG_LEVEL": "warning",
        "EDGE_RATE_LIMIT_AD_MANAGER": "1000/1s",
    }
    with EdgeProcess(db=db, settings=settings) as edge:
        key = _issue_key(db)

        def served() -> set[bool]:
            seen = set()
            for _ in range(8):  # new connections: both workers answer some
                conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=30)
                conn.request(
                    "GET", "/v1/ad-manager/campaigns?limit=200", headers={"X-API-Key": key}
                )
                body = orjson.loads(conn.getresponse().read())
                assert "campaigns" in body, body
                conn.close()
                seen.add(any(c["id"] == "cmp-hot-reload" for c in body["campaigns"]))
            return seen

        assert served() == {False}
        catalogue.write_bytes(orjson.dumps(with_new_campaign(bundled())))
        assert edge.proc is not None
        edge.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while served() != {True}:
            assert time.monotonic() < deadline, "not every worker reloaded"
            time.sleep(0.3)
        assert len(children(edge.proc.pid)) == 2  # SIGHUP reloaded; it stopped nothing


def _issue_key(db: Path) -> str:
    from edge.keys import Keyring

    store = open_store(Settings(db=db))

    async def go() -> str:
        await store.open()
        try:
            key, _ = await Keyring(store, time.time, 5).issue("production", "ad-manager")
            return key
        finally:
            await store.close()

    return asyncio.run(go())


def _register_publisher(db: Path) -> None:
    store = open_store(Settings(db=db))

    async def go() -> None:
        await store.open()
        try:
            await store.upsert_publisher("w-pub", ["https://workers.example"], time.time())
        finally:
            await store.close()

    asyncio.run(go())


def test_a_model_with_several_threads_is_loaded_by_each_worker():
    # A session's thread pool would not survive the fork: each worker loads its own.
    from edge.matching import preload_model

    assert preload_model(Settings(model_threads=2)) is None
