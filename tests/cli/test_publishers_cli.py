"""``edge publishers``: registration, listing, removal and input checks."""

import orjson
import pytest

from edge.cli import main


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "edge.db")


def test_add_list_and_remove(db, capsys):
    assert main(["publishers", "add", "pub-1", "--origin", "https://News.Example/",
                 "--origin", "http://localhost:8080", "--db", db]) == 0  # fmt: skip
    assert capsys.readouterr().out.strip() == "pub-1: https://news.example http://localhost:8080"
    assert (
        main(["publishers", "add", "pub-1", "--origin", "https://m.news.example", "--db", db]) == 0
    )
    assert main(["publishers", "add", "pub-0", "--origin", "https://a.example", "--db", db]) == 0
    capsys.readouterr()
    assert main(["publishers", "list", "--json", "--db", db]) == 0
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        {"publisher_id": "pub-0", "origins": ["https://a.example"]},
        {"publisher_id": "pub-1",
         "origins": ["https://news.example", "http://localhost:8080", "https://m.news.example"]},
    ]  # fmt: skip
    assert main(["publishers", "list", "--db", db]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split() == ["publisher_id", "origins"] and text[1].split()[0] == "pub-0"
    assert main(["publishers", "remove", "pub-0", "--db", db]) == 0
    assert main(["publishers", "remove", "pub-0", "--db", db]) == 1
    assert "no publisher" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bad id", "--origin", "https://a.example"], "not a publisher id"),
        (["pub-1", "--origin", "https://a.example/path"], "no path"),
        (["pub-1", "--origin", "a.example"], "http(s)://"),
    ],
)
def test_bad_input_is_refused_before_the_store_is_touched(tmp_path, capsys, args, message):
    db = tmp_path / "never.db"
    assert main(["publishers", "add", *args, "--db", str(db)]) == 2
    assert message in capsys.readouterr().err
    assert not db.exists()


def test_origin_is_required(db, capsys):
    with pytest.raises(SystemExit):
        main(["publishers", "add", "pub-1", "--db", db])
    assert "--origin" in capsys.readouterr().err


def test_env_variable_names_the_database(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EDGE_DB", str(tmp_path / "env.db"))
    assert main(["publishers", "add", "pub-e", "--origin", "https://e.example"]) == 0
    assert (tmp_path / "env.db").exists()


def test_origins_are_refused_or_stored_as_browsers_send_them(tmp_path, capsys):
    db = str(tmp_path / "edge.db")
    for origin in ("https://a b.example", "https://*.example.com"):
        assert main(["publishers", "add", "pub-1", "--origin", origin, "--db", db]) == 2
        err = capsys.readouterr().err
        assert err.startswith("edge publishers add: an origin's host") and origin in err
    assert (
        main(["publishers", "add", "pub-1", "--origin", "https://bücher.example", "--db", db]) == 0
    )
    assert capsys.readouterr().out.strip() == "pub-1: https://xn--bcher-kva.example"
