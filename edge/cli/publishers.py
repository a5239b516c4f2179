"""``edge publishers add|list|remove``: the publishers whose pages may embed the tag.

Their origins are the CORS allow-list of /dea. A running edge reads the list every few
seconds (``edge.delivery.publishers.REFRESH_SECONDS``), so changes need no restart.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from edge.cli._common import (
    EXISTING_DB_HELP,
    GROUP_EXITS,
    Subcommands,
    exit_statuses,
    settings_from,
    with_context,
)
from edge.context import Context
from edge.origins import normalise_origin
from edge.settings import add_arguments
from edge.store.events import valid_publisher_id


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "publishers",
        help="register publishers (the tag's CORS allow-list)",
        epilog=GROUP_EXITS,
    )
    psub = p.add_subparsers(dest="publishers_command", required=True, metavar="ACTION")

    add = psub.add_parser(
        "add",
        help="register a publisher or add origins to it (e.g. --origin https://news.example)",
        epilog=exit_statuses(two=" (an ID or --origin it refuses included)"),
    )
    add.add_argument("publisher_id", metavar="ID", help="the data-publisher value of its tag")
    add.add_argument(
        "--origin",
        dest="origins",
        action="append",
        required=True,
        metavar="URL",
        help="http(s)://host[:port] of a page that embeds the tag, one host each (no path "
        "or * wildcard; an internationalised host is stored in IDNA form); repeat for more",
    )
    add_arguments(add, ["db"])
    add.set_defaults(func=_add)

    lst = psub.add_parser("list", help="list publishers and their origins", epilog=exit_statuses())
    lst.add_argument("--json", action="store_true", help="print JSON lines")
    add_arguments(lst, ["db"], EXISTING_DB_HELP)
    lst.set_defaults(func=_list)

    rm = psub.add_parser(
        "remove",
        help="remove a publisher (its pages lose CORS access)",
        epilog=exit_statuses("no such publisher"),
    )
    rm.add_argument(
        "publisher_id", metavar="ID", help="the publisher's id, as `edge publishers list` shows it"
    )
    add_arguments(rm, ["db"], EXISTING_DB_HELP)
    rm.set_defaults(func=_remove)


def _add(args: argparse.Namespace) -> int:
    # Checked before the store is opened, so a typo never creates a database file.
    if not valid_publisher_id(args.publisher_id):
        print(
            f"edge publishers add: {args.publisher_id!r} is not a publisher id "
            "(1-64 of A-Z a-z 0-9 _ . -, starting with a letter or digit)",
            file=sys.stderr,
        )
        return 2
    try:
        origins = [normalise_origin(o) for o in args.origins]
    except ValueError as exc:
        print(f"edge publishers add: {exc}", file=sys.stderr)
        return 2

    async def work(ctx: Context) -> int:
        await ctx.store.upsert_publisher(args.publisher_id, origins, ctx.clock())
        await ctx.store.announce("publishers", args.publisher_id)
        pub = next(
            p for p in await ctx.store.list_publishers() if p.publisher_id == args.publisher_id
        )
        print(f"{pub.publisher_id}: {' '.join(pub.origins)}")
        return 0

    return with_context(settings_from(args), work)


def _list(args: argparse.Namespace) -> int:
    async def work(ctx: Context) -> int:
        pubs = await ctx.store.list_publishers()
        if args.json:
            for p in pubs:
                row = {"publisher_id": p.publisher_id, "origins": list(p.origins)}
                print(orjson.dumps(row).decode())
            return 0
        width = max([len("publisher_id"), *(len(p.publisher_id) for p in pubs)])
        print(f"{'publisher_id'.ljust(width)}  origins")
        for p in pubs:
            print(f"{p.publisher_id.ljust(width)}  {' '.join(p.origins)}".rstrip())
        return 0

    return with_context(settings_from(args), work, must_exist=True)


def _remove(args: argparse.Namespace) -> int:
    async def work(ctx: Context) -> int:
        if not await ctx.store.remove_publisher(args.publisher_id):
            print(f"edge publishers remove: no publisher {args.publisher_id!r}", file=sys.stderr)
            return 1
        await ctx.store.announce("publishers", args.publisher_id)
        print(f"removed {args.publisher_id}")
        return 0

    return with_context(settings_from(args), work, must_exist=True)
