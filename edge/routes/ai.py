"""POST /v1/ai/process (SPEC 4.3)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from edge.context import Context


def routes(ctx: Context) -> list[BaseRoute]:
    return []
