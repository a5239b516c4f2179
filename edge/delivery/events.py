"""Beacon handlers: impressions (billing-grade), hovers, placement failures, AI beacons.

Every counted beacon is committed before its 2xx. Impressions count once per
signed token and once per the tag's ``impression_id`` (a replay sharing either counts
nothing); AI beacons count once per ``(kind, ad_id, message_id)`` within the message's
conversation of its partner (``AiBeacon.impression_key``). A forged, tampered,
expired or misdirected token is a 400 and counts nothing.

Every impression goes through the invalid-traffic rules (``edge.ivt``) first: an invalid
one is stored with its reason and never billed, and its answer is the same as a valid
one's. The tag's beacons get every rule; the partner-fired pixel and AI beacons (which a
partner's server may fire for many users) get all but the per-client rate, and are judged
on the end user's browser named in ``X-Device-User-Agent`` when the partner sends it (the
IAB header for beacons fired on a user's behalf), else on their own ``User-Agent``.

What a partner was handed (the pixel's token, the AI URLs) names its key's rotation family;
when that family has no valid key left (``partner_live``), the beacon is stored as
``key_revoked`` and counts on no key row: a revoked partner earns nothing from what it kept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from edge import ledger
from edge.beacons import (
    AiBeacon,
    AiBeaconKind,
    ExpiredBeacon,
    ImpressionClaims,
    InvalidToken,
    Surface,
    read_impression_token,
    verify_ai_beacon,
)
from edge.context import Context
from edge.delivery import schemas
from edge.delivery.pages import require_publisher_origin
from edge.delivery.requests import (
    BodyFields,
    json_body,
    store_errors,
    store_unavailable,
    strict_query,
)
from edge.errors import BadRequest
from edge.http import header, json_response, no_query, read_body, receive_body
from edge.ivt import Client, Verdict, viewable_report
from edge.lane import Answer, answer_of
from edge.partner.fields import control_character
from edge.store import Hover, Impression, PlacementFailure, StoreUnavailable
from edge.store.events import ImpressionKind
from matcher.types import Campaign, PricingModel

log = logging.getLogger("edge.delivery.events")


def read_claims(ctx: Context, token: object, surface: Surface, field: str) -> ImpressionClaims:
    assert ctx.signer is not None  # set at start-up, before any request
    try:
        return read_impression_token(
            ctx.signer, token, surface=surface, env=ctx.settings.env, now=ctx.clock()
        )
    except InvalidToken as exc:
        raise BadRequest(str(exc), field=field, code="invalid_token") from None


def campaign_of(ctx: Context, campaign_id: str | None) -> Campaign | None:
    if ctx.matcher is None or campaign_id is None:
        return None
    return ctx.matcher.catalogue.campaign(campaign_id)


def pricing_as_served(ctx: Context, sealed: PricingModel | None, ad_id: str) -> PricingModel | None:
    """The pricing model a view of ``ad_id`` bills under: its ad set's when the ad was
    served, ``sealed`` in what the edge handed out with it (the impression token, the signed
    AI URL) and kept with its click, whatever the live catalogue says now (an operator's
    change applies to the ads served after it). What was handed out before pricing was
    sealed has none: the live catalogue's ad set then (None: the ad is not in it)."""
    if sealed is not None:
        return sealed
    placement = ctx.matcher.catalogue.placement(ad_id) if ctx.matcher is not None else None
    return placement.ad_set.pricing_model if placement is not None else None


def billed_cpm(ctx: Context, campaign_id: str | None, cpm: float | None) -> float | None:
    """The CPM to bill, or None when the campaign has reached its budget or daily cap or is
    no longer in the live catalogue: the impression is still stored and counted, never
    billed past the cap (the last one before it bills what is left). The impression built
    with it goes to ``count_impression`` with no await between, which holds the charge
    before any other decision reads the headroom."""
    if cpm is None:
        return None
    return ledger.cpm_within(cpm, ctx.spend.headroom(campaign_of(ctx, campaign_id)))


