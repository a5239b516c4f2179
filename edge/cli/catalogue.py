"""``edge catalogue validate FILE``: check a catalogue and report every error with its JSON path.

Exit status 0 when the file is valid (a one-line summary on stdout), 1 when it is not (one
``$.path: message`` line per problem on stderr, or JSON with ``--json``), so CI can gate a
catalogue change on it. Only the catalogue is read: no model, no database.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import TYPE_CHECKING

import orjson

from matcher.catalogue import CatalogueError, load_catalogue

if TYPE_CHECKING:
    from edge.cli._common import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("catalogue", help="check catalogue files")
    csub = p.add_subparsers(dest="catalogue_command", required=True, metavar="ACTION")
    v = csub.add_parser("validate", help="validate FILE; list every error with its JSON path")
    v.add_argument("file", help="the catalogue JSON file (- reads standard input)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    try:
        if args.file == "-":
            from matcher.catalogue import parse_catalogue

            catalogue = parse_catalogue(sys.stdin.buffer.read())
        else:
            catalogue = load_catalogue(args.file)
    except CatalogueError as exc:
        if args.json:
            errors = [{"path": p, "message": m} for p, m in exc.errors]
            print(orjson.dumps({"valid": False, "errors": errors}).decode())
        else:
            for path, message in exc.errors:
                print(f"{path}: {message}", file=sys.stderr)
            print(f"{args.file}: {len(exc.errors)} error(s)", file=sys.stderr)
        return 1
    status = Counter(c.status for c in catalogue.campaigns)
    summary = {
        "valid": True,
        "campaigns": len(catalogue.campaigns),
        "ad_sets": len(catalogue.ad_sets()),
        "ads": len(catalogue),
        "status": dict(sorted(status.items())),
        "content_hash": catalogue.content_hash,
    }
    if args.json:
        print(orjson.dumps(summary).decode())
    else:
        print(
            f"{args.file}: valid; {summary['campaigns']} campaigns, {summary['ad_sets']} ad sets, "
            f"{summary['ads']} ads ({', '.join(f'{n} {s}' for s, n in status.items())})"
        )
    return 0
