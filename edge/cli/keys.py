"""``edge keys issue|rotate|revoke|list``: operator key management."""

from __future__ import annotations

import argparse
import datetime as dt
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
from edge.errors import EdgeError
from edge.keys import NAME_MAX_LEN, PRODUCTS, name_problem
from edge.settings import add_arguments


def register(sub: Subcommands) -> None:
    p = sub.add_parser("keys", help="issue, rotate, revoke and list API keys", epilog=GROUP_EXITS)
    ksub = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")

    issue = ksub.add_parser(
        "issue",
        help="issue a key; it is printed once, only its hash is kept",
        epilog=exit_statuses(
            two=" (a --name that is not one printable line of at most "
            f"{NAME_MAX_LEN} characters included)"
        ),
    )
    issue.add_argument(
        "--env",
        required=True,
        choices=["production", "sandbox"],
        help="the environment the key works in (a production key is refused by the sandbox, "
        "and the other way round)",
    )
    issue.add_argument(
        "--product",
        required=True,
        choices=PRODUCTS,
        help="the product the key opens (the sandbox serves no ai: such a key draws a warning)",
    )
    issue.add_argument(
        "--name",
        default="",
        help=f"a label for the key (partner, purpose): one line of at most {NAME_MAX_LEN} "
        "printable characters",
    )
    add_arguments(issue, ["db"])
    issue.set_defaults(func=_issue)

    rotate = ksub.add_parser(
        "rotate",
        help="new primary key; the given key stays valid as a secondary for 24 h (a "
        "secondary from an earlier rotation stops working at once, with a warning)",
        epilog=exit_statuses(
            "the key is not valid (unknown, malformed, revoked or expired) or was already "
            "rotated (rotate its replacement)"
        ),
    )
    rotate.add_argument("key", help="the current key, or - to read it from standard input")
    rotate.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(rotate, ["db"], EXISTING_DB_HELP)
    rotate.set_defaults(func=_rotate)

    revoke = ksub.add_parser(
        "revoke",
        help="revoke a key at once (by the key or its key_id); running edges refuse it "
        "within EDGE_KEY_CACHE_SECONDS (5 s). Warns when another key of its rotation family "
        "is still valid: the partner's beacons and report row keep counting under it",
        epilog=exit_statuses("no such active key: it is unknown or already revoked"),
    )
    revoke.add_argument("key", help="the key, its key_id, or - to read it from standard input")
    add_arguments(revoke, ["db"], EXISTING_DB_HELP)
    revoke.set_defaults(func=_revoke)

    lst = ksub.add_parser(
        "list", help="list keys (ids, scope, status; never the keys)", epilog=exit_statuses()
    )
    lst.add_argument("--json", action="store_true", help="print JSON lines")
    add_arguments(lst, ["db"], EXISTING_DB_HELP)
    lst.set_defaults(func=_list)


def _key_arg(value: str) -> str:
    return sys.stdin.readline().strip() if value == "-" else value.strip()


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return (
        dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _issue(args: argparse.Namespace) -> int:
    # Checked before the store is opened, so a refused name never creates a database file.
    problem = name_problem(args.name)
    if problem is not None:
        print(f"edge keys issue: --name {problem}", file=sys.stderr)
        return 2

    async def work(ctx: Context) -> int:
        await ctx.refuse_other_environment(args.env, f"a {args.env} key")
        key, record = await ctx.keyring.issue(args.env, args.product, args.name)
        print(key)
        if args.env == "sandbox" and args.product == "ai":
            # Issued all the same (the format allows it, and a partner may keep one key set
            # per environment), but nothing in the sandbox will accept it.
            print(
                "edge keys issue: warning: the sandbox serves no AI product (no /v1/ai "
                "routes, no AI beacons); this key works nowhere until it does",
                file=sys.stderr,
            )
        print(
            f"issued {record.key_id} ({record.env}/{record.product}); store it now, "
            "it cannot be shown again",
            file=sys.stderr,
        )
        return 0

    return with_context(settings_from(args), work)


def _rotate(args: argparse.Namespace) -> int:
    key = _key_arg(args.key)

    async def work(ctx: Context) -> int:
        try:
            rot = await ctx.keyring.rotate(key)
        except EdgeError as exc:
            print(f"edge keys rotate: {exc.message}", file=sys.stderr)
            return 1
        for key_id in rot.retired:
            # A family keeps one secondary: the earlier one ends now, not in its 24 hours.
            print(
                f"edge keys rotate: warning: {key_id}, the secondary of the previous rotation, "
                "stops working now (only one previous key is kept)",
                file=sys.stderr,
            )
        result = {
            "apiKey": rot.api_key,
            "secondaryKey": rot.secondary_key,
            "secondaryKeyExpiresAt": _iso(rot.secondary_expires_at),
        }
        if args.json:
            print(orjson.dumps(result).decode())
        else:
            print(rot.api_key)
            print(
                f"new key {rot.record.key_id}; the previous key works until "
                f"{result['secondaryKeyExpiresAt']}",
                file=sys.stderr,
            )
        return 0

    return with_context(settings_from(args), work, must_exist=True)


def _revoke(args: argparse.Namespace) -> int:
    key = _key_arg(args.key)

    async def work(ctx: Context) -> int:
        record = await ctx.keyring.revoke(key)
        if record is None:
            print("edge keys revoke: no such active key", file=sys.stderr)
            return 1
        print(f"revoked {record.key_id} ({record.env}/{record.product})")
        # A partner's report row and beacons belong to its rotation family (the id of its
        # first key): while another key of the family is valid, they still count and bill.
        now = ctx.clock()
        others = [
            r.key_id
            for r in await ctx.store.keys_in_family(record.family)
            if r.key_id != record.key_id and r.is_valid(now)
        ]
        if others:
            print(
                f"edge keys revoke: warning: {', '.join(others)} of the same rotation family "
                f"({record.family}) is still valid: the partner's beacons and report row keep "
                "counting under it until it is revoked or, as a secondary, expires",
                file=sys.stderr,
            )
        return 0

    return with_context(settings_from(args), work, must_exist=True)


def _list(args: argparse.Namespace) -> int:
    async def work(ctx: Context) -> int:
        now = ctx.clock()
        records = await ctx.store.list_keys()
        rows = [
            {
                "key_id": r.key_id,
                "env": r.env,
                "product": r.product,
                "name": r.name,
                "status": r.status(now),
                "created_at": _iso(r.created_at),
                "expires_at": _iso(r.expires_at),
                "replaced_by": r.replaced_by or "",
            }
            for r in records
        ]
        if args.json:
            for row in rows:
                print(orjson.dumps(row).decode())
            return 0
        cols = list(rows[0]) if rows else ["key_id", "env", "product", "name", "status"]
        widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in cols}
        print("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
        for r in rows:
            print("  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip())
        return 0

    return with_context(settings_from(args), work, must_exist=True)
