"""Start a real ``edge serve`` process on a free port and stop it, for tests.

It polls the health route until the edge answers (no fixed sleeps), keeps the process's
output in a file and shows it when the process dies, and always stops it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EdgeProcess:
    """``with EdgeProcess(db=path, env="sandbox") as edge: edge.url ...``"""

    def __init__(
        self,
        *,
        db: Path | str,
        env: str = "production",
        host: str = "127.0.0.1",
        port: int | None = None,
        settings: dict[str, str] | None = None,
        start_timeout: float = 90.0,
        subcommand: str = "serve",
    ) -> None:
        """``subcommand``: the ``edge`` sub-command to run (``serve``, or ``demo``)."""
        # A SQLite file, or a postgresql:// URL (several edge processes on one database).
        self.db: Path | str = db if isinstance(db, str) and "://" in db else Path(db)
        self.env = env
        self.host = host
        self.port = port or free_port(host)
        self.settings = dict(settings or {})
        self.start_timeout = start_timeout
        if subcommand not in ("serve", "demo"):
            raise ValueError(f"subcommand is serve or demo, got {subcommand!r}")
        self.subcommand = subcommand
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (kept open while it runs)
            prefix="edge-", suffix=".log", delete=False
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_")}
        env.update(
            EDGE_ENV=self.env,
            EDGE_HOST=self.host,
            EDGE_PORT=str(self.port),
            EDGE_DB=str(self.db),
            EDGE_ACCESS_LOG="0",
            # The process is reached over loopback, which the production geofence refuses
            # unless private addresses are allowed; a test of the fence passes "0" here.
            EDGE_ALLOW_PRIVATE_IPS="1",
            # Every page and beacon of a QA run comes from one loopback address: the
            # per-client limits meant for the open internet would count them as one reader.
            EDGE_IVT_IMPRESSIONS="1000000/1s",
            EDGE_IVT_CLICKS="1000000/1s",
            EDGE_DEA_CLIENT_RATE="1000000/1s",
            EDGE_DEA_CLIENT_TEXT_RATE="1000000/1s",
            EDGE_FAILURE_CLIENT_RATE="1000000/1s",
        )
        env.update(self.settings)
        return env

    def start(self) -> EdgeProcess:
        self.proc = subprocess.Popen(  # noqa: S603 (our interpreter, a checked sub-command)
            [sys.executable, "-m", "edge", self.subcommand],
            env=self.environ(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"edge exited with {self.proc.returncode} while starting:\n{self.output()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/dea/health", timeout=1) as r:  # noqa: S310
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"edge did not answer in {self.start_timeout}s:\n{self.output()}")

    def output(self) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if it lingers; the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush (fault tests)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> EdgeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)
