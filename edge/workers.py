"""``edge serve --workers N``: N processes share one listening socket on this machine.

The supervisor (the process ``edge serve`` started) binds the socket, loads the embedding
model (``edge.matching.preload_model``; one model thread, so no thread pool to lose in the
fork), then forks N workers; each worker builds the rest of the edge (its own context,
store connections, catalogue) and runs uvicorn on the inherited socket, so the kernel
spreads connections across them. Every worker does what a single process does: same
routes, same store, keys and publishers (read from the store). What they share in memory:
the model's pages, inherited and never written, and the catalogue's vectors, memory-mapped
from the vector cache file.

The supervisor forwards SIGTERM/SIGINT (graceful stop) and SIGHUP to every worker, and
replaces a worker that dies while serving. A supervisor that dies without forwarding (kill
-9) takes its workers with it: the kernel sends each SIGTERM (Linux's parent-death signal).
A worker that fails during start-up (a bad setting, an unreachable database) stops them
all with its exit status, rather than being restarted in a loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("edge.workers")

START_GRACE_SECONDS = 20.0  # a worker that exits sooner failed to start
RESTART_PAUSE_SECONDS = 0.5
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_parent(parent: int) -> None:
    """Have the kernel send this worker SIGTERM (a graceful stop) when its supervisor dies,
    however it dies: a supervisor killed outright (SIGKILL, the OOM killer) would otherwise
    leave its workers serving the port unsupervised, and a new ``edge serve`` could not bind
    it. Linux only; elsewhere a worker outlives a killed supervisor."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("worker: cannot ask to end with the supervisor (errno %d)", ctypes.get_errno())
    elif os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Forks ``run_worker(index, sock)`` N times and keeps N running until told to stop."""

    def __init__(
        self, workers: int, sock: socket.socket, run_worker: Callable[[int, socket.socket], int]
    ) -> None:
        self.workers = workers
        self.sock = sock
        self.run_worker = run_worker
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (index, started at)
        self.stopping = False
        self.exit_code = 0

    def _spawn(self, index: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                end_with_parent(parent)
                # Until the app takes SIGHUP (a catalogue reload), it must not end the worker.
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                code = self.run_worker(index, self.sock)
            except SystemExit as exc:  # uvicorn exits 3 when the app fails to start
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = (index, time.monotonic())
        log.info("worker %d started (pid %d)", index, pid)

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.stopping = True
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM if signum == signal.SIGINT else signum)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._forward)
        for index in range(self.workers):
            self._spawn(index)
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            index, started = self.children.pop(pid, (-1, 0.0))
            if index < 0:
                continue
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                continue
            if time.monotonic() - started < START_GRACE_SECONDS and code != 0 and code > 0:
                log.error("worker %d exited with %d while starting; stopping", index, code)
                self.exit_code = code
                self._forward(signal.SIGTERM, None)
                continue
            log.warning("worker %d (pid %d) ended with %d; starting another", index, pid, code)
            time.sleep(RESTART_PAUSE_SECONDS)
            if not self.stopping:
                self._spawn(index)
        self.sock.close()
        return self.exit_code
