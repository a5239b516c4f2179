"""Earlier-described unprefixed routes behind EDGE_LEGACY_API (SPEC 4.8, 4.9)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from edge.context import Context


def routes(ctx: Context) -> list[BaseRoute]:
    return []
