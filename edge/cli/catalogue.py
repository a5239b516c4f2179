"""``edge catalogue validate FILE``: check a catalogue and report every error with its JSON path.
``edge catalogue load FILE``: the same check, then store it as the live catalogue version.
``edge catalogue history``: the versions the store keeps, newest (the live one) first.
``edge catalogue restore VERSION``: validate a kept version and make it live again.

Exit status 0 when the file is valid (a one-line summary on stdout), 1 when it is not (one
``$.path: message`` line per problem on stderr, or JSON with ``--json``), so CI can gate a
catalogue change on it. ``validate`` reads only the catalogue: no model, no database.
``load`` stores nothing unless the file is valid; running edges then swap to it without a
restart (PostgreSQL: announced to every node at once; any backend: within a few seconds).
It keeps the ``EDGE_CATALOGUE_HISTORY`` versions before the new one and deletes older ones.

``restore`` stores the kept version's file again as a new, newest version, exactly as
``load`` would store that file: the newest version is always the live one (what every
edge, ``edge report`` and the pruning read), and the history reads as a log of what went
live when. A version that is not kept, or that no longer validates (the rules may have
grown since it was stored), changes nothing and exits 1; restoring the content that is
live already changes nothing and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from edge.cli._common import (
    EXISTING_DB_HELP,
    GROUP_EXITS,
    exit_statuses,
    settings_from,
    with_context,
)
from edge.context import Context
from edge.settings import add_arguments
from matcher.catalogue import Catalogue, CatalogueError, load_catalogue, parse_catalogue
from matcher.eligibility import flight_gate

if TYPE_CHECKING:
    from edge.cli._common import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "catalogue",
        help="check catalogue files, load the live one, list and restore versions",
        epilog=GROUP_EXITS,
    )
    csub = p.add_subparsers(dest="catalogue_command", required=True, metavar="ACTION")
    v = csub.add_parser(
        "validate",
        help="validate FILE; list every error with its JSON path",
        epilog=exit_statuses(
            "the file is not a valid catalogue or cannot be read (every error is listed)"
        ),
    )
    v.add_argument("file", help="the catalogue JSON file (- reads standard input)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.set_defaults(func=_validate)
    ld = csub.add_parser(
        "load",
        help="validate FILE and make it the live catalogue of every running edge",
        epilog=exit_statuses(
            "the file is not a valid catalogue or cannot be read (every error "
            "is listed), and nothing was stored"
        ),
    )
    ld.add_argument("file", help="the catalogue JSON file (- reads standard input)")
    ld.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(ld, ["db", "catalogue_history"])
    ld.set_defaults(func=_load)
    hs = csub.add_parser(
        "history",
        help="list the stored catalogue versions, newest (the live one) first: when each was "
        "loaded, its content hash, campaigns and ads",
        epilog=exit_statuses(),
    )
    hs.add_argument("--json", action="store_true", help="print JSON lines")
    add_arguments(hs, ["db"], EXISTING_DB_HELP)
    hs.set_defaults(func=_history)
    rs = csub.add_parser(
        "restore",
        help="validate a stored VERSION and make it the live catalogue of every running edge "
        "again (stored anew as the newest version, as load stores a file)",
        epilog=exit_statuses(
            "the version is not kept or no longer validates (every error is listed), and "
            "nothing was changed",
            done="done, or the version's content is live already (nothing to change)",
            two=" (a VERSION that is not a version number included)",
        ),
    )
    rs.add_argument(
        "version",
        metavar="VERSION",
        type=_version_number,
        help="a version number that `edge catalogue history` lists",
    )
    rs.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(rs, ["db", "catalogue_history"], EXISTING_DB_HELP)
    rs.set_defaults(func=_restore)


def _version_number(value: str) -> int:
    number = int(value) if value.isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a version number (1, 2, ...: see `edge catalogue history`)"
        )
    return number


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

    async def work(ctx: Context) -> tuple[int, bool]:
        # The live content again stores nothing: a new version of it would only push a
        # real rollback point out of the kept history.
        versions = await ctx.store.catalogue_versions()
        if versions and versions[0].content_hash == catalogue.content_hash:
            return versions[0].version, False
        return await _make_live(ctx, catalogue, body), True

    version, changed = with_context(settings_from(args), work)
    summary = {
        "version": version,
        "changed": changed,
        "campaigns": len(catalogue.campaigns),
        "ads": len(catalogue),
        "content_hash": catalogue.content_hash,
    }
    if args.json:
        print(orjson.dumps(summary).decode())
    elif changed:
        print(
            f"catalogue version {version} is live: {summary['campaigns']} campaigns, "
            f"{summary['ads']} ads. Running edges switch to it once they have embedded its "
            f"new ad texts (seconds; each logs 'catalogue version {version} live')"
        )
    else:
        print(f"catalogue version {version} has this content and is live; nothing was changed")
    return 0


async def _make_live(ctx: Context, catalogue: Catalogue, body: bytes) -> int:
    """Store ``body`` (the file of ``catalogue``) as the newest, live version, older ones
    beyond the history pruned, and tell every edge on the database; its version number."""
    version = await ctx.store.put_catalogue(
        catalogue.content_hash, body, ctx.clock(), keep_previous=ctx.settings.catalogue_history
    )
    await ctx.store.announce("catalogue", str(version))
    return version


def _invalid(args: argparse.Namespace, exc: CatalogueError, name: str | None = None) -> int:
    if args.json:
        errors = [{"path": p, "message": m} for p, m in exc.errors]
        print(orjson.dumps({"valid": False, "errors": errors}).decode())
    else:
        for path, message in exc.errors:
            print(f"{path}: {message}", file=sys.stderr)
        print(
            f"{name or args.file}: {len(exc.errors)} error(s); nothing was changed",
            file=sys.stderr,
        )
    return 1


HISTORY_COLUMNS = ("version", "loaded_at", "content_hash", "campaigns", "ads", "live")


def _history(args: argparse.Namespace) -> int:
    async def work(ctx: Context) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        for i, v in enumerate(await ctx.store.catalogue_versions()):
            body = await ctx.store.catalogue_body(v.version)
            if body is None:  # deleted since it was listed, by a load elsewhere
                continue
            campaigns, ads = _sizes(body)
            rows.append(
                {
                    "version": v.version,
                    "loaded_at": _iso(v.loaded_at),
                    "content_hash": v.content_hash,
                    "campaigns": campaigns,
                    "ads": ads,
                    "live": i == 0,
                }
            )
        return rows

    rows = with_context(settings_from(args), work, must_exist=True)
    if not rows:
        print(
            "edge catalogue history: no catalogue was loaded into this database; a "
            "production edge on it serves EDGE_CATALOGUE (--catalogue) or the bundled one",
            file=sys.stderr,
        )
    if args.json:
        for row in rows:
            print(orjson.dumps(row).decode())
        return 0
    cells = [
        [str(r[c]) if c != "live" else ("live" if r[c] else "") for c in HISTORY_COLUMNS]
        for r in rows
    ]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(HISTORY_COLUMNS)]
    for line in [list(HISTORY_COLUMNS), *cells]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    return 0


def _sizes(body: bytes) -> tuple[int | None, int | None]:
    """Campaigns and ads of a stored catalogue file, counted without validating it again
    (it was valid when stored; validating every kept version of a 100k-ad catalogue would
    take seconds each)."""
    try:
        campaigns = orjson.loads(body)["campaigns"]
        return len(campaigns), sum(len(s["ads"]) for c in campaigns for s in c["ad_sets"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None, None


def _iso(ts: float) -> str:
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _restore(args: argparse.Namespace) -> int:
    wanted: int = args.version
    name = f"catalogue version {wanted}"

    async def work(ctx: Context) -> int:
        versions = await ctx.store.catalogue_versions()
        kept = [v.version for v in versions]
        body = await ctx.store.catalogue_body(wanted) if wanted in kept else None
        if body is None:
            listed = f"kept: {', '.join(map(str, kept))}" if kept else "none is"
            print(
                f"edge catalogue restore: no {name} is kept ({listed}); nothing was changed",
                file=sys.stderr,
            )
            return 1
        try:  # validated again: the rules may have grown since it was stored
            catalogue = await asyncio.to_thread(parse_catalogue, body)
        except CatalogueError as exc:
            return _invalid(args, exc, name)
        live = versions[0]
        summary = {
            "version": live.version,
            "restored": wanted,
            "changed": False,
            "campaigns": len(catalogue.campaigns),
            "ads": len(catalogue),
            "content_hash": catalogue.content_hash,
        }
        if catalogue.content_hash == live.content_hash:
            message = (
                f"{name} is already live; nothing was changed"
                if wanted == live.version
                else f"{name} has the content of version {live.version}, which is already "
                "live; nothing was changed"
            )
        else:
            summary["version"] = await _make_live(ctx, catalogue, body)
            summary["changed"] = True
            message = (
                f"{name} restored as version {summary['version']}, which is live: "
                f"{summary['campaigns']} campaigns, {summary['ads']} ads"
            )
        print(orjson.dumps(summary).decode() if args.json else message)
        return 0

    return with_context(settings_from(args), work, must_exist=True)


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
    # Valid, but an active campaign outside its flight serves nothing today: said, so that a
    # file copied from an example with past dates is not a mystery of empty answers.
    now = time.time()
    outside: dict[str, list[str]] = {"expired": [], "not_started": []}
    for c in catalogue.campaigns:
        gate = flight_gate(c, now) if c.status == "active" else None
        if gate is not None:
            outside[gate].append(c.id)
    summary = {
        "valid": True,
        "campaigns": len(catalogue.campaigns),
        "ad_sets": len(catalogue.ad_sets()),
        "ads": len(catalogue),
        "status": dict(sorted(status.items())),
        "outside_flight": outside,
        "content_hash": catalogue.content_hash,
    }
    if args.json:
        print(orjson.dumps(summary).decode())
    else:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(status.items()))
        statuses = f" ({statuses})" if statuses else ""
        print(
            f"{args.file}: valid; {summary['campaigns']} campaigns{statuses}, "
            f"{summary['ad_sets']} ad sets, {summary['ads']} ads"
        )
        for gate, words in (("expired", "ended (end_at is past)"),
                            ("not_started", "not started yet (start_at is ahead)")):  # fmt: skip
            if ids := outside[gate]:
                shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
                print(
                    f"{args.file}: note: {len(ids)} active campaign(s) {words}, serving "
                    f"nothing now: {shown}",
                    file=sys.stderr,
                )
    return 0
