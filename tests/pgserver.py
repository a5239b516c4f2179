"""A throwaway PostgreSQL 15 server for tests: its own data folder, a free port, never the
machine's own cluster or service.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
``postgres`` system user (``runuser``). ``fsync`` is off by default (speed); the durability
tests start their own server with it on. ``make test`` installs Debian's ``postgresql``
package when the binaries are missing, so no test is skipped for want of a server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

PG_BIN = Path(os.environ.get("EDGE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    def __init__(self, *, fsync: bool = False) -> None:
        if not (PG_BIN / "pg_ctl").exists():
            raise RuntimeError(
                f"PostgreSQL 15 server binaries not found in {PG_BIN}: "
                "`make test` installs Debian's postgresql package"
            )
        self.fsync = fsync
        self.dir = Path(tempfile.mkdtemp(prefix="edge-pg-"))
        os.chmod(self.dir, 0o777)
        self.data = self.dir / "data"
        self.port = _free_port()
        self._as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as_user, str(PG_BIN / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.dir,
        )

    def _options(self) -> str:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if not self.fsync:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        return opts

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.dir / "log"),
                  "-o", self._options(), "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop")

    def restart(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "-l",
                  str(self.dir / "log"), "-o", self._options(), "restart")  # fmt: skip

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}".encode())
        return self.url(name)

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
