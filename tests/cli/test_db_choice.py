"""Which database a command works on: a SQLite file or a postgresql:// URL, named on
standard error; commands that only act on stored state refuse a database that does not
exist."""

import json

import pytest

from edge.cli import main


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A folder that is not the repository, with no var/ in it, as the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EDGE_DB", raising=False)
    return tmp_path


EXISTING_STATE_COMMANDS = [
    ["report"],
    ["report", "--json"],
    ["report", "--by", "day"],
    ["keys", "list"],
    ["keys", "rotate", "prod-ugc-x"],
    ["keys", "revoke", "key_x"],
    ["publishers", "list"],
    ["publishers", "remove", "pub-1"],
    ["catalogue", "history"],
    ["catalogue", "restore", "1"],
]


@pytest.mark.parametrize("argv", EXISTING_STATE_COMMANDS)
def test_commands_on_existing_state_refuse_a_missing_database(elsewhere, capsys, argv):
    # Listing, revoking, rotating or removing can only say "nothing there" on a new database.
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "EDGE_DB (--db): no database at" in err
    assert str(elsewhere / "var" / "edge.db") in err
    assert not (elsewhere / "var").exists()  # nothing was created


def test_a_writing_command_says_it_creates_a_database(elsewhere, capsys):
    assert main(["keys", "issue", "--env", "sandbox", "--product", "ugc"]) == 0
    err = capsys.readouterr().err
    assert f"creating a new database at {elsewhere / 'var' / 'edge.db'}" in err
    assert main(["keys", "list"]) == 0
    assert f"database {elsewhere / 'var' / 'edge.db'}" in capsys.readouterr().err


def test_every_state_command_works_on_postgresql(postgres, capsys):
    url = postgres.new_database()
    assert main(["keys", "issue", "--env", "production", "--product", "ugc", "--db", url]) == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert f"database postgresql://postgres@127.0.0.1:{postgres.port}/" in out.err
    assert main(["keys", "list", "--json", "--db", url]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["status"] for r in rows] == ["active"]
    assert main(["keys", "rotate", key, "--json", "--db", url]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["secondaryKey"] == key
    assert main(["keys", "revoke", rotated["apiKey"], "--db", url]) == 0
    assert main(["publishers", "add", "pub-1", "--origin", "https://a.example", "--db", url]) == 0
    capsys.readouterr()
    assert main(["publishers", "list", "--json", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out)["publisher_id"] == "pub-1"
    assert main(["report", "--json", "--db", url]) == 0
    json.loads(capsys.readouterr().out)
    assert main(["catalogue", "history", "--json", "--db", url]) == 0
    assert main(["catalogue", "restore", "1", "--db", url]) == 1  # none loaded here


def test_a_database_url_that_cannot_be_reached_is_one_line(capsys):
    url = "postgresql://postgres@127.0.0.1:1/nowhere"
    assert main(["keys", "list", "--db", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("edge: EDGE_DB (--db): postgresql://postgres@127.0.0.1:1/nowhere: ")
    assert "cannot open" in err and len(err.strip().splitlines()) == 1


def test_a_password_never_shows(capsys):
    assert main(["keys", "list", "--db", "postgresql://u:s3cret@127.0.0.1:1/x"]) == 2
    assert "s3cret" not in capsys.readouterr().err


def test_other_schemes_are_refused(capsys):
    assert main(["keys", "list", "--db", "mysql://h/x"]) == 2
    assert "postgresql:// URL" in capsys.readouterr().err


@pytest.mark.parametrize("argv", EXISTING_STATE_COMMANDS)
def test_their_help_says_the_database_must_exist(capsys, argv):
    with pytest.raises(SystemExit):
        main([*argv[:2], "--help"] if argv[0] != "report" else ["report", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "which must exist (a missing one is refused, never created)" in out
    assert "created with its folder" not in out


@pytest.mark.parametrize(
    "argv", [["keys", "issue"], ["publishers", "add"], ["catalogue", "load"], ["serve"]]
)
def test_commands_that_store_something_say_they_create_the_database(capsys, argv):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    assert "created with its folder if missing" in " ".join(capsys.readouterr().out.split())
