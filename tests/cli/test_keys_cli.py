import io
import json
import os
import stat

from edge.cli import main
from edge.keys import parse


def _issue(capsys, db, product="ugc", env="production"):
    assert main(["keys", "issue", "--env", env, "--product", product, "--db", str(db)]) == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert parse(key) is not None
    assert "cannot be shown again" in out.err
    return key


def test_issue_list_rotate_revoke(tmp_path, capsys):
    db = tmp_path / "edge.db"
    key = _issue(capsys, db)

    assert main(["keys", "list", "--json", "--db", str(db)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["env"], r["product"], r["status"]) for r in rows] == [
        ("production", "ugc", "active")
    ]
    assert key not in json.dumps(rows)

    assert main(["keys", "rotate", key, "--json", "--db", str(db)]) == 0
    rot = json.loads(capsys.readouterr().out)
    assert rot["secondaryKey"] == key and parse(rot["apiKey"]) is not None
    assert rot["secondaryKeyExpiresAt"].endswith("Z")

    main(["keys", "list", "--json", "--db", str(db)])
    statuses = sorted(json.loads(x)["status"] for x in capsys.readouterr().out.splitlines())
    assert statuses == ["active", "secondary"]

    assert main(["keys", "revoke", rot["apiKey"], "--db", str(db)]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["keys", "revoke", rot["apiKey"], "--db", str(db)]) == 1