def count_impression(ctx: Context, imp: Impression) -> Awaitable[bool]:
    """Store the impression (awaited: True when counted, ``StoreUnavailable`` when the
    store cannot). What it bills is held against the campaign's headroom from the start of
    the await until the commit, then counts as its spend (the pacing gate and the next
    billing decision see it); a replay's or a failed write's hold is dropped. (One
    coroutine around the store's: this runs on every impression beacon.)"""
    return ctx.spend.bill(
        imp.campaign_id,
        ledger.billing_usd(imp),
        imp.at,
        ledger.record_impression(ctx.store, imp),
    )


async def _record(ctx: Context, imp: Impression) -> bool:
    """``count_impression``, a store that cannot commit being a 503 (retry)."""
    try:
        return await count_impression(ctx, imp)
    except StoreUnavailable:
        raise store_unavailable() from None


def _user_agent(scope: Scope, partner: bool) -> str:
    """The user agent a beacon is judged on. A partner firing a beacon from its server for
    a user may name the user's browser in ``X-Device-User-Agent``; its own agent (an HTTP
    library, on the crawler list) is the one judged otherwise."""
    if partner:
        device = header(scope, b"x-device-user-agent")
        if device:
            return device
    return header(scope, b"user-agent") or ""


async def partner_live(ctx: Context, key_family: str) -> bool:
    """Whether the partner key family sealed in what a beacon carries still has a valid key
    (``Keyring.family_live``: cached like a verified key, so a revocation applies within
    ``EDGE_KEY_CACHE_SECONDS``); a 503 (retry) when the store cannot say."""
    try:
        return await ctx.keyring.family_live(key_family)
    except StoreUnavailable:
        raise store_unavailable() from None


def impression_verdict(
    ctx: Context,
    scope: Scope,
    *,
    bound_to: str | None,
    publisher_id: str | None,
    partner: bool,
    partner_live: bool = True,
    event_id: str | None = None,
    viewable: bool = True,
    served: bool = True,
    reader_named_only: bool = False,
) -> Verdict:
    """The invalid-traffic verdict of an impression beacon (every impression route calls
    this). ``partner``: a beacon a partner fires (the pixel, AI beacons, the earlier API's
    impression), perhaps from one server for many users: no per-client rate, and
    ``X-Device-User-Agent`` is read. ``partner_live``: False when the partner key family
    the beacon names has no valid key left. ``served``: see ``TrafficClassifier``.
    ``reader_named_only``: the bot rule reads only the reader's browser named in
    ``X-Device-User-Agent``, never the caller's own agent (the earlier API's impression:
    that API never asked partners to name the reader, and their servers' HTTP libraries
    are on the crawler list)."""
    client = ctx.clients.of_scope(scope)
    user_agent = _user_agent(scope, partner)
    named = not reader_named_only or bool(header(scope, b"x-device-user-agent"))
    return ctx.traffic.classify_impression(
        Client(client.ip, user_agent),
        key=ctx.clients.key(client),
        bound_to=bound_to,
        binding=ctx.clients.binding_for(client, user_agent, bound_to),
        publisher_known=publisher_id is None or ctx.publishers.get(publisher_id) is not None,
        partner_live=partner_live,
        rate_limited=not partner,
        event_id=event_id,
        viewable=viewable,
        served=served,
        judge_agent=named,
    )


def click_verdict(
    ctx: Context,
    request: Request,
    *,
    bound_to: str | None,
    publisher_id: str | None,
    impression_seen: bool,
    impression_valid: bool = True,
    partner: bool = False,
    partner_live: bool = True,
    event_id: str | None = None,
) -> Verdict:
    """The invalid-traffic verdict of a click beacon (the click routes call this): the
    impression's rules, click-before-impression, a click on an impression stored as
    invalid, then the per-client click rates (not for a ``partner``'s click, fired perhaps
    from one server for many users). ``partner_live``: as for ``impression_verdict``.
    ``event_id``: the click's own id (see ``TrafficClassifier.classify_click``)."""
    client = ctx.clients.of_scope(request.scope)
    user_agent = _user_agent(request.scope, partner)
    return ctx.traffic.classify_click(
        Client(client.ip, user_agent),
        key=ctx.clients.key(client),
        bound_to=bound_to,
        binding=ctx.clients.binding_for(client, user_agent, bound_to),
        publisher_known=publisher_id is None or ctx.publishers.get(publisher_id) is not None,
        partner_live=partner_live,
        impression_seen=impression_seen,
        impression_valid=impression_valid,
        rate_limited=not partner,
        event_id=event_id,
    )


