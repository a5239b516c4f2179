"""One UGC match as the /v1, sandbox and legacy routes share it: geo, the matcher, counters."""

from __future__ import annotations

import hashlib

from starlette.requests import Request

from edge import matching
from edge.context import Context
from edge.counters import count_outcome
from edge.geo import locate_ip
from edge.partner.bodies import UgcBody
from edge.partner.geo import end_user_ip
from matcher.types import GeoSignal, MatchRequest, MatchResult

# Sandbox: about one post_id in five gets the no-match body,
# chosen by a hash of post_id so a partner's test gets the same answer every run.
SANDBOX_NO_MATCH_ONE_IN = 5
SANDBOX_NO_MATCH_SECONDS = 900


def request_geo(ctx: Context, request: Request, signal: GeoSignal | None) -> GeoSignal | None:
    """The body's geo signal, else the end user's IP from ``X-Forwarded-For``."""
    if signal is not None:
        return signal
    return locate_ip(ctx.geo, end_user_ip(request.headers.get("x-forwarded-for")))


async def match_ugc(ctx: Context, request: Request, body: UgcBody, key_id: str) -> MatchResult:
    """Match a post; BadGateway (502, Retry-After) when the matcher fails or times out."""
    result = await matching.match(
        ctx,
        MatchRequest(
            product="ugc",
            content=body.message,
            thread_id=body.post_id,  # disables and frequency are scoped to the thread
            post_id=body.post_id,  # the no-match window is per post
            geo=request_geo(ctx, request, body.geo),
            created_at=body.created_at,
            max_ads=ctx.settings.max_ads,
            explain=body.explain,
        ),
    )
    count_outcome(ctx.counters, key_id, result)
    return result


def sandbox_no_match(post_id: str) -> bool:
    digest = hashlib.sha256(post_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % SANDBOX_NO_MATCH_ONE_IN == 0
