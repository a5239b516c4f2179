"""POST /v1/ugc/process: match an ad to a post. Production only: the sandbox
serves the same contract at /ugc/v1/process (edge.routes.sandbox, docs/decisions.md)."""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.http import no_query, read_body
from edge.partner import schemas
from edge.partner.bodies import UgcBody, parse_ugc
from edge.partner.flow import match_ugc
from edge.partner.guard import Admission, match_once
from edge.partner.render import ugc_body

PATH = "/v1/ugc/process"


def routes(ctx: Context) -> list[BaseRoute]:
    if not ctx.settings.is_production:
        return []
    return [Route(PATH, partial(process, ctx), methods=["POST"])]


async def process(ctx: Context, request: Request) -> Response:
    async def parse() -> UgcBody:
        no_query(request.scope)
        return parse_ugc(await read_body(request, max_bytes=ctx.settings.max_body_bytes))

    async def match(admission: Admission, body: UgcBody) -> dict[str, Any]:
        result = await match_ugc(ctx, request, body, admission.key)
        # The pixel names the partner's key family: what it bills counts for that row.
        return ugc_body(ctx, result, body.post_id, admission.key.family)

    return await match_once(ctx, request, "ugc", parse, match)


def openapi(ctx: Context) -> dict[str, Any]:
    if not ctx.settings.is_production:
        return {}
    return schemas.ugc_process_doc(ctx, PATH, sandbox=False)
