"""``GET /openapi.json``: the document of every route this process serves."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.openapi import build_document, json_body

if TYPE_CHECKING:
    from edge.routes import RouteModule

PATH = "/openapi.json"


def routes(ctx: Context, modules: Iterable[RouteModule]) -> list[BaseRoute]:
    fragments = [m.openapi(ctx) for m in modules]
    fragments.append(_self_fragment())
    body = orjson.dumps(build_document(ctx, fragments), option=orjson.OPT_INDENT_2)
    return [Route(PATH, partial(document, body), methods=["GET"])]


async def document(body: bytes, request: Request) -> Response:
    """The document, built once at start-up from every route module's fragment."""
    return Response(body, media_type="application/json")


def _self_fragment() -> dict[str, Any]:
    return {
        "paths": {
            PATH: {
                "get": {
                    "summary": "This OpenAPI 3.1 document",
                    "tags": ["meta"],
                    "responses": {"200": json_body({"type": "object"}, "The document")},
                }
            }
        }
    }
