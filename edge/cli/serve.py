"""``edge serve``: run one environment of the edge."""

from __future__ import annotations

import argparse

from edge.cli._common import Subcommands, settings_from
from edge.server import serve
from edge.settings import add_arguments


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "serve",
        help="run the edge (one environment per process)",
        description="Run the edge. Every option also reads its EDGE_* environment variable.",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    serve(settings_from(args))
    return 0
