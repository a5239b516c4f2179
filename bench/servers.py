"""Server processes pinned to one core: the edge (``edge serve``) and the bare ASGI ceiling.

Both reuse ``edge.qa.EdgeProcess`` (free port, poll ``/dea/health``, output kept, always
stopped); this adds the CPU pin, the time from spawn to healthy and the resident memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from edge.qa import EdgeProcess

SERVER_CPU = 1  # the server's core; the load generator gets LOAD_CPU
LOAD_CPU = 0


def pin_to(cpu: int | set[int] | None):
    """A ``preexec_fn`` that pins the child (and every thread and process it starts) to
    ``cpu``, one core or a set of them; none where the machine lacks one of them."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = {cpu} if isinstance(cpu, int) else set(cpu)
    if not cpus or max(cpus) >= (os.cpu_count() or 1):
        return None

    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return pin


def rss_mib(pid: int) -> float:
    """Resident memory of a process (VmRSS) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def uss_mib(pid: int) -> float:
    """Unique memory of a process (private pages, clean and dirty) in MiB: what it costs
    beyond what it shares with other processes (the model file, the vector cache)."""
    kib = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            kib += int(line.split()[1])
    return kib / 1024


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by ``pid``: its main thread (the event loop)
    as "main", every other thread (Python does not name them for the OS) as "threads"."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = "main" if tid == str(pid) else "threads"
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


class PinnedEdge(EdgeProcess):
    """``edge serve`` on one core; ``cold_start_s`` is spawn to the first healthy answer."""

    def __init__(self, *, cpu: int | set[int] | None = SERVER_CPU, **kwargs) -> None:
        kwargs.setdefault("start_timeout", 300.0)  # a 100k-ad catalogue loads for a while
        super().__init__(**kwargs)
        self.cpu = cpu
        self.cold_start_s: float | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "edge", "serve"]

    def start(self) -> PinnedEdge:
        began = time.perf_counter()
        self.proc = subprocess.Popen(
            self.command(),
            env=self.environ(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=pin_to(self.cpu),
        )
        self.wait_healthy()
        self.cold_start_s = time.perf_counter() - began
        return self

    @property
    def rss_mib(self) -> float:
        assert self.proc is not None
        return rss_mib(self.proc.pid)

    def thread_cpu_s(self) -> dict[str, float]:
        assert self.proc is not None
        return thread_cpu_s(self.proc.pid)


class BareServer(PinnedEdge):
    """``bench.bare:app`` (or another app of that module) under the edge's uvicorn
    configuration, on the same core."""

    def __init__(self, app: str = "app", **kwargs) -> None:
        kwargs.setdefault("db", os.devnull)
        super().__init__(**kwargs)
        self.app = app

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            f"bench.bare:{self.app}",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
            "--no-server-header",
            "--log-level",
            "warning",
        ]