def _impression(
    ctx: Context,
    kind: ImpressionKind,
    claims: ImpressionClaims,
    keys: tuple[str, ...],
    verdict: Verdict,
) -> Impression:
    return Impression(
        kind=kind,
        dedupe_keys=keys,
        env=claims.env,
        ad_id=claims.ad_id,
        campaign_id=claims.campaign_id,
        at=ctx.clock(),
        publisher_id=claims.publisher_id,
        post_id=claims.post_id,
        slot_id=claims.slot_id,
        # Invalid: never billed; valid: billed unless the campaign reached its budget or cap.
        cpm_usd=billed_cpm(ctx, claims.campaign_id, claims.cpm_usd) if verdict.valid else None,
        invalid_reason=verdict.reason,
        key_family=claims.key_family,  # a partner's pixel: its key's report row
    )


_IMPRESSION_FIELDS = BodyFields(
    schemas.IMPRESSION_REQUEST,
    ("impression_token", "impression_id", "visible_ratio", "visible_ms"),
)


# A tag beacon's body, read: its token's claims, impression id, visible ratio and time.
_TagBody = tuple[ImpressionClaims, Any, Any, Any]


def _tag_body(ctx: Context, raw: bytes, surface: Surface) -> _TagBody:
    token, impression_id, visible_ratio, visible_ms = _IMPRESSION_FIELDS(raw)
    claims = read_claims(ctx, token, surface, "impression_token")
    return claims, impression_id, visible_ratio, visible_ms


def _tag_impression(
    ctx: Context, scope: Scope, body: _TagBody, surface: Surface, live: bool
) -> Impression:
    """The impression a tag beacon's body describes, judged (no await: the store's is the
    one suspension of a beacon). ``live``: see ``partner_live`` (a partner's pixel token
    sent here names its family too)."""
    claims, impression_id, visible_ratio, visible_ms = body
    keys = (f"tok:{claims.token_id}", f"iid:{impression_id}")
    verdict = impression_verdict(
        ctx,
        scope,
        bound_to=claims.client,
        publisher_id=claims.publisher_id,
        partner=False,
        partner_live=live,
        event_id=claims.token_id,
        viewable=viewable_report(visible_ratio, visible_ms),
    )
    return _impression(ctx, surface, claims, keys, verdict)


async def _count(ctx: Context, scope: Scope, raw: bytes, surface: Surface) -> bool:
    body = _tag_body(ctx, raw, surface)
    family = body[0].key_family  # None in the tag's own tokens: no store read for them
    live = family is None or await partner_live(ctx, family)
    return await _record(ctx, _tag_impression(ctx, scope, body, surface, live))


def _acknowledged(counted: bool) -> Response:
    return json_response({"acknowledged": True, "counted": counted})


# The two answers of an impression beacon, as the beacon lane sends them.
IMPRESSION_ANSWERS: dict[bool, Answer] = {c: answer_of(_acknowledged(c)) for c in (True, False)}


async def _impression_body(ctx: Context, request: Request) -> bytes:
    no_query(request.scope)
    return await read_body(request, max_bytes=ctx.settings.max_body_bytes, allow_text_plain=True)


async def url_impression(ctx: Context, request: Request) -> Response:
    counted = await _count(ctx, request.scope, await _impression_body(ctx, request), "url")
    return _acknowledged(counted)


async def ugc_impression(ctx: Context, request: Request) -> Response:
    if request.method == "GET":
        return await _ugc_pixel(ctx, request)
    counted = await _count(ctx, request.scope, await _impression_body(ctx, request), "ugc")
    return _acknowledged(counted)