def test_revoking_one_key_of_a_family_names_the_keys_still_valid(tmp_path, capsys):
    # An operator revokes the id on a partner's report row (its first key) after the
    # partner rotated: the new key still bills for the family, and the command says so.
    db = tmp_path / "edge.db"
    key = _issue(capsys, db)
    assert main(["keys", "rotate", key, "--json", "--db", str(db)]) == 0
    new = json.loads(capsys.readouterr().out)["apiKey"]
    main(["keys", "list", "--json", "--db", str(db)])
    rows = {
        json.loads(x)["status"]: json.loads(x)["key_id"]
        for x in capsys.readouterr().out.splitlines()
    }
    assert main(["keys", "revoke", rows["secondary"], "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and rows["active"] in err and "still valid" in err
    assert main(["keys", "revoke", new, "--db", str(db)]) == 0
    assert "warning" not in capsys.readouterr().err  # the family's last valid key


def test_key_can_come_from_stdin(tmp_path, capsys, monkeypatch):
    db = tmp_path / "edge.db"
    key = _issue(capsys, db, product="ai", env="sandbox")
    monkeypatch.setattr("sys.stdin", io.StringIO(key + "\n"))
    assert main(["keys", "revoke", "-", "--db", str(db)]) == 0
    assert "sandbox/ai" in capsys.readouterr().out


def test_table_listing_has_headers(tmp_path, capsys):
    db = tmp_path / "edge.db"
    _issue(capsys, db, product="ad-manager")
    main(["keys", "list", "--db", str(db)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["key_id", "env", "product", "name", "status"]
    assert "ad-manager" in lines[1]


def test_rotate_unknown_key_fails_cleanly(tmp_path, capsys):
    from edge.keys import generate

    db = tmp_path / "e.db"
    _issue(capsys, db)
    assert main(["keys", "rotate", generate("production", "ugc"), "--db", str(db)]) == 1
    assert "not valid" in capsys.readouterr().err


def test_bad_setting_exits_2_with_the_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EDGE_PORT", "nope")
    assert main(["keys", "list", "--db", str(tmp_path / "e.db")]) == 2
    assert "EDGE_PORT" in capsys.readouterr().err


def test_a_name_that_would_break_the_listing_is_refused(tmp_path, capsys):
    # A name is one cell of the keys list table: one printable line of at most 100 characters.
    db = tmp_path / "edge.db"
    for name, words in [
        ("acme\nother", "'\\n' at position 5"),
        ("tab\there", "'\\t' at position 4"),
        ("bell\x07", "'\\x07' at position 5"),
        ("x" * 5000, "is 5,000 characters long; at most 100"),
        ("x" * 101, "at most 100"),
    ]:
        argv = ["keys", "issue", "--env", "sandbox", "--product", "ugc", "--name", name]
        assert main([*argv, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("edge keys issue: --name ") and words in err, err
        assert err.count("\n") == 1
    assert not db.exists()  # refused before the store is opened
    argv = [
        "keys",
        "issue",
        "--env",
        "sandbox",
        "--product",
        "ugc",
        "--name",
        "Acme \u2013 ü " + "x" * 91,
    ]
    assert main([*argv, "--db", str(db)]) == 0


def _secondary_id(capsys, db):
    main(["keys", "list", "--json", "--db", str(db)])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return next(r["key_id"] for r in rows if r["status"] == "secondary")


def test_rotating_again_warns_that_the_earlier_secondary_stops_now(tmp_path, capsys):
    # A family keeps one secondary: rotating A2 ends A1 at once, not after its 24 hours.
    db = tmp_path / "edge.db"
    a1 = _issue(capsys, db)
    assert main(["keys", "rotate", a1, "--db", str(db)]) == 0
    out = capsys.readouterr()
    a2 = out.out.strip()
    assert "warning" not in out.err  # the first rotation ends nothing
    a1_id = _secondary_id(capsys, db)

    assert main(["keys", "rotate", a2, "--db", str(db)]) == 0
    out = capsys.readouterr()
    a3 = out.out.strip()
    assert f"warning: {a1_id}, the secondary of the previous rotation, stops working now" in (
        out.err
    )
    assert a1 not in out.err and a2 not in out.err and a3 not in out.err  # never a key
    a2_id = _secondary_id(capsys, db)

    assert main(["keys", "rotate", a3, "--json", "--db", str(db)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["secondaryKey"] == a3  # stdout stays one JSON document
    assert f"warning: {a2_id}," in out.err and a3 not in out.err


def test_a_sandbox_ai_key_is_issued_with_a_warning(tmp_path, capsys):
    db = tmp_path / "edge.db"
    argv = ["keys", "issue", "--env", "sandbox", "--product", "ai", "--db", str(db)]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert parse(out.out.strip()) is not None
    assert "warning: the sandbox serves no AI product" in out.err
    for env, product in (("production", "ai"), ("sandbox", "ugc"), ("sandbox", "ad-manager")):
        assert main(["keys", "issue", "--env", env, "--product", product, "--db", str(db)]) == 0
        assert "warning" not in capsys.readouterr().err


def test_a_database_the_cli_creates_is_the_owners_alone(tmp_path, capsys):
    # Key hashes and the signing key live in it: 0600 whatever the umask.
    old = os.umask(0o022)
    try:
        _issue(capsys, tmp_path / "edge.db")
    finally:
        os.umask(old)
    made = [p for p in tmp_path.iterdir() if p.name.startswith("edge.db")]
    assert made and {stat.S_IMODE(p.stat().st_mode) for p in made} == {0o600}


def _claim(db, env: str) -> None:
    """The database as an edge of ``env`` leaves it once started (its environment claimed)."""
    import asyncio

    from edge.context import ENVIRONMENT_META
    from edge.store.sqlite import SQLiteStore

    async def go() -> None:
        store = SQLiteStore(db)
        await store.open()
        try:
            await store.put_meta_if_absent(ENVIRONMENT_META, env.encode())
        finally:
            await store.close()

    asyncio.run(go())


def test_a_key_for_the_other_environment_is_refused(tmp_path, capsys):
    # A sandbox key on production's database works nowhere: a sandbox edge needs a database
    # of its own. Refused before anything is written; the database's own environment issues.
    db = tmp_path / "edge.db"
    _claim(db, "production")
    argv = ["keys", "issue", "--env", "sandbox", "--product", "ugc", "--db", str(db)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "this database serves the production environment; a sandbox key needs" in err
    assert main(["keys", "list", "--json", "--db", str(db)]) == 0
    assert capsys.readouterr().out.strip() == ""
    _issue(capsys, db, env="production")


def test_demo_on_the_other_environments_database_writes_nothing(tmp_path, capsys):
    db = tmp_path / "var" / "edge.db"
    db.parent.mkdir()
    _claim(db, "production")
    assert main(["demo", "--env", "sandbox", "--db", str(db)]) == 2
    assert "this database serves the production environment" in capsys.readouterr().err
    assert main(["keys", "list", "--json", "--db", str(db)]) == 0
    assert capsys.readouterr().out.strip() == ""
    assert not (db.parent / "demo.env").exists()
