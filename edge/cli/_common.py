"""Helpers shared by sub-commands: settings from flags, running store work."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeAlias, TypeVar

from edge.context import Context
from edge.preflight import check_db
from edge.settings import Settings

T = TypeVar("T")
# What register(sub) receives: argparse names its sub-command set only privately.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_sources(vars(args))


def with_context(settings: Settings, work: Callable[[Context], Awaitable[T]]) -> T:
    """Open the store, run ``work(ctx)``, close the store (even on error). An unusable
    database is a ``SettingsError`` (one line naming EDGE_DB), not a traceback."""
    check_db(settings)

    async def run() -> T:
        ctx = Context.build(settings)
        await ctx.store.open()
        try:
            return await work(ctx)
        finally:
            await ctx.store.close()

    return asyncio.run(run())
