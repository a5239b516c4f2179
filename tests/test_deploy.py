"""The deployment example (deploy/edge.service, deploy/edge.env, shown in docs/deploy.md)
runs as written once its signing key is made: two nodes started with the unit's command and
the env file's settings, on one PostgreSQL database, serve and count a beacon once; reload
and stop behave as the unit says. Left as shipped, the env file starts no edge."""

from __future__ import annotations

import http.client
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest

from edge.beacons import issue_impression_token
from edge.qa import EdgeProcess
from edge.settings import describe
from edge.signing import Signer

ROOT = Path(__file__).parent.parent
UNIT = (ROOT / "deploy" / "edge.service").read_text()
ENV_FILE = (ROOT / "deploy" / "edge.env").read_text()
DOC = (ROOT / "docs" / "deploy.md").read_text()


def unit_value(name: str) -> str:
    values = [ln.split("=", 1)[1] for ln in UNIT.splitlines() if ln.startswith(name + "=")]
    assert len(values) == 1, name
    return values[0]


def env_file() -> dict[str, str]:
    out = {}
    for line in ENV_FILE.splitlines():
        if line.strip() and not line.startswith("#"):
            name, value = line.split("=", 1)
            out[name] = value
    return out


def test_the_doc_shows_the_tested_files_verbatim():
    assert UNIT.strip() in DOC
    assert ENV_FILE.strip() in DOC


def test_the_unit_runs_edge_serve_and_the_env_file_names_only_real_settings():
    program, *args = shlex.split(unit_value("ExecStart"))
    assert Path(program).name == "edge" and args == ["serve"]  # what EdgeProcess runs
    assert unit_value("ExecReload") == "/bin/kill -HUP $MAINPID"
    assert unit_value("KillSignal") == "SIGTERM"
    known = {var for _name, var, _default, _help in describe()}
    assert set(env_file()) <= known, set(env_file()) - known


def test_the_env_file_as_shipped_starts_no_edge(tmp_path):
    # Its signing key is a placeholder anyone can read here: an edge that signed with it
    # would take forged impressions and clicks at any bid.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_")}
    env.update(env_file())
    result = subprocess.run(
        [sys.executable, "-m", "edge", "serve"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        "edge: EDGE_SIGNING_KEY: this is the example's placeholder (it holds CHANGE-ME), "
        "not a secret; make one with: openssl rand -base64 48"
    )


@pytest.mark.slow
def test_two_nodes_as_deployed_share_one_database(postgres, tmp_path):
    settings = env_file()
    key = settings["EDGE_SIGNING_KEY"] = secrets.token_urlsafe(32)  # as the operator makes it
    # This machine instead of the example's: the database, loopback, the bundled geo data.
    settings.update(
        EDGE_HOST="127.0.0.1",
        EDGE_CACHE_DIR=str(tmp_path / "cache"),
        EDGE_TRUSTED_PROXIES="",
        EDGE_ALLOW_PRIVATE_IPS="1",
        EDGE_LOG_LEVEL="warning",
    )
    for name in ("EDGE_DB", "EDGE_GEOIP_DB", "EDGE_PUBLIC_BASE_URL", "EDGE_PORT"):
        del settings[name]  # EdgeProcess sets the database and port itself
    url = postgres.new_database()
    stop_within = float(unit_value("TimeoutStopSec"))
    with (
        EdgeProcess(db=url, settings=settings) as one,
        EdgeProcess(db=url, settings=settings) as two,
    ):
        token, _ = issue_impression_token(
            Signer(key.encode()), surface="url", env="production", ad_id="d-ad",
            campaign_id="d-cmp", now=time.time(), cpm_usd=1.0, publisher_id="d-pub",
            slot_id="s",
        )  # fmt: skip
        body = orjson.dumps(
            {"impression_token": token, "impression_id": str(uuid.uuid4()), "v": "deploy"}
        )
        answers = []
        for node in (one, two):
            conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
            conn.request("POST", "/dea/url/impression", body, {"Content-Type": "application/json"})
            answers.append(orjson.loads(conn.getresponse().read())["counted"])
            conn.close()
        assert answers == [True, False]
        # ExecReload: SIGHUP to the main process; the node keeps serving.
        assert one.proc is not None
        one.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        one.wait_healthy()
        # KillSignal within TimeoutStopSec: a clean exit.
        started = time.monotonic()
        assert one.stop() == 0
        assert time.monotonic() - started < stop_within
