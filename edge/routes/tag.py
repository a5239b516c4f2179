"""GET /dea/tag.js and the demo publisher page."""

from __future__ import annotations

from starlette.routing import BaseRoute

from edge.context import Context


def routes(ctx: Context) -> list[BaseRoute]:
    return []
