"""The README documents every setting and command (the contract users rely on)."""

import argparse
from collections.abc import Iterator
from pathlib import Path

from edge.cli import build_parser
from edge.settings import describe

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_setting_is_in_the_readme():
    missing = [var for _name, var, _d, _h in describe() if f"`{var}`" not in README]
    assert not missing, f"settings missing from README.md: {missing}"


def test_every_command_is_in_the_readme():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    missing = [name for name in sub.choices if f"edge {name}" not in README]
    assert not missing, f"commands missing from README.md: {missing}"


def commands(
    parser: argparse.ArgumentParser, words: str = "edge"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command that runs something, as typed (``edge catalogue restore``), with its
    parser."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from commands(child, f"{words} {name}")


def test_every_action_of_every_command_is_in_the_readme():
    found = [words for words, _ in commands(build_parser())]
    assert "edge catalogue restore" in found and "edge serve" in found
    missing = [words for words in found if f"`{words}" not in README]
    assert not missing, f"commands missing from README.md: {missing}"


def test_first_screen_gives_the_two_commands():
    first_screen = "\n".join(README.splitlines()[:40])
    assert "make run" in first_screen and "make test" in first_screen


def test_the_readme_lists_the_bench_sections_python_m_bench_offers():
    from bench.__main__ import SECTIONS

    (line,) = [ln for ln in README.splitlines() if ln.startswith("| `make bench` |")]
    listed = line.split("short run of one section (", 1)[1].split(")", 1)[0]
    assert listed == ", ".join(f"`{key}`" for key in SECTIONS), listed
