"""``edge serve``: run one environment of the edge."""

from __future__ import annotations

import argparse

from edge.cli._common import Subcommands, exit_statuses, settings_from
from edge.server import serve
from edge.settings import add_arguments

SERVE_EXITS = exit_statuses(
    "it failed to start for another reason (the error is logged)",
    done="stopped by SIGTERM or SIGINT under --workers N (one process ends by the signal "
    "itself, as uvicorn does: 143 or 130 in a shell, a clean stop to systemd)",
    two=": a setting it cannot use, a port it cannot listen on included (one line naming it)",
)


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "serve",
        help="run the edge (one environment per process)",
        description="Run the edge. Every option also reads its EDGE_* environment variable.",
        epilog=SERVE_EXITS,
    )
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    serve(settings_from(args))
    return 0
