"""GET /v1/ad-manager/campaigns and /ad-sets (SPEC 4.1)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from edge.context import Context


def routes(ctx: Context) -> list[BaseRoute]:
    return []
