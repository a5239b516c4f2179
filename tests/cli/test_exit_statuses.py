"""One rule of exit statuses for every command (0 done, 1 could not do what was asked, 2 bad
usage or settings), stated by ``edge --help``, by each command's ``--help`` and by the
README; every option and argument of every command says what it is."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from edge.cli import EXIT_RULE, build_parser, main
from edge.keys import generate
from tests.test_docs import README, commands


def flat(text: str) -> str:
    return " ".join(text.split())


def parsers(
    parser: argparse.ArgumentParser, words: str = "edge"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser, groups (``edge keys``) included."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{words} {name}")


def help_of(words: str) -> str:
    return flat(dict(commands(build_parser()))[words].format_help())


def test_every_option_argument_and_action_says_what_it_is():
    missing = []
    for words, parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [
                    f"{words} {choice.dest}"
                    for choice in action._choices_actions
                    if not choice.help
                ]
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{words} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_edge_help_and_the_readme_state_the_rule():
    assert f"exit status: {flat(EXIT_RULE)}" in flat(build_parser().format_help())
    assert flat(EXIT_RULE) in flat(README)


@pytest.mark.parametrize("words", [words for words, _ in parsers(build_parser())])
def test_every_command_help_states_its_exit_statuses(words):
    # Groups (`edge keys --help`) included: the README says each command's --help does.
    text = flat(dict(parsers(build_parser()))[words].format_help())
    assert "exit status: 0 " in text and "; 2 bad usage or settings" in text, text


def test_a_group_help_sends_to_its_actions_for_1():
    for words in ("edge keys", "edge publishers", "edge catalogue"):
        text = flat(dict(parsers(build_parser()))[words].format_help())
        assert "; 1 as each ACTION's --help says; 2 bad usage or settings" in text, text


def _existing_db(tmp_path) -> str:
    db = str(tmp_path / "edge.db")
    assert main(["publishers", "add", "pub-1", "--origin", "https://a.example", "--db", db]) == 0
    return db


NOT_A_CATALOGUE = "the file is not a valid catalogue"
# A command that exits 1, how to make it, and the words its --help gives for that 1.
EXIT_1 = [
    ("edge keys rotate", ["keys", "rotate", generate("production", "ugc")], "the key is not valid"),
    ("edge keys rotate", ["keys", "rotate", "not-a-key"], "the key is not valid"),
    ("edge keys revoke", ["keys", "revoke", "key_nobody"], "no such active key"),
    ("edge keys revoke", ["keys", "revoke", generate("sandbox", "ai")], "no such active key"),
    ("edge publishers remove", ["publishers", "remove", "nobody"], "no such publisher"),
    ("edge catalogue restore", ["catalogue", "restore", "9"], "the version is not kept"),
    ("edge catalogue load", ["catalogue", "load", "nope.json"], NOT_A_CATALOGUE),
    ("edge catalogue validate", ["catalogue", "validate", "nope.json"], NOT_A_CATALOGUE),
]


@pytest.mark.parametrize(("words", "argv", "why"), EXIT_1)
def test_a_command_that_exits_1_says_so_in_its_help_and_the_readme(
    tmp_path, capsys, words, argv, why
):
    if words != "edge catalogue validate":  # the one command without a database
        argv = [*argv, "--db", _existing_db(tmp_path)]
    assert main(argv) == 1
    assert f"; 1 {why}" in help_of(words)
    (row,) = [
        line
        for line in README.splitlines()
        if line.startswith("| `edge ") and f"`{words}" in line.split("|")[1]
    ]
    assert "exit 1" in row, row


def test_a_key_already_revoked_exits_1(tmp_path, capsys):
    db = _existing_db(tmp_path)
    capsys.readouterr()
    assert main(["keys", "issue", "--env", "production", "--product", "ugc", "--db", db]) == 0
    key = capsys.readouterr().out.strip()
    assert main(["keys", "revoke", key, "--db", db]) == 0
    assert main(["keys", "revoke", key, "--db", db]) == 1
    assert main(["keys", "rotate", key, "--db", db]) == 1
    assert "edge keys rotate: the API key is not valid" in capsys.readouterr().err


def test_bad_usage_exits_2(tmp_path, capsys):
    for argv in (["keys", "issue", "--product", "ugc"], ["publishers", "remove"], ["nope"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["keys", "list", "--json"],
        ["keys", "list"],
        ["publishers", "list", "--json"],
        ["report", "--json"],
        ["report", "--by", "day", "--format", "csv"],
    ],
    ids=" ".join,
)
def test_a_reader_that_goes_away_ends_a_command_quietly_with_1(tmp_path, capsys, argv):
    # `edge keys list --json | head -1`: the reader closes the pipe early. No traceback (it
    # was a BrokenPipeError's), and 1, not 0: the command could not print all it had.
    db = _existing_db(tmp_path)
    assert main(["keys", "issue", "--env", "production", "--product", "ugc", "--db", db]) == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge", *argv, "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before it writes anything: every write meets a closed pipe
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    lines = err.decode().splitlines()
    if argv == ["report", "--json"]:  # the pacing's source, said before the report prints
        assert "bundled sample catalogue" in lines.pop()
    assert lines == [f"edge: database {db}"]
