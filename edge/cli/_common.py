"""Helpers shared by sub-commands: settings from flags, running store work."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeAlias, TypeVar

from edge.context import Context
from edge.preflight import check_db
from edge.settings import Settings, SettingsError
from edge.store import StoreUnavailable
from edge.store.postgres import redact_url

T = TypeVar("T")
# What register(sub) receives: argparse names its sub-command set only privately.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


# --db of a command that only acts on what a database already holds (listing, revoking,
# rotating, removing): a new, empty database could only make it report "nothing there".
EXISTING_DB_HELP = {
    "db": "the edge's SQLite database file, which must exist (a missing one is refused, "
    "never created), or a postgresql:// URL"
}


# The exit statuses of every command; ``edge --help`` ends with it, the README states it.
EXIT_RULE = (
    "0 done; 1 the command could not do what was asked: what it names is not there or not "
    "valid (a key, a publisher, a catalogue file or version), the edge failed to start or "
    "met an error (it says which), or its standard output was closed before all was printed "
    "(`| head`; quietly); 2 bad usage or settings: a wrong or missing argument, a "
    "value refused before anything is done, or a setting or database that cannot be used "
    "(one line on standard error names it). Each command's --help says when it exits 1."
)


def exit_statuses(one: str | None = None, *, done: str = "done", two: str = "") -> str:
    """The epilog of a command's --help: its exit statuses, by ``EXIT_RULE``. ``one`` says
    when it exits 1 (None: only on an error it did not expect), ``two`` adds the values it
    refuses with 2 to "bad usage or settings"."""
    statuses = [f"0 {done}", *([f"1 {one}"] if one else []), f"2 bad usage or settings{two}"]
    return f"exit status: {'; '.join(statuses)}."


# The epilog of a group's --help (`edge keys --help`): its actions say when they exit 1.
GROUP_EXITS = exit_statuses(
    "as each ACTION's --help says", two=" (no ACTION or an unknown one included)"
)


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_sources(vars(args))


def describe_db(db: Path | str) -> str:
    """The database named in words (a URL without its password)."""
    if isinstance(db, str):
        return redact_url(db)
    return str(db.resolve())


def with_context(
    settings: Settings, work: Callable[[Context], Awaitable[T]], *, must_exist: bool = False
) -> T:
    """Open the store, run ``work(ctx)``, close the store (even on error).

    Says on standard error which database it opened, so a command run from an unexpected
    folder never works on a surprise ``./var/edge.db`` unnoticed; a ``must_exist`` command (one
    that only acts on state already stored, with ``EXISTING_DB_HELP`` as its --db help)
    refuses a SQLite file that does not exist instead of creating an empty one. An unusable
    database is a ``SettingsError`` (one line naming EDGE_DB), not a traceback.
    """
    db = settings.db
    missing = isinstance(db, Path) and not db.exists()
    if missing and must_exist:
        raise SettingsError(
            f"EDGE_DB (--db): no database at {describe_db(db)}; "
            "name the edge's database with --db or EDGE_DB"
        )
    check_db(settings)
    if missing:
        print(f"edge: creating a new database at {describe_db(db)}", file=sys.stderr)
    else:
        print(f"edge: database {describe_db(db)}", file=sys.stderr)

    async def run() -> T:
        ctx = Context.build(settings)
        try:
            await ctx.open_store()
        except StoreUnavailable as exc:
            raise SettingsError(f"EDGE_DB (--db): {exc}") from None
        try:
            return await work(ctx)
        finally:
            await ctx.store.close()

    return asyncio.run(run())
