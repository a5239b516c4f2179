"""One module per route family. Each defines ``routes(ctx)`` (its ``Route`` objects, whose
endpoints are module-level ``async def name(ctx, request)`` functions bound to the context)
and ``openapi(ctx)`` (the OpenAPI fragment of those routes); ``edge.app`` lists them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from edge.context import Context


class RouteModule(Protocol):
    def routes(self, ctx: Context) -> list[BaseRoute]: ...

    def openapi(self, ctx: Context) -> dict[str, Any]: ...
