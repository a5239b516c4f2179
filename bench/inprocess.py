"""``python -m bench.inprocess [N]``: CPU per impression beacon inside the edge's ASGI app.

N unique, signed ``/dea/url/impression`` beacons (after 500 for warm-up) go straight to
the app that ``edge serve`` runs, 32 at a time, on a real SQLite store in a temporary
folder: no server, no sockets, no load generator, so what is left is the edge's own work.
It prints the CPU time of the event-loop thread and of the whole process (the loop plus
the store's writer) per beacon. Run it in two checkouts one after the other to compare
them; ``--profile`` adds the functions that cost most (cProfile, event loop only).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import edge_env
from bench.ingest import PATH, mint_bodies
from edge.app import create_app
from edge.settings import Settings
from edge.signing import Signer

CONCURRENCY = 32
WARM_UP = 500


def _scope(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "root_path": "",
        "query_string": b"",
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"user-agent", b"bench"),
        ],
        "state": {},
    }


async def _run(n: int, profile: bool) -> None:
    key = "k" * 43
    folder = Path(tempfile.mkdtemp(prefix="bench-inprocess-"))
    os.environ.update(edge_env.edge_settings(signing_key=key))
    os.environ["EDGE_DB"] = str(folder / "edge.db")
    os.environ["EDGE_CACHE_DIR"] = str(folder / "cache")
    edge = create_app(Settings.from_sources())
    app = edge.serving(edge)  # as ``edge serve`` runs it: the beacon lane outermost
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    life = asyncio.create_task(app({"type": "lifespan", "state": {}}, inbox.get, outbox.put))
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the edge did not start: {started}")
    statuses: dict[int, int] = {}

    async def beacon(body: bytes) -> None:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client never disconnects
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses[message["status"]] = statuses.get(message["status"], 0) + 1

        await app(_scope(body), receive, send)

    async def run_all(bodies: list[bytes]) -> None:
        async def worker(part: list[bytes]) -> None:
            for body in part:
                await beacon(body)

        await asyncio.gather(*(worker(bodies[i::CONCURRENCY]) for i in range(CONCURRENCY)))

    bodies = mint_bodies(Signer(key.encode()), n + WARM_UP, edge_env.bench_ad())
    await run_all(bodies[:WARM_UP])
    profiler = cProfile.Profile() if profile else None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    loop_cpu = time.thread_time()
    if profiler is not None:
        profiler.enable()
    await run_all(bodies[WARM_UP:])
    if profiler is not None:
        profiler.disable()
    loop_cpu = time.thread_time() - loop_cpu
    after = resource.getrusage(resource.RUSAGE_SELF)
    process_cpu = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
    await inbox.put({"type": "lifespan.shutdown"})
    await outbox.get()
    await life
    print(
        f"{n} beacons: event loop {loop_cpu * 1e6 / n:.0f} us CPU each, process "
        f"{process_cpu * 1e6 / n:.0f} us; answers {statuses}"
    )
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__)
    p.add_argument("n", type=int, nargs="?", default=6000, help="beacons measured")
    p.add_argument("--profile", action="store_true", help="print a cProfile of the loop")
    args = p.parse_args(argv)
    import uvloop

    uvloop.run(_run(args.n, args.profile))


if __name__ == "__main__":
    main()
