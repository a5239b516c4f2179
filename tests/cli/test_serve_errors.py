"""An operator's bad file setting is one line naming the setting, the path and the reason,
with a non-zero exit and no traceback; "ready" is logged only once the edge listens.

Every case runs the command line as a subprocess, as an operator would.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from edge.qa import EdgeProcess, free_port

PR_CAPBSET_DROP = 24  # <linux/prctl.h>
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2  # <linux/capability.h>


def drop_root_file_override() -> None:
    """In the child, before exec: root loses its power to write files it has no permission
    to write (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a 0o444 file is read-only to it."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def edge(
    tmp_path: Path,
    *args: str,
    timeout: float = 120,
    as_plain_user: bool = False,
    **edge_vars: str,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_")}
    env.update(EDGE_PORT=str(free_port()), EDGE_CACHE_DIR=str(tmp_path / "cache"))
    env.update(edge_vars)
    return subprocess.run(
        [sys.executable, "-m", "edge", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
        preexec_fn=drop_root_file_override if as_plain_user and os.geteuid() == 0 else None,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("edge: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_missing_catalogue(tmp_path: Path, command: str) -> None:
    line = one_line(
        edge(tmp_path, command, "--db", str(tmp_path / "e.db"), "--catalogue", "nope.json")
    )
    assert line == "edge: EDGE_CATALOGUE (--catalogue): nope.json: no such file"


def test_missing_geo_database(tmp_path: Path) -> None:
    line = one_line(edge(tmp_path, "serve", "--db", "e.db", "--geoip-db", "/nope/geo.mmdb"))
    assert line == "edge: EDGE_GEOIP_DB (--geoip-db): /nope/geo.mmdb: no such file"


def test_geo_database_that_is_not_one(tmp_path: Path) -> None:
    (tmp_path / "geo.mmdb").write_text("not a database")
    line = one_line(edge(tmp_path, "serve", "--db", "e.db", "--geoip-db", "geo.mmdb"))
    assert line.startswith("edge: EDGE_GEOIP_DB (--geoip-db): geo.mmdb: ")
    assert "MaxMind" in line


@pytest.mark.parametrize(
    ("make", "db", "reason"),
    [
        (lambda p: (p / "f").touch(), "f/e.db", "a part of the path is a file"),
        (lambda p: (p / "d.db").mkdir(), "d.db", "is a folder, not a database file"),
        (lambda p: (p / "x.db").write_text("hello"), "x.db", "not an SQLite database"),
    ],
    ids=["folder-is-a-file", "db-is-a-folder", "not-a-database"],
)
def test_unusable_database(tmp_path: Path, make, db: str, reason: str) -> None:
    make(tmp_path)
    line = one_line(edge(tmp_path, "serve", "--db", db))
    assert line.startswith(f"edge: EDGE_DB (--db): {db}: ") and reason in line, line


def test_unusable_database_for_a_state_command(tmp_path: Path) -> None:
    (tmp_path / "d.db").mkdir()
    line = one_line(edge(tmp_path, "keys", "list", "--db", "d.db"))
    assert line == "edge: EDGE_DB (--db): d.db: is a folder, not a database file"


@pytest.mark.parametrize("command", [("serve",), ("keys", "list")])
def test_a_postgresql_server_that_does_not_answer(tmp_path: Path, command) -> None:
    # Nothing listens on the port: one line naming the URL without its password.
    url = f"postgresql://edge:secret@127.0.0.1:{free_port()}/edge"
    line = one_line(edge(tmp_path, *command, "--db", url))
    prefix = "edge: EDGE_DB (--db): postgresql://edge@127.0.0.1:"
    assert line.startswith(prefix) and "cannot open:" in line and "secret" not in line, line


@pytest.mark.parametrize(
    "url",
    ["postgresql://edge:Pw12345xyz@[fd00::1/edge", "postgresql://edge:Pw12345%zz@db.example/edge"],
)
def test_a_postgresql_url_the_driver_cannot_read_is_named_without_its_password(
    tmp_path: Path, url: str
) -> None:
    # The driver's own message quoted the URL, password and all, into the system log.
    line = one_line(edge(tmp_path, "keys", "list", "--db", url))
    assert "cannot open: not a URL the PostgreSQL driver can read" in line, line
    assert "Pw12345" not in line


def test_a_postgresql_url_with_a_bad_option_is_refused_at_start(tmp_path: Path) -> None:
    # An option the pool would fail on later ("connect_timeout=abc") stops the start too.
    url = f"postgresql://edge@127.0.0.1:{free_port()}/edge?connect_timeout=abc"
    line = one_line(edge(tmp_path, "serve", "--db", url))
    assert "cannot open:" in line and "connect_timeout" in line, line


def test_read_only_database(tmp_path: Path) -> None:
    # A database the edge may read but not write. Root writes any file, so as root the edge
    # runs without that privilege.
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "e.db"
    # Created by a writing command (a read-only one refuses a database that does not exist).
    one = edge(tmp_path, "publishers", "add", "p", "--origin", "https://a.example", "--db", str(db))
    assert one.returncode == 0, one.stderr
    db.chmod(0o444)
    folder.chmod(0o555)
    try:
        line = one_line(edge(tmp_path, "serve", "--db", str(db), as_plain_user=True))
    finally:
        folder.chmod(0o755)
    assert line == f"edge: EDGE_DB (--db): {db}: read-only: the edge must write to its database"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"garbage,stuff\nno,commas,here,at,all,x\n", "the header lacks state, county, dma"),
        (b"", "no header"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8 text"),
    ],
    ids=["no-header", "empty", "binary"],
)
def test_an_unusable_dma_table(tmp_path: Path, content: bytes, reason: str) -> None:
    # Not a traceback from the matcher's start-up, nor (empty, binary) a table silently
    # taken as no DMAs at all: DMA targets would then match nobody.
    (tmp_path / "dma.csv").write_bytes(content)
    result = edge(tmp_path, "serve", "--db", "e.db", "--dma-table", "dma.csv")
    line = one_line(result)
    assert result.returncode == 2, result.stderr
    assert line.startswith("edge: EDGE_DMA_TABLE (--dma-table): dma.csv: ") and reason in line


def test_an_empty_host(tmp_path: Path) -> None:
    # As a templated env file leaves it: not "every interface" and http://:PORT URLs.
    result = edge(tmp_path, "serve", "--db", "e.db", EDGE_HOST="")
    line = one_line(result)
    assert result.returncode == 2, result.stderr
    assert line.startswith("edge: EDGE_HOST: expected an address to listen on"), line


def test_catalogue_that_does_not_validate(tmp_path: Path) -> None:
    (tmp_path / "ads.json").write_text('{"campaigns": [{"id": "c"}]}')
    line = one_line(edge(tmp_path, "serve", "--db", "e.db", "--catalogue", "ads.json"))
    assert line.startswith("edge: EDGE_CATALOGUE (--catalogue): ads.json: 3 error(s), the first: ")
    assert "edge catalogue validate" in line


def on_a_busy_port(tmp_path: Path, *args: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """``edge serve ... --port P`` while another socket listens on P: (P, the result)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        return port, edge(tmp_path, "serve", "--db", "e.db", "--port", str(port), *args)


def test_busy_port_is_one_line_and_exit_2_not_ready(tmp_path: Path) -> None:
    # As with --workers: a port it cannot listen on is a setting it cannot use (it used to
    # be uvicorn's exit 3, after the model had loaded).
    port, result = on_a_busy_port(tmp_path)
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith(f"edge: EDGE_PORT (--port): cannot listen on 127.0.0.1:{port}: ")
    assert "address already in use" in line.lower()
    assert "environment ready" not in result.stderr + result.stdout
    assert "matcher ready" not in result.stderr  # refused before anything loaded


@pytest.mark.parametrize("host", ["203.0.113.77", "no-such-host.invalid"])
def test_a_host_it_cannot_listen_on_names_edge_host_and_is_the_only_line(
    tmp_path: Path, host: str
) -> None:
    result = edge(tmp_path, "serve", "--db", "e.db", "--host", host, "--port", str(free_port()))
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith(f"edge: EDGE_HOST (--host): cannot listen on {host}:"), line
    assert result.stderr.strip() == line  # nothing logged before it


BROKEN_START = """
import sys
from edge import matching
from edge.cli import main

async def load_matcher(*args):
    raise RuntimeError("the model file is damaged")

matching.load_matcher = load_matcher
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_start_that_fails_otherwise_exits_1(tmp_path: Path, workers: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_")}
    result = subprocess.run(
        [sys.executable, "-c", BROKEN_START, "serve", "--db", "e.db", "--workers", workers,
         "--port", str(free_port()), "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "the model file is damaged" in result.stderr
    assert "environment ready" not in result.stderr
    # No EDGE_SIGNING_KEY in production: the generated one sits in the database, and a
    # reader of the database or its backups could forge what the edge signs.
    assert "EDGE_SIGNING_KEY is not set" in result.stderr


@pytest.mark.slow
def test_busy_port_with_workers_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    port, result = on_a_busy_port(tmp_path, "--workers", "2")
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith(f"edge: EDGE_PORT (--port): cannot listen on 127.0.0.1:{port}: ")
    assert "address already in use" in line.lower()


@pytest.mark.slow
def test_ready_is_logged_once_listening(tmp_path: Path) -> None:
    with EdgeProcess(db=tmp_path / "e.db") as proc:
        out = proc.output()
    assert f"environment ready on {proc.url}" in out
    # uvicorn reports the bound address before our line: the socket existed first.
    assert out.index("Uvicorn running on") < out.index("environment ready")
