"""POST /v1/ai/process: match an ad to an assistant turn. Production only: the
AI product has no sandbox, so the sandbox answers 404 here."""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge import matching
from edge.context import Context
from edge.counters import count_outcome
from edge.errors import Unprocessable
from edge.http import json_response, no_query, read_body
from edge.partner import schemas
from edge.partner.bodies import parse_ai
from edge.partner.guard import admit
from edge.partner.render import ai_body
from edge.threads import partner_scope, partner_thread
from matcher.types import MatchRequest

PATH = "/v1/ai/process"


def routes(ctx: Context) -> list[BaseRoute]:
    if not ctx.settings.is_production:
        return []
    return [Route(PATH, partial(process, ctx), methods=["POST"])]


async def process(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ai")
    no_query(request.scope, Unprocessable)  # every refusal of this route is a 422
    body = parse_ai(await read_body(request, max_bytes=ctx.settings.max_body_bytes))
    result = await matching.match(
        ctx,
        MatchRequest(
            product="ai",
            content=body.content,
            prompt=body.prompt,
            # Disables and frequency are per conversation; a lone turn is its own thread.
            # Scoped to this partner's key family (edge.threads).
            thread_id=partner_thread("ai", admission.key, body.conversation_id or body.message_id),
            turn_id=body.message_id,  # the frequency cap counts an ad once per turn
            geo=body.geo,
            max_ads=ctx.settings.max_ads,
        ),
    )
    count_outcome(ctx.counters, admission.key.family, result)
    assert ctx.signer is not None  # set at start-up, before any request
    # The beacon URLs name the partner too: its conversation "7" is not another's (scope),
    # and its key's report row is the one their views, clicks and conversions count for.
    scope = partner_scope(ctx.signer, "ai", admission.key)
    family = admission.key.family
    return json_response(
        ai_body(ctx, result, body.message_id, body.conversation_id, scope, family),
        headers={**admission.headers, "Cache-Control": "no-store"},
    )


def openapi(ctx: Context) -> dict[str, Any]:
    if not ctx.settings.is_production:
        return {}
    return schemas.ai_process_doc(ctx, PATH)
