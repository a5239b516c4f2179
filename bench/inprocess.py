"""``python -m bench.inprocess [N]``: CPU per impression beacon inside the edge's ASGI app.

N unique, signed ``/dea/url/impression`` beacons (after 500 for warm-up) go straight to
the app that ``edge serve`` runs, 32 at a time, on a real SQLite store in a temporary
folder: no server, no sockets, no load generator, so what is left is the edge's own work.
It prints the CPU time of the event-loop thread and of the whole process (the loop plus
the store's writer) per beacon. Run it in two checkouts one after the other to compare
them; ``--profile`` adds the functions that cost most (cProfile, event loop only).

``--served`` sends the beacons as HTTP bytes through the protocol class ``edge serve``
gives uvicorn (uvicorn's parser and response cycle, the header guard, ``EdgeCycle``) on
in-memory transports, 32 connections each sending its next request when its answer is
written: what a beacon costs the server's loop without the sockets and the load
generator, whose noise dominates the section's runs on a busy machine. ``--bare`` serves
``bench.bare:app`` the same way under uvicorn's own protocol, for the ratio.

``--per-client N`` sends each group of N beacons from its own client address (default: as
the load generators do); 1 makes every beacon a client the edge has not seen.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import resource
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from bench import edge_env
from bench.ingest import PATH, mint_bodies
from bench.load import client_address
from edge.app import create_app
from edge.settings import Settings
from edge.signing import Signer

CONCURRENCY = 32
WARM_UP = 500


def _scope(body: bytes, index: int, per_client: int) -> dict[str, Any]:
    """The scope of beacon ``index``: a browser's, from a client address of its own for
    every ``per_client`` beacons."""
    address = client_address(index, per_client)
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
            (b"user-agent", edge_env.BROWSER_UA.encode()),
            (b"x-forwarded-for", address.encode()),
        ],
        "state": {},
    }


def _edge_environ() -> str:
    """Point this process's EDGE_* settings at a fresh folder; the signing key."""
    key = secrets.token_urlsafe(32)
    folder = Path(tempfile.mkdtemp(prefix="bench-inprocess-"))
    os.environ.update(edge_env.edge_settings(signing_key=key))
    os.environ["EDGE_DB"] = str(folder / "edge.db")
    os.environ["EDGE_CACHE_DIR"] = str(folder / "cache")
    return key


async def _measured(
    run: Awaitable[None], profile: bool
) -> tuple[float, float, cProfile.Profile | None]:
    """(event-loop CPU seconds, whole-process CPU seconds, the cProfile when asked) of
    awaiting ``run``."""
    profiler = cProfile.Profile() if profile else None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    loop_cpu = time.thread_time()
    if profiler is not None:
        profiler.enable()
    await run
    if profiler is not None:
        profiler.disable()
    loop_cpu = time.thread_time() - loop_cpu
    after = resource.getrusage(resource.RUSAGE_SELF)
    process_cpu = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
    return loop_cpu, process_cpu, profiler


async def _run(n: int, profile: bool, per_client: int) -> None:
    key = _edge_environ()
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

    async def beacon(body: bytes, index: int) -> None:
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

        await app(_scope(body, index, per_client), receive, send)

    async def run_all(bodies: list[tuple[int, bytes]]) -> None:
        async def worker(part: list[tuple[int, bytes]]) -> None:
            for index, body in part:
                await beacon(body, index)

        await asyncio.gather(*(worker(bodies[i::CONCURRENCY]) for i in range(CONCURRENCY)))

    ad = edge_env.bench_ad()
    bodies = list(enumerate(mint_bodies(Signer(key.encode()), n + WARM_UP, ad, per_client)))
    await run_all(bodies[:WARM_UP])
    loop_cpu, process_cpu, profiler = await _measured(run_all(bodies[WARM_UP:]), profile)
    await inbox.put({"type": "lifespan.shutdown"})
    await outbox.get()
    await life
    print(
        f"{n} beacons: event loop {loop_cpu * 1e6 / n:.0f} us CPU each, process "
        f"{process_cpu * 1e6 / n:.0f} us; answers {statuses}"
    )
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)


