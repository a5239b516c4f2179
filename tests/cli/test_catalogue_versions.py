"""``edge catalogue history`` lists the catalogue versions the store keeps; ``edge catalogue
restore VERSION`` validates one and makes it live again by storing it as the newest version.
Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from edge.cli import main
from edge.settings import Settings
from edge.store import open_store
from tests.test_live_catalogue import bundled, with_new_campaign


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "edge.db")
    return request.getfixturevalue("postgres").new_database()


def load(db: str, doc: dict, capsys, tmp_path, *extra: str) -> dict:
    path = tmp_path / "catalogue.json"
    path.write_bytes(orjson.dumps(doc))
    assert main(["catalogue", "load", str(path), "--json", "--db", db, *extra]) == 0
    return orjson.loads(capsys.readouterr().out)


def history(db: str, capsys) -> list[dict]:
    assert main(["catalogue", "history", "--json", "--db", db]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_history_lists_the_kept_versions_newest_first(db, capsys, tmp_path):
    first = load(db, bundled(), capsys, tmp_path)
    second = load(db, with_new_campaign(bundled()), capsys, tmp_path)
    rows = history(db, capsys)
    assert [(r["version"], r["live"]) for r in rows] == [(2, True), (1, False)]
    for row, loaded in zip(rows, [second, first], strict=True):
        assert row["content_hash"] == loaded["content_hash"]
        assert (row["campaigns"], row["ads"]) == (loaded["campaigns"], loaded["ads"])
        assert row["loaded_at"].endswith("Z")
    assert set(rows[0]) == {"version", "loaded_at", "content_hash", "campaigns", "ads", "live"}

    assert main(["catalogue", "history", "--db", db]) == 0
    header, live, earlier = capsys.readouterr().out.splitlines()
    assert header.split() == ["version", "loaded_at", "content_hash", "campaigns", "ads", "live"]
    assert live.split()[0] == "2" and live.split()[-1] == "live"
    assert second["content_hash"] in live
    assert earlier.split()[0] == "1" and earlier.split()[-1] != "live"


def test_history_of_a_database_without_a_loaded_catalogue(db, capsys):
    # A database that exists (a publisher was added) but never had a catalogue loaded.
    assert main(["publishers", "add", "pub-1", "--origin", "https://a.example", "--db", db]) == 0
    capsys.readouterr()
    assert history(db, capsys) == []
    assert main(["catalogue", "history", "--db", db]) == 0
    out = capsys.readouterr()
    assert out.out.split() == ["version", "loaded_at", "content_hash", "campaigns", "ads", "live"]
    assert "no catalogue was loaded" in out.err


def test_restore_makes_an_earlier_version_live_as_a_new_version(db, capsys, tmp_path):
    first = load(db, bundled(), capsys, tmp_path)
    load(db, with_new_campaign(bundled()), capsys, tmp_path)
    assert main(["catalogue", "restore", "1", "--json", "--db", db]) == 0
    restored = orjson.loads(capsys.readouterr().out)
    assert restored == {
        "version": 3,
        "restored": 1,
        "changed": True,
        "campaigns": first["campaigns"],
        "ads": first["ads"],
        "content_hash": first["content_hash"],
    }
    rows = history(db, capsys)
    assert [(r["version"], r["live"]) for r in rows] == [(3, True), (2, False), (1, False)]
    assert rows[0]["content_hash"] == rows[2]["content_hash"] == first["content_hash"]

    # In words, and back again to version 2.
    assert main(["catalogue", "restore", "2", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "catalogue version 2 restored as version 4, which is live:" in out


def test_restoring_the_live_content_changes_nothing(db, capsys, tmp_path):
    load(db, bundled(), capsys, tmp_path)
    load(db, with_new_campaign(bundled()), capsys, tmp_path)
    load(db, bundled(), capsys, tmp_path)  # the first content again: version 3
    for version in ("3", "1"):
        assert main(["catalogue", "restore", version, "--db", db]) == 0
        assert "already live; nothing was changed" in capsys.readouterr().out
    assert [r["version"] for r in history(db, capsys)] == [3, 2, 1]


def test_loading_the_live_content_again_stores_no_version(db, capsys, tmp_path):
    assert load(db, bundled(), capsys, tmp_path)["changed"] is True
    again = load(db, bundled(), capsys, tmp_path)
    assert (again["version"], again["changed"]) == (1, False)
    path = tmp_path / "catalogue.json"
    assert main(["catalogue", "load", str(path), "--db", db]) == 0
    assert "version 1 has this content and is live; nothing was changed" in (
        capsys.readouterr().out
    )
    assert [r["version"] for r in history(db, capsys)] == [1]


def test_a_version_no_longer_kept_is_refused(db, capsys, tmp_path):
    for doc in (bundled(), with_new_campaign(bundled()), bundled()):
        load(db, doc, capsys, tmp_path, "--catalogue-history", "1")
    for version in ("1", "99"):
        assert main(["catalogue", "restore", version, "--db", db]) == 1
        err = capsys.readouterr().err
        assert f"no catalogue version {version} is kept (kept: 3, 2)" in err, err
        assert "nothing was changed" in err
    assert [r["version"] for r in history(db, capsys)] == [3, 2]


def test_restore_on_a_database_without_catalogues_is_refused(db, capsys):
    assert main(["publishers", "add", "pub-1", "--origin", "https://a.example", "--db", db]) == 0
    capsys.readouterr()
    assert main(["catalogue", "restore", "1", "--db", db]) == 1
    assert "no catalogue version 1 is kept (none is)" in capsys.readouterr().err


def test_a_stored_version_that_no_longer_validates_is_not_restored(db, capsys, tmp_path):
    # Stored as it was accepted then (say, before a rule that it breaks was added).
    broken = bundled()
    broken["campaigns"][0]["status"] = "sometimes"

    async def store_it() -> None:
        store = open_store(Settings(db=db if db.startswith("postgresql") else Path(db)))
        await store.open()
        try:
            await store.put_catalogue("old", orjson.dumps(broken), 1.0, keep_previous=10)
        finally:
            await store.close()

    asyncio.run(store_it())
    load(db, bundled(), capsys, tmp_path)
    assert main(["catalogue", "restore", "1", "--db", db]) == 1
    err = capsys.readouterr().err
    assert "$.campaigns[0].status: expected active, paused or archived" in err
    assert "catalogue version 1: 1 error(s); nothing was changed" in err
    assert [(r["version"], r["live"]) for r in history(db, capsys)] == [(2, True), (1, False)]
    assert history(db, capsys)[1]["campaigns"] == len(broken["campaigns"])


@pytest.mark.parametrize("version", ["latest", "0", "-1", "1.5"])
def test_a_version_that_is_not_a_number_is_bad_usage(tmp_path, capsys, version):
    with pytest.raises(SystemExit) as exited:
        main(["catalogue", "restore", version, "--db", str(tmp_path / "edge.db")])
    assert exited.value.code == 2
    assert "VERSION" in capsys.readouterr().err
    assert not (tmp_path / "edge.db").exists()
