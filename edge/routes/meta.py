"""``GET /openapi.json``: the document of every route this process serves."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.openapi import build_document, json_body

PATH = "/openapi.json"


def routes(ctx: Context, modules: Iterable[ModuleType]) -> list[BaseRoute]:
    fragments = [m.openapi(ctx) for m in modules if hasattr(m, "openapi")]
    fragments.append(_self_fragment())
    body = orjson.dumps(build_document(ctx, fragments), option=orjson.OPT_INDENT_2)

    async def document(request: Request) -> Response:
        return Response(body, media_type="application/json")

    return [Route(PATH, document, methods=["GET"])]


def _self_fragment() -> dict:
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
