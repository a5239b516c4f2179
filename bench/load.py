"""Load generators: ``wrk`` (Debian's, with ``wrk.lua``) or a Python asyncio fallback.

Both send each body of a list once per pass over keep-alive connections for a fixed time
and give the same figures: requests per second, p50/p99 latency, non-2xx answers. wrk is
preferred because a Python generator on one core saturates before a fast server does (its
figures are marked so in the report).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bench.servers import LOAD_CPU, pin_to
from bench.stats import percentile

LUA = Path(__file__).with_name("wrk.lua")


@dataclass(frozen=True, slots=True)
class LoadResult:
    requests: int
    seconds: float
    non2xx: int
    socket_errors: int
    p50_ms: float
    p99_ms: float
    tool: str

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def run_load(
    url: str,
    bodies: Sequence[bytes],
    *,
    headers: dict[str, str],
    connections: int,
    seconds: float,
    method: str = "POST",
    tool: str | None = None,
    cpus: set[int] | None = None,
    clients_every: int = 0,
) -> LoadResult:
    """Fire ``bodies`` (cycled) at ``url`` for ``seconds`` from the load core, or with wrk
    from ``cpus``, one thread per core. ``clients_every``: each group of that many bodies
    is sent as from its own client, ``X-Forwarded-For: 3.a.b.c`` (0: no such header)."""
    tool = tool or ("wrk" if have_wrk() else "python")
    if tool == "wrk":
        return _run_wrk(
            url, bodies, headers, connections, seconds, method, cpus or {LOAD_CPU}, clients_every
        )
    if cpus is not None:
        raise ValueError("only wrk loads from several cores")
    return _run_python(url, bodies, headers, connections, seconds, method, clients_every)


def client_address(body_index: int, clients_every: int) -> str:
    """The address the load generators give the body at ``body_index`` (from 0): a public
    one in 3.0.0.0/8, which the bundled geo database places in the US, so the geofence
    judges it as it judges a real visitor (a private address takes a shorter path)."""
    c = body_index // clients_every
    return f"3.{(c >> 16) & 255}.{(c >> 8) & 255}.{c & 255}"


def _run_wrk(url, bodies, headers, connections, seconds, method, cpus, clients_every) -> LoadResult:
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        for body in bodies:
            if b"\n" in body:
                raise ValueError("wrk bodies are one per line: no newline inside a body")
            f.write(body + b"\n")
    try:
        cmd = [
            "wrk",
            "--latency",
            f"-t{len(cpus)}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "10s",
            "-s",
            str(LUA),
            url,
            "--",
            method,
            f.name,
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=pin_to(cpus),
            env={
                **os.environ,
                "WRK_THREADS": str(len(cpus)),
                "WRK_CLIENT_EVERY": str(clients_every),
            },
        ).stdout
    finally:
        os.unlink(f.name)
    line = next((x for x in out.splitlines() if x.startswith("WRK_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no figures:\n{out}")
    r = json.loads(line.removeprefix("WRK_JSON "))
    return LoadResult(
        requests=r["requests"],
        seconds=r["duration_us"] / 1e6,
        non2xx=r["non2xx"],
        socket_errors=r["socket_errors"],
        p50_ms=r["p50_us"] / 1000,
        p99_ms=r["p99_us"] / 1000,
        tool="wrk",
    )


def _run_python(url, bodies, headers, connections, seconds, method, clients_every) -> LoadResult:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > LOAD_CPU:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {LOAD_CPU})
    else:
        before = None
    try:
        return asyncio.run(
            _python_load(url, bodies, headers, connections, seconds, method, clients_every)
        )
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


async def _python_load(
    url, bodies, headers, connections, seconds, method, clients_every=0
) -> LoadResult:
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port or 80
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    head = f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()
    )

    def client(i: int) -> str:
        if not clients_every:
            return ""
        return f"X-Forwarded-For: {client_address(i, clients_every)}\r\n"

    requests = [
        (head + client(i) + f"Content-Length: {len(b)}\r\n\r\n").encode() + b
        for i, b in enumerate(bodies)
    ] or [(head + "\r\n").encode()]
    latencies: list[float] = []
    counters = {"next": 0, "non2xx": 0, "errors": 0}
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < deadline:
                raw = requests[counters["next"] % len(requests)]
                counters["next"] += 1
                t0 = time.perf_counter()
                writer.write(raw)
                status_line = await reader.readline()
                length = 0
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length:
                    await reader.readexactly(length)
                latencies.append(time.perf_counter() - t0)
                status = int(status_line.split()[1]) if status_line else 0
                if not 200 <= status < 300:
                    counters["non2xx"] += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            counters["errors"] += 1
        finally:
            writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(connections)))
    elapsed = time.perf_counter() - began
    if not latencies:
        raise RuntimeError(f"no request to {url} completed")
    return LoadResult(
        requests=len(latencies),
        seconds=elapsed,
        non2xx=counters["non2xx"],
        socket_errors=counters["errors"],
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        tool="python",
    )