async def direct_impression(
    ctx: Context, surface: Surface, scope: Scope, receive: Receive
) -> Answer:
    """The POST impression beacon of ``surface`` in the beacon lane's direct form: the
    route's rules, read from the ASGI scope and answered with a constant."""
    if scope["query_string"]:  # a beacon has none: the test is all it costs
        no_query(scope)
    raw = await receive_body(
        scope, receive, max_bytes=ctx.settings.max_body_bytes, allow_text_plain=True
    )
    body = _tag_body(ctx, raw, surface)
    family = body[0].key_family  # as in ``_count``, without its coroutine
    live = family is None or await partner_live(ctx, family)
    imp = _tag_impression(ctx, scope, body, surface, live)
    return IMPRESSION_ANSWERS[await _record(ctx, imp)]


async def _ugc_pixel(ctx: Context, request: Request) -> Response:
    # The pixel form fired from an ad's pixel_trackers: no body, no impression id; the
    # token alone is the dedupe key, and a replay is answered 204 like the first.
    query = strict_query(request, ["t"], required=["t"])
    claims = read_claims(ctx, query["t"], "ugc", "t")
    if claims.client is not None:
        # The tag's token, bound to the browser it was issued to: the pixel's partner rules
        # (no per-client rate, the device header) must not apply to it.
        raise BadRequest(
            "t is a token the tag was given: it reports through POST /dea/ugc/impression",
            field="t",
        )
    live = claims.key_family is None or await partner_live(ctx, claims.key_family)
    verdict = impression_verdict(
        ctx,
        request.scope,
        bound_to=claims.client,
        publisher_id=claims.publisher_id,
        partner=True,
        partner_live=live,
    )
    await _record(ctx, _impression(ctx, "ugc", claims, (f"tok:{claims.token_id}",), verdict))
    return Response(status_code=204)


async def hover(ctx: Context, request: Request) -> Response:
    body = await json_body(ctx, request, schemas.HOVER_REQUEST)
    claims = _any_surface(ctx, body["impression_token"])
    async with store_errors():
        await ledger.record_hover(
            ctx.store,
            Hover(
                token_id=claims.token_id,
                ad_id=claims.ad_id,
                at=ctx.clock(),
                hover_ms=body["hover_ms"],
                publisher_id=claims.publisher_id,
                slot_id=claims.slot_id,
            ),
        )
    return json_response({"acknowledged": True})


def _any_surface(ctx: Context, token: Any) -> ImpressionClaims:
    try:
        return read_claims(ctx, token, "url", "impression_token")
    except BadRequest:
        return read_claims(ctx, token, "ugc", "impression_token")


async def failure(ctx: Context, request: Request) -> Response:
    # A registered Origin of the publisher, and a rate per client address: a public
    # publisher id alone must not let anyone raise its failure counters.
    key = ctx.clients.key(ctx.clients.of_scope(request.scope))
    ctx.tag_limits.enforce(ctx.tag_limits.failure_client, key, "client address")
    body = await json_body(ctx, request, schemas.FAILURE_REQUEST)
    pid = body["publisher_id"]
    require_publisher_origin(ctx, request, pid)
    ad_id = None
    if "impression_token" in body:
        ad_id = _any_surface(ctx, body["impression_token"]).ad_id
    async with store_errors():
        await ledger.record_failure(
            ctx.store,
            PlacementFailure(
                publisher_id=pid,
                slot_id=body["slot_id"],
                reason=body["reason"],
                at=ctx.clock(),
                ad_id=ad_id,
                message=body.get("message", ""),
                page_url=body["page_url"],
            ),
        )
    return json_response({"acknowledged": True})


async def ai_render(ctx: Context, request: Request) -> Response:
    return await _ai(ctx, request, "render")


async def ai_view(ctx: Context, request: Request) -> Response:
    return await _ai(ctx, request, "view")


