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
from edge.store import KeyRecord
from edge.threads import partner_thread
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


async def match_ugc(ctx: Context, request: Request, body: UgcBody, key: KeyRecord) -> MatchResult:
    """Match a post; BadGateway (502, Retry-After) when the matcher fails or times out."""
    thread = partner_thread("ugc", key, body.post_id)  # the partner's own post, see edge.threads
    result = await matching.match(
        ctx,
        MatchRequest(
            product="ugc",
            content=body.message,
            thread_id=thread,  # disables and frequency are scoped to the thread
            post_id=thread,  # the no-match window is per post
            geo=request_geo(ctx, request, body.geo),
            created_at=body.created_at,
            max_ads=ctx.settings.max_ads,
            explain=body.explain,
        ),
        # Disables recorded before ids were scoped carry the bare post id (only UGC keys
        # could disable), so a UGC post still honours them: see docs/decisions.md.
        unscoped_disables=body.post_id,
    )
    count_outcome(ctx.counters, key.family, result)
    return result


async def served_ugc(ctx: Context, key: KeyRecord, post_id: str, ad_id: str) -> bool:
    """Whether a match of this partner's post (``match_ugc``, by ``key`` or a key of its
    family) served ``ad_id``. The serves are the matcher's own record (kept for its
    frequency cap, a day); a serve still being written is waited for."""
    thread = partner_thread("ugc", key, post_id)  # as match_ugc scopes it: thread and unit
    state = await matching.StoreMatchState(ctx.store, ctx.state_writes).load(
        thread, None, thread, ctx.clock()
    )
    return ad_id in state.unit_ads


def sandbox_no_match(post_id: str) -> bool:
    digest = hashlib.sha256(post_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % SANDBOX_NO_MATCH_ONE_IN == 0
