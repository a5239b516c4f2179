"""The sandbox host's UGC match, POST /ugc/v1/process, also answered
at production's path /v1/ugc/process so that moving to production changes only the host and
the key.

Same body and response schema as production's /v1/ugc/process, on the static catalogue the
sandbox process loads at start-up; about one post_id in five gets the no-match body, by a
hash of post_id. ``"explain": true`` adds why. Sandbox impressions never bill (the edge
pixel's token says ``sandbox`` and carries no price).
"""

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
from edge.partner.flow import (
    SANDBOX_NO_MATCH_ONE_IN,
    SANDBOX_NO_MATCH_SECONDS,
    match_ugc,
    sandbox_no_match,
)
from edge.partner.guard import Admission, match_once
from edge.partner.render import ugc_body
from matcher.types import MatchResult

PATH = "/ugc/v1/process"
PRODUCTION_PATH = "/v1/ugc/process"  # the same route, so partner code needs no path change
PATHS = (PATH, PRODUCTION_PATH)


def routes(ctx: Context) -> list[BaseRoute]:
    if ctx.settings.is_production:
        return []
    return [Route(path, partial(process, ctx), methods=["POST"]) for path in PATHS]


async def process(ctx: Context, request: Request) -> Response:
    async def parse() -> UgcBody:
        no_query(request.scope)
        raw = await read_body(request, max_bytes=ctx.settings.max_body_bytes)
        return parse_ugc(raw, sandbox=True)

    async def match(admission: Admission, body: UgcBody) -> dict[str, Any]:
        if sandbox_no_match(body.post_id):
            out: dict[str, Any] = {"no_ad_retry_after_seconds": SANDBOX_NO_MATCH_SECONDS}
            ctx.counters.add("key", admission.key.family, "no_matches")
            why = {
                "outcome": "no_match",
                "reason": "sandbox_sample",
                "detail": f"about one post_id in {SANDBOX_NO_MATCH_ONE_IN} gets the no-match "
                "body in the sandbox, chosen by a hash of post_id; change post_id to match",
            }
        else:
            result = await match_ugc(ctx, request, body, admission.key)
            out = ugc_body(ctx, result, body.post_id, admission.key.family)
            why = _explain(result)
        if body.explain:
            out["explain"] = why
        return out

    return await match_once(ctx, request, "ugc", parse, match)


def _explain(result: MatchResult) -> dict[str, Any]:
    return {
        "outcome": result.outcome,
        "reason": result.reason,
        "ads": [
            {
                "ad_id": s.placement.ad.id,
                "relevancy_score": round(s.relevancy_score, 4),
                "rank_score": round(s.rank_score, 4),
            }
            for s in result.ads
        ],
        "matcher": result.explanation or {},
    }


def openapi(ctx: Context) -> dict[str, Any]:
    if ctx.settings.is_production:
        return {}
    doc = schemas.ugc_process_doc(ctx, PATH, sandbox=True)
    op = doc["paths"][PATH]["post"]
    op["description"] = (
        f"Served at {PATH} and at production's {PRODUCTION_PATH}: the same route, so moving "
        f"to production changes only the host and the key. {op['description']}"
    )
    doc["paths"][PRODUCTION_PATH] = {"post": op}
    return doc
