"""Earlier-described unprefixed routes, served only with
EDGE_LEGACY_API=1; without it these paths are 404 (partner paths carry the /v1 prefix).

- POST /ugc/process: the UGC match with ``meta.location``; ads carry the UGC fields plus
  pricing_model and relevancy_score; an empty ``ads`` array (never the no-match body) when
  nothing passes.
- POST /ugc/disable: thread-scoped, idempotent disables of (post_id, ad_id) pairs.
- POST /ugc/impression: a billing-grade impression; ``Idempotency-Key`` makes retries count once.
  It goes through the invalid-traffic rules as every impression does (``edge.ivt``, as a
  partner-fired beacon: no per-client rate; the bot rule reads the reader's browser when
  ``X-Device-User-Agent`` names it, never the partner server's own agent, which this API
  never asked partners to change), and an ad that no match of that post by this partner
  served is stored as invalid (``not_served``).
- GET /keys/apiKey: self-service rotation through the same Keyring.rotate as ``edge keys rotate``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge import keys
from edge.context import Context
from edge.creative import cpm_usd
from edge.delivery.events import billed_cpm, count_impression, impression_verdict
from edge.errors import (
    BadGateway,
    BadRequest,
    EdgeError,
    ServiceUnavailable,
    Unauthorized,
    Unprocessable,
)
from edge.http import counting_route, json_response, read_body
from edge.partner import schemas_admin
from edge.partner.bodies import parse_disable, parse_impression, parse_legacy_process
from edge.partner.flow import match_ugc, served_ugc
from edge.partner.guard import admit
from edge.partner.render import legacy_ad
from edge.store import Impression, StoreUnavailable
from edge.threads import partner_thread

PATHS = {
    "process": "/ugc/process",
    "disable": "/ugc/disable",
    "impression": "/ugc/impression",
    "rotate": "/keys/apiKey",
}
STORE_RETRY_AFTER = "5"
_NO_STORE = {"Cache-Control": "no-store"}


def _store_down(what: str, error: type[EdgeError] = ServiceUnavailable) -> EdgeError:
    """503 like the /dea beacons when the store cannot commit; the rotation's 502 is
    the rotation endpoint's own ("rotation infrastructure unavailable")."""
    return error(
        f"the store could not commit the {what}; nothing was changed, retry shortly",
        headers={"Retry-After": STORE_RETRY_AFTER},
    )


def _idempotency_key(request: Request) -> str | None:
    value = request.headers.get("idempotency-key")
    if value is None:
        return None
    value = value.strip().strip('"')  # the IETF draft sends it as a quoted string
    if not value or len(value) > 255 or not value.isprintable():
        raise BadRequest(
            "Idempotency-Key must be 1 to 255 printable characters", field="Idempotency-Key"
        )
    return value


def routes(ctx: Context) -> list[BaseRoute]:
    if not ctx.settings.legacy_api:
        return []
    return [
        Route(PATHS["process"], partial(process, ctx), methods=["POST"]),
        Route(PATHS["disable"], partial(disable, ctx), methods=["POST"]),
        Route(PATHS["impression"], partial(impression, ctx), methods=["POST"]),
        counting_route(PATHS["rotate"], partial(rotate, ctx), ["GET"]),  # HEAD never rotates
    ]


