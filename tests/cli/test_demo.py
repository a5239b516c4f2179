"""``edge demo`` as a newcomer uses it: the keys as export lines and in demo.env, the same
keys after a restart, and the printed curl commands and the README's sandbox example work
exactly as written."""

from __future__ import annotations

import json
import re
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from edge.cli.demo import KEY_VARIABLES, read_env_file
from edge.qa import EdgeProcess

README = (Path(__file__).parents[2] / "README.md").read_text()


def demo(tmp_path: Path, env: str, db: str, port: int | None = None) -> EdgeProcess:
    settings = {"EDGE_CACHE_DIR": str(tmp_path / "cache"), "EDGE_ENV": env}
    return EdgeProcess(
        db=tmp_path / "var" / db, env=env, port=port, settings=settings, subcommand="demo"
    )


def printed_exports(output: str) -> dict[str, str]:
    return dict(re.findall(r"^\s+export ([A-Z_]+)=(\S+)$", output, flags=re.M))


def printed_commands(output: str) -> list[str]:
    return re.findall(r"^\s+(?:try: )?(curl .*)$", output, flags=re.M)


def curl(command: str) -> dict:
    argv = shlex.split(command)
    assert argv[0] == "curl"
    done = subprocess.run([*argv, "--fail-with-body"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("env", ["production", "sandbox"])
def test_demo_prints_exports_keeps_them_and_its_curls_work(tmp_path: Path, env: str) -> None:
    with demo(tmp_path, env, "edge.db") as edge:
        out = edge.output()
        exports = printed_exports(out)
        assert set(exports) == set(KEY_VARIABLES[env].values()), out
        assert "EDGE_SIGNING_KEY is not set" not in out  # a local demo, not a deployment
        env_file = tmp_path / "var" / "demo.env"
        assert read_env_file(env_file) == exports
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600  # live keys: owner only
        commands = printed_commands(out)
        assert len(commands) == 2, out
        assert curl(commands[0])["env"] == env
        answer = curl(commands[1])
        assert "ads" in answer or "no_ad_retry_after_seconds" in answer, answer
        if env == "sandbox":
            assert "/v1/ugc/process" in commands[1] and "explain" in answer
        reports = re.search(r"reports: +(http\S+/reports) +\(sign in with the \$(\w+) key", out)
        assert reports is not None, out
        key = f"X-API-Key: {exports[reports[2]]}"
        page = subprocess.run(
            ["curl", "-s", "--fail-with-body", reports[1], "-H", key],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert page.returncode == 0 and "<h1>Reports</h1>" in page.stdout, page.stdout[-500:]
    with demo(tmp_path, env, "edge.db") as again:
        # A restart keeps the keys a shell may have sourced, and they still work.
        assert printed_exports(again.output()) == exports
        assert curl(printed_commands(again.output())[1])


@pytest.mark.slow
def test_readme_sandbox_example_works_as_written(tmp_path: Path) -> None:
    setup = re.search(r"The sandbox, beside the demo: `\.venv/bin/(edge demo [^`]+)`", README)
    assert setup is not None, "the README's sandbox set-up line moved"
    argv = shlex.split(setup[1])
    assert argv[:4] == ["edge", "demo", "--env", "sandbox"]
    port = int(argv[argv.index("--port") + 1])
    db = argv[argv.index("--db") + 1]
    block = re.search(r"```bash\n(\. var/demo\.env\n.*?)```", README, flags=re.S)
    assert block is not None, "the README's sandbox example moved"
    # The one change: a free port, as other tests may hold the README's.
    with demo(tmp_path, "sandbox", Path(db).name) as edge:
        script = block[1].replace(f":{port}/", f":{edge.port}/")
        done = subprocess.run(
            ["bash", "-euc", script], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["explain"]["outcome"] in ("matched", "empty", "no_match"), answer


def test_the_key_file_gets_its_folder_when_the_database_is_a_url(tmp_path: Path) -> None:
    # With a postgresql:// database the file goes in var/ of the working folder, which a
    # fresh checkout does not have yet.
    from edge.cli.demo import write_env_file

    path = tmp_path / "var" / "demo.env"
    write_env_file(path, {"UGC_KEY": "k"})
    assert read_env_file(path) == {"UGC_KEY": "k"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
