"""The /dea delivery routes called by the tag and pixels (SPEC 4.6, 2.6)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from edge.context import Context


def routes(ctx: Context) -> list[BaseRoute]:
    return []
