"""Liveness checks: no key, 200, on both environments."""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge import __version__
from edge.context import Context
from edge.http import json_response
from edge.openapi import json_body


def routes(ctx: Context) -> list[BaseRoute]:
    return [Route(path, partial(health, ctx), methods=["GET"]) for path in _paths(ctx)]


async def health(ctx: Context, request: Request) -> Response:
    body = {"status": "ok", "env": ctx.settings.env, "version": __version__}
    return json_response(body, headers={"Cache-Control": "no-store"})


def _paths(ctx: Context) -> list[str]:
    paths = ["/v1/ugc/health", "/v1/ai/health", "/dea/health"]
    if not ctx.settings.is_production:
        paths.append("/ugc/health")  # the sandbox's UGC health path
    return paths


HEALTH_SCHEMA = {
    "type": "object",
    "required": ["status", "env", "version"],
    "properties": {
        "status": {"const": "ok"},
        "env": {"enum": ["production", "sandbox"]},
        "version": {"type": "string"},
    },
}


def openapi(ctx: Context) -> dict[str, Any]:
    op = {
        "summary": "Liveness check (no key)",
        "tags": ["health"],
        "responses": {"200": json_body(HEALTH_SCHEMA, "The process is up")},
    }
    return {"paths": {path: {"get": op} for path in _paths(ctx)}}