async def process(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ugc")
    body = parse_legacy_process(await read_body(request, max_bytes=ctx.settings.max_body_bytes))
    result = await match_ugc(ctx, request, body, admission.key)
    ads = [legacy_ad(s) for s in result.ads]  # no-match and empty both read "ads": []
    return json_response(
        {"post_id": body.post_id, "ads": ads}, headers={**admission.headers, **_NO_STORE}
    )


async def disable(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ugc")
    pairs = parse_disable(await read_body(request, max_bytes=ctx.settings.max_body_bytes))
    key = admission.key  # the post is this partner's own: scoped as /ugc/process scopes it
    rows = [(partner_thread("ugc", key, p.post_id), p.ad_id, p.meta_data) for p in pairs]
    try:
        await ctx.store.disable_ads(rows, ctx.clock())
    except StoreUnavailable:
        raise _store_down("disables") from None
    return json_response({"success": True}, headers={**admission.headers, **_NO_STORE})


async def impression(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ugc")
    idem = _idempotency_key(request)
    post_id, ad_id = parse_impression(
        await read_body(request, max_bytes=ctx.settings.max_body_bytes)
    )
    assert ctx.matcher is not None  # set at start-up, before any request
    placement = ctx.matcher.catalogue.placement(ad_id)
    if placement is None:
        raise BadRequest(f"ad_id {ad_id!r} is not an ad of the catalogue", field="ad_id")
    # Without an Idempotency-Key every call is a new impression: many readers of one
    # thread see the same (post_id, ad_id), so that pair cannot be the dedupe key.
    if idem is None:
        dedupe = f"legacy:once:{uuid.uuid4()}"
    else:
        # Scoped to the key family: a retry sent with the new key after a rotation is the
        # same call, not a second impression.
        dedupe = f"legacy:{admission.key.family}:{idem}"
        if await _replayed(ctx, dedupe, post_id, ad_id):
            return _impression_answer(admission.headers, post_id, replayed=True)
    try:
        served = await served_ugc(ctx, admission.key, post_id, ad_id)
    except StoreUnavailable:
        raise _store_down("impression") from None
    # Fired by the partner's server for a reader: no per-client rate, and the bot rule reads
    # only the reader's browser named in X-Device-User-Agent. An invalid one is stored,
    # billed nothing, and answered as a valid one is.
    verdict = impression_verdict(
        ctx,
        request.scope,
        bound_to=None,
        publisher_id=None,
        partner=True,
        served=served,
        reader_named_only=True,
    )
    cpm = billed_cpm(ctx, placement.campaign.id, cpm_usd(ctx, placement)) if verdict.valid else None
    imp = Impression(
        kind="legacy",
        dedupe_keys=(dedupe,),
        env=ctx.settings.env,
        ad_id=ad_id,
        campaign_id=placement.campaign.id,
        at=ctx.clock(),
        post_id=post_id,
        cpm_usd=cpm,
        invalid_reason=verdict.reason,
        key_family=admission.key.family,  # the partner's report row
    )
    try:
        counted = await count_impression(ctx, imp)
    except StoreUnavailable:
        raise _store_down("impression") from None
    if not counted and idem is not None:
        # Another call with this key was counted between the check above and this write:
        # a replay if it carried this body, the reuse's 422 if not.
        await _replayed(ctx, dedupe, post_id, ad_id)
    return _impression_answer(admission.headers, post_id, replayed=not counted)


async def _replayed(ctx: Context, dedupe: str, post_id: str, ad_id: str) -> bool:
    """Whether an impression was counted under this Idempotency-Key already, with this
    body (its stored post_id and ad_id). A key counted with another body is a 422:
    counting it would break the key's promise to count once, and a replay would
    acknowledge an impression never counted."""
    try:
        stored = await ctx.store.stored_impression(dedupe)
    except StoreUnavailable:
        raise _store_down("impression") from None
    if stored is None:
        return False
    if (stored.post_id, stored.ad_id) == (post_id, ad_id):
        return True
    raise Unprocessable(
        "Idempotency-Key was already used with a different body (post_id, ad_id); "
        "send a new key for a new impression",
        field="Idempotency-Key",
        code="idempotency_key_reused",
    )


def _impression_answer(headers: dict[str, str], post_id: str, *, replayed: bool) -> Response:
    out = {**headers, **_NO_STORE}
    if replayed:
        out["Idempotent-Replayed"] = "true"
    return json_response({"post_id": post_id, "acknowledged": True}, headers=out)


async def rotate(ctx: Context, request: Request) -> Response:
    key = request.headers.get("x-api-key")
    parsed = keys.parse(key) if key else None
    if key is None or parsed is None:
        raise Unauthorized("a valid X-API-Key header is required", field="X-API-Key")
    try:
        record = await ctx.keyring.verify(key, env=ctx.settings.env, product=parsed.product)
        headers = await ctx.rate_limits.admit(parsed.product, record.family)
        request.state.rate_limit_headers = headers  # on a 409 or 502 below too
        rotation = await ctx.keyring.rotate(key)  # the operator's code path (edge keys)
    except StoreUnavailable:
        raise _store_down("rotation", BadGateway) from None
    expires = dt.datetime.fromtimestamp(int(rotation.secondary_expires_at), dt.UTC)
    body = {
        "apiKey": rotation.api_key,
        "secondaryKey": rotation.secondary_key,
        "secondaryKeyExpiresAt": expires.isoformat().replace("+00:00", "Z"),
    }
    return json_response(body, headers={**headers, **_NO_STORE})


def openapi(ctx: Context) -> dict[str, Any]:
    if not ctx.settings.legacy_api:
        return {}
    return schemas_admin.legacy_doc(ctx, PATHS)
