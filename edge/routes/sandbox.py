"""The sandbox host's own routes: /ugc/v1/process (SPEC 4.5)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from edge.context import Context


def routes(ctx: Context) -> list[BaseRoute]:
    return []
