"""``edge catalogue validate FILE``: check a catalogue and report every error with its JSON path.
``edge catalogue load FILE``: the same check, then store it as the live catalogue version.

Exit status 0 when the file is valid (a one-line summary on stdout), 1 when it is not (one
``$.path: message`` line per problem on stderr, or JSON with ``--json``), so CI can gate a
catalogue change on it. ``validate`` reads only the catalogue: no model, no database.
``load`` stores nothing unless the file is valid; running edges then swap to it without a
restart (PostgreSQL: announced to every node at once; any backend: within a few seconds).
It keeps the ``EDGE_CATALOGUE_HISTORY`` versions before the new one and deletes older ones.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from edge.cli._common import settings_from, with_context
from edge.context import Context
from edge.settings import add_arguments
from matcher.catalogue import CatalogueError, load_catalogue, parse_catalogue

if TYPE_CHECKING:
    from edge.cli._common import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("catalogue", help="check catalogue files, load the live one")
    csub = p.add_subparsers(dest="catalogue_command", required=True, metavar="ACTION")
    v = csub.add_parser("validate", help="validate FILE; list every error with its JSON path")
    v.add_argument("file", help="the catalogue JSON file (- reads standard input)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.set_defaults(func=_validate)
    ld = csub.add_parser(
        "load", help="validate FILE and make it the live catalogue of every running edge"
    )
    ld.add_argument("file", help="the catalogue JSON file (- reads standard input)")
    ld.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(ld, ["db", "catalogue_history"])
    ld.set_defaults(func=_load)


def _read(args: argparse.Namespace) -> bytes:
    if args.file == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(args.file).read_bytes()
    except OSError as exc:
        raise CatalogueError([("$", f"cannot read {args.file}: {exc.strerror}")]) from None


def _load(args: argparse.Namespace) -> int:
    try:
        body = _read(args)
        catalogue = parse_catalogue(body)
    except CatalogueError as exc:
        return _invalid(args, exc)

    async def work(ctx: Context) -> int:
        version = await ctx.store.put_catalogue(
            catalogue.content_hash, body, ctx.clock(), keep_previous=ctx.settings.catalogue_history
        )
        await ctx.store.announce("catalogue", str(version))
        return version

    version = with_context(settings_from(args), work)
    summary = {
        "version": version,
        "campaigns": len(catalogue.campaigns),
        "ads": len(catalogue),
        "content_hash": catalogue.content_hash,
    }
    if args.json:
        print(orjson.dumps(summary).decode())
    else:
        print(
            f"catalogue version {version} is live: {summary['campaigns']} campaigns, "
            f"{summary['ads']} ads"
        )
    return 0


def _invalid(args: argparse.Namespace, exc: CatalogueError) -> int:
    if args.json:
        errors = [{"path": p, "message": m} for p, m in exc.errors]
        print(orjson.dumps({"valid": False, "errors": errors}).decode())
    else:
        for path, message in exc.errors:
            print(f"{path}: {message}", file=sys.stderr)
        print(f"{args.file}: {len(exc.errors)} error(s); nothing was changed", file=sys.stderr)
    return 1


def _validate(args: argparse.Namespace) -> int:
    try:
        if args.file == "-":
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
