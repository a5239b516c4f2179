"""The ``edge`` command line. Each sub-command lives in its own module with ``register()``."""

from __future__ import annotations

import argparse
import os
import sys

from edge import __version__
from edge.cli import catalogue, demo, keys, publishers, report, serve
from edge.cli._common import EXIT_RULE
from edge.settings import SettingsError

COMMANDS = (serve, demo, keys, publishers, report, catalogue)
__all__ = ["COMMANDS", "EXIT_RULE", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge",
        description="Contextual ad edge: partner API, delivery edge and tools.",
        epilog=f"exit status: {EXIT_RULE}",
    )
    parser.add_argument("--version", action="version", version=f"edge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
        return status
    except SettingsError as exc:
        print(f"edge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """Standard output was closed early (``edge keys list --json | head -1``): stop quietly,
    1 by ``EXIT_RULE`` (not all was printed). What is still buffered goes to /dev/null, or
    the interpreter's flush at exit would fail again
    (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 1
