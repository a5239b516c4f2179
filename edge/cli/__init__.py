"""The ``edge`` command line. Each sub-command lives in its own module with ``register()``."""

from __future__ import annotations

import argparse
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
        return int(args.func(args) or 0)
    except SettingsError as exc:
        print(f"edge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