def verified_ai_beacon(ctx: Context, kind: AiBeaconKind, query: dict[str, str]) -> AiBeacon:
    """The AI beacon the query describes; a 400 counting nothing when it is not one the edge
    signed (``invalid_signature``), or when it is but has expired (``invalid_token``, the
    answer to an expired impression token: the URL was genuine, its time is over)."""
    assert ctx.signer is not None  # set at start-up, before any request
    try:
        return verify_ai_beacon(ctx.signer, kind, query, now=ctx.clock())
    except ExpiredBeacon as exc:
        raise BadRequest(str(exc), field="issued_at", code="invalid_token") from None
    except InvalidToken as exc:
        raise BadRequest(str(exc), field=exc.field or "sig", code="invalid_signature") from None


async def _ai(ctx: Context, request: Request, kind: AiBeaconKind) -> Response:
    query = strict_query(request, schemas.AI_BEACON_QUERY)
    for name in ("message_id", "conversation_id"):
        if name in query and control_character(query[name]) is not None:
            raise BadRequest(f"{name} must not contain control characters", field=name)
    beacon = verified_ai_beacon(ctx, kind, query)
    family = beacon.key_family
    live = family is None or await partner_live(ctx, family)
    ad_id, campaign_id, pricing = ai_attribution(ctx, beacon.ad_id, beacon.pricing)
    cpm = _cpm_bid(pricing)
    verdict = impression_verdict(
        ctx, request.scope, bound_to=None, publisher_id=None, partner=True, partner_live=live
    )
    if kind == "view" and cpm is not None and verdict.valid:
        # One view, one price: a message asked for again across a pricing change hands out
        # two sets of URLs for one view. When its click, fired first, was judged under CPC
        # or CPA (it billed, or its conversion will), the view bills nothing.
        try:
            clicked = await ctx.store.valid_click_pricing(beacon.click_impression_key)
        except StoreUnavailable:
            raise store_unavailable() from None
        if clicked in ("cpc", "cpa"):
            cpm = None
    imp = Impression(
        kind="ai-render" if kind == "render" else "ai-view",
        dedupe_keys=(beacon.impression_key(kind),),  # per message in its conversation
        env=ctx.settings.env,
        ad_id=ad_id,
        campaign_id=campaign_id,
        at=ctx.clock(),
        post_id=beacon.message_id,
        # A CPM ad is billed on its viewable impression only, never twice per message.
        cpm_usd=billed_cpm(ctx, campaign_id, cpm) if kind == "view" and verdict.valid else None,
        invalid_reason=verdict.reason,
        key_family=beacon.key_family,  # the serving partner's report row
    )
    await _record(ctx, imp)
    return Response(status_code=204)


def ai_attribution(
    ctx: Context, number: int, sealed: PricingModel | None = None
) -> tuple[str, str | None, PricingModel | None]:
    """(catalogue ad id, campaign id, pricing) of an AI integer ad id, when known. The
    pricing is the one ``sealed`` in the beacon URL (the live ad set's for a URL issued
    before pricing was sealed), or None for an ad no longer in the live catalogue: a tag
    token carries its campaign, an AI URL only the ad's number, so which campaign a retired
    ad belonged to is known only to a process that served it, and whether a beacon bills
    must not depend on which process answers."""
    matcher = ctx.matcher
    placement = matcher.catalogue.placement_by_number(number) if matcher is not None else None
    if placement is None:
        # Signed by us, so genuine, but the catalogue changed since: the ad and campaign of
        # a catalogue this process served before (counted, never billed), else only the
        # number is known.
        retired = ctx.live_catalogue.retired.get(number)
        if retired is not None:
            return retired[0], retired[1], None
        log.warning("AI beacon for ad number %d not in the catalogue", number)
        return f"ai-{number}", None, None
    pricing = sealed if sealed is not None else placement.ad_set.pricing_model
    return placement.ad.id, placement.campaign.id, pricing


def _cpm_bid(pricing: PricingModel | None) -> float | None:
    return pricing.bid_amount if pricing is not None and pricing.type == "cpm" else None