class _Transport(asyncio.Transport):
    """A connection's server side in memory: what is written goes to ``on_write``."""

    def __init__(self, on_write: Any) -> None:
        super().__init__()
        self._on_write = on_write
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: Any) -> None:
        self._on_write(bytes(data))

    def close(self) -> None:
        self._closing = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def _run_served(n: int, bare: bool, profile: bool, per_client: int) -> None:
    import uvicorn
    from uvicorn.server import ServerState

    from edge import server

    key = _edge_environ()
    if bare:
        config = uvicorn.Config("bench.bare:app", loop="uvloop", http="httptools",
                                access_log=False, server_header=False, lifespan="on")  # fmt: skip
    else:
        settings = Settings.from_sources()
        edge = create_app(settings)
        config = server.uvicorn_config(settings, edge.serving(server.StartupErrors(edge)))
    config.load()
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    app = config.loaded_app
    life = asyncio.create_task(app({"type": "lifespan", "state": {}}, inbox.get, outbox.put))
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the edge did not start: {started}")
    bodies = mint_bodies(Signer(key.encode()), n + WARM_UP, edge_env.bench_ad(), per_client)
    requests = [
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
        f"User-Agent: {edge_env.BROWSER_UA}\r\n"
        f"X-Forwarded-For: {client_address(i, per_client)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
        for i, body in enumerate(bodies)
    ]
    loop = asyncio.get_running_loop()
    statuses: dict[bytes, int] = {}
    state: dict[str, Any] = {}

    def connection() -> Any:
        def on_write(data: bytes) -> None:
            if not data.startswith(b"HTTP/1.1 "):
                return  # the rest of an answer (the bare app's empty body)
            status = data[9:12]
            statuses[status] = statuses.get(status, 0) + 1
            state["left"] -= 1
            if state["left"] == 0:
                state["done"].set()
            elif state["feeding"]:
                nxt = next(state["requests"], None)
                if nxt is not None:
                    loop.call_soon(protocol.data_received, nxt)

        protocol = config.http_protocol_class(
            config=config, server_state=ServerState(), app_state={}, _loop=loop
        )
        protocol.connection_made(_Transport(on_write))
        return protocol

    connections = [connection() for _ in range(CONCURRENCY)]

    async def run_all(part: list[bytes]) -> None:
        state.update(left=len(part), done=asyncio.Event(), requests=iter(part), feeding=True)
        for protocol in connections:
            protocol.data_received(next(state["requests"]))
        await state["done"].wait()

    await run_all(requests[:WARM_UP])
    statuses.clear()
    loop_cpu, process_cpu, profiler = await _measured(run_all(requests[WARM_UP:]), profile)
    for protocol in connections:
        protocol.connection_lost(None)
    await inbox.put({"type": "lifespan.shutdown"})
    await outbox.get()
    await life
    served = "bench.bare:app" if bare else "the edge"
    answers = {int(k): v for k, v in statuses.items()}
    print(
        f"{n} beacons to {served} through its server protocol: event loop "
        f"{loop_cpu * 1e6 / n:.1f} us CPU each, process {process_cpu * 1e6 / n:.1f} us; "
        f"answers {answers}"
    )
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(40)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__)
    p.add_argument("n", type=int, nargs="?", default=6000, help="beacons measured")
    p.add_argument("--profile", action="store_true", help="print a cProfile of the loop")
    p.add_argument("--served", action="store_true", help="as HTTP bytes, through the server")
    p.add_argument("--bare", action="store_true", help="with --served: bench.bare:app instead")
    p.add_argument(
        "--per-client",
        type=int,
        default=edge_env.BEACONS_PER_CLIENT,
        help="beacons from each client address (1: a new client every beacon)",
    )
    args = p.parse_args(argv)
    import uvloop

    if args.served:
        uvloop.run(_run_served(args.n, args.bare, args.profile, args.per_client))
    else:
        uvloop.run(_run(args.n, args.profile, args.per_client))


if __name__ == "__main__":
    main()
