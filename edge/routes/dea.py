"""The /dea delivery routes called by the tag and pixels (SPEC 4.6, 2.6)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from edge.context import Context
from geoip import open_reader


def routes(ctx: Context) -> list[BaseRoute]:
    return []


async def startup(ctx: Context) -> None:
    # Opened once (mmap, C extension); lookups are microseconds, done on the event loop.
    if ctx.geo is None:
        ctx.geo = open_reader(ctx.settings.geoip_db)


async def shutdown(ctx: Context) -> None:
    geo, ctx.geo = ctx.geo, None
    if geo is not None and hasattr(geo, "close"):
        geo.close()
