"""Click beacons: the tag's (page and UGC slots), the click URL of a partner's UGC ad, and
the AI product's signed click URL.

Every click with a genuine token or signature is stored before its 2xx, valid or not; what
makes it billable is decided in the edge (here and in ``edge.ledger``), never in the store:

- a replay (a ``click_id`` already stored for the same impression) counts nothing. A click
  id is unique per impression, not globally: the AI partner's id is not signed, so a
  signed click URL fired with ids of another ad, message, conversation or partner must not
  make that one's genuine clicks replays (the tag's id is its own random id per rendering);
- the invalid-traffic rules judge it (``edge.ivt``: a revoked partner's token or URL, bot
  user agents, a token used by another client, per-client click rates), and a click whose
  impression was never stored is invalid (``click_before_impression``): the ad was not
  seen viewable (the tag reports an impression after 1 s at 50%), so a click before that
  mark, or without any rendering, is not paid for and does not record the impression;
- a second click on one impression is invalid (``duplicate``): at most one billable click
  per impression, whatever the number of click ids;
- a valid click of an ad served as CPC bills the bid its ad set had when the ad was
  served (sealed in the token or signed URL), in the same commit, whatever the live
  catalogue says now, unless the campaign has reached its budget or today's cap or is no
  longer in the live catalogue. The click keeps that pricing, which its conversion bills
  under. A token or URL issued before pricing was sealed is priced from the live
  catalogue.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from starlette.requests import Request
from starlette.responses import Response

from edge import ledger
from edge.beacons import ImpressionClaims, Surface, ugc_derived_click_id
from edge.context import Context
from edge.delivery import schemas
from edge.delivery.events import (
    ai_attribution,
    campaign_of,
    click_verdict,
    partner_live,
    pricing_as_served,
    read_claims,
    verified_ai_beacon,
)
from edge.delivery.requests import json_body, store_errors, strict_query
from edge.errors import BadRequest
from edge.http import json_response
from edge.store import Click, ClickConflict
from matcher.types import PricingModel

_CLICK_ID = re.compile(r"[A-Za-z0-9_\-]{8,64}")
# The edge's own click ids (``ugc_derived_click_id``, ``AiBeacon.derived_click_id``) begin
# so. An id sent in may not, unless it is the one the edge derives for that very click URL:
# a UGC ad's derived id can be computed from its public token, so anyone could otherwise
# file a second valid click under it (a tag click, or an AI click URL with &click_id=) and
# make the partner's conversion ambiguous, billing nothing.
RESERVED_CLICK_PREFIXES = ("ugc-", "ai-")
_RESERVED = "click_id: ids beginning ugc- or ai- are the edge's own; send your own id or none"
# The pricing a click is judged and kept under when its view billed as CPM: it bills
# nothing, and neither does its conversion (bid 0: the view's own bid billed the view).
_BILLED_AS_CPM = PricingModel("cpm", 0.0)


async def url_click(ctx: Context, request: Request) -> Response:
    return await _tag_click(ctx, request, "url")


async def ugc_click(ctx: Context, request: Request) -> Response:
    if request.method == "GET":
        return await _ugc_click_url(ctx, request)
    return await _tag_click(ctx, request, "ugc")


async def _tag_click(ctx: Context, request: Request, surface: Surface) -> Response:
    body = await json_body(ctx, request, schemas.CLICK_REQUEST)
    if body["click_id"].startswith(RESERVED_CLICK_PREFIXES):  # the tag's ids never do
        raise BadRequest(_RESERVED, field="click_id")
    claims = read_claims(ctx, body["impression_token"], surface, "impression_token")
    live = claims.key_family is None or await partner_live(ctx, claims.key_family)
    judge = _Judge(request, claims.client, claims.publisher_id, live=live)
    click = _token_click(ctx, claims, body["click_id"], surface)
    counted = await record_click(judge, ctx, click, (click.impression_key,))
    return json_response({"acknowledged": True, "counted": counted})


def _token_click(ctx: Context, claims: ImpressionClaims, click_id: str, surface: Surface) -> Click:
    """A click on the rendering an impression token was issued for (its dedupe key is the
    impression's), priced as that token sealed it."""
    return Click(
        click_id=click_id,
        impression_key=f"tok:{claims.token_id}",
        kind=surface,
        env=claims.env,
        ad_id=claims.ad_id,
        campaign_id=claims.campaign_id,
        at=ctx.clock(),
        publisher_id=claims.publisher_id,
        slot_id=claims.slot_id,
        pricing=claims.served_pricing,
        key_family=claims.key_family,
    )


async def _ugc_click_url(ctx: Context, request: Request) -> Response:
    """``click_url`` of a partner's UGC ad (``/v1/ugc/process``), fired by the partner when a
    person clicks the ad, perhaps from its server for many users: judged as the AI click URL
    is (no per-client click rate, the user's browser named in X-Device-User-Agent). Its
    impression is the ad's pixel, fired with the same token."""
    query = strict_query(request, schemas.UGC_CLICK_QUERY, required=["t"])
    claims = read_claims(ctx, query["t"], "ugc", "t")
    if claims.client is not None:
        # The tag's token, bound to the browser it was issued to: the partner's rules (no
        # per-client rate, the device header) must not apply to its clicks.
        raise BadRequest(
            "t is a token the tag was given: its clicks report through POST /dea/ugc/click",
            field="t",
        )
    # One id per token without the partner's own: a refired URL is a replay.
    click_id = _click_id(query, lambda: ugc_derived_click_id(claims.token_id))
    click = _token_click(ctx, claims, click_id, "ugc")
    live = claims.key_family is None or await partner_live(ctx, claims.key_family)
    judge = _Judge(request, None, claims.publisher_id, partner=True, live=live)
    await record_click(judge, ctx, click, (click.impression_key,))
    return Response(status_code=204)


def _click_id(query: dict[str, str], derive: Callable[[], str]) -> str:
    """The partner's ``click_id`` from a click URL's query, checked, else ``derive()``'s (a
    hash: computed only when the partner names none, or names one of the edge's own)."""
    click_id = query.get("click_id")
    if click_id is None:
        return derive()
    if not _CLICK_ID.fullmatch(click_id):
        raise BadRequest("click_id is 8 to 64 of A-Z a-z 0-9 _ -", field="click_id")
    if click_id.startswith(RESERVED_CLICK_PREFIXES) and click_id != derive():
        raise BadRequest(_RESERVED, field="click_id")
    return click_id


async def ai_click(ctx: Context, request: Request) -> Response:
    query = strict_query(request, schemas.AI_CLICK_QUERY)
    beacon = verified_ai_beacon(ctx, "click", query)
    # One id per ad and message without the partner's own: a refired URL is a replay.
    click_id = _click_id(query, lambda: beacon.derived_click_id)
    live = beacon.key_family is None or await partner_live(ctx, beacon.key_family)
    ad_id, campaign_id, pricing = ai_attribution(ctx, beacon.ad_id, beacon.pricing)
    seen = (beacon.impression_key("render"), beacon.impression_key("view"))
    await record_click(
        _Judge(request, None, None, partner=True, live=live),
        ctx,
        Click(
            click_id=click_id,
            impression_key=beacon.click_impression_key,
            kind="ai",
            env=ctx.settings.env,
            ad_id=ad_id,
            campaign_id=campaign_id,
            at=ctx.clock(),
            pricing=pricing,
            key_family=beacon.key_family,
        ),
        seen,
    )
    return Response(status_code=204)


@dataclass(frozen=True, slots=True)
class _Judge:
    """What the invalid-traffic rules need of the click's request."""

    request: Request
    bound_to: str | None  # the client the token was issued to
    publisher_id: str | None
    # Fired by a partner (an AI or UGC ad's click URL), perhaps from one server for many
    # users: no per-client click rate (one valid click per impression is the cap), and the
    # user's browser may be named in X-Device-User-Agent.
    partner: bool = False
    # False when the partner key family its token or URL names has no valid key left.
    live: bool = True


async def record_click(
    judge: _Judge, ctx: Context, click: Click, impression_keys: tuple[str, ...]
) -> bool:
    """Judge the click, store it durably, and count its charge toward the campaign's spend.

    ``impression_keys``: dedupe keys of which any one stored means the impression was (and
    any one stored valid, that it was valid). A replay (its ``click_id`` stored for its
    impression already) is answered before any rule judges it: it counts nothing and
    spends nothing of the client's click allowance. Clicks of one impression that this
    process takes at once are judged in turn (``Turns``): copies of one click share one
    verdict, and neither they nor a second click of the impression hold a charge that only
    one click can bill.
    """
    copy = f"click {click.impression_key} {click.click_id}"
    async with ctx.spend.turns.turn(f"click {click.impression_key}"):
        if ctx.spend.turns.counted(copy):
            return False  # a copy of a click that counted here a moment ago
        counted = await _judge_and_store(judge, ctx, click, impression_keys)
        if counted:
            ctx.spend.turns.remember(copy)
    return counted


async def _judge_and_store(
    judge: _Judge, ctx: Context, click: Click, impression_keys: tuple[str, ...]
) -> bool:
    async with store_errors():
        # A partner's click (a click URL) spends no per-client allowance: its replay
        # needs no lookup, the store's uniqueness drops it.
        if not judge.partner and await ctx.store.click_stored(click.click_id, click.impression_key):
            return False
        reason, view_billed = await _invalid_reason(
            judge, ctx, click.impression_key, impression_keys, click.click_id
        )
        if view_billed:
            # One view, one price: its impression billed as CPM, so its click and conversion
            # bill nothing, whatever the click's own URL sealed (an AI message served twice
            # across a pricing change hands out two sets of URLs for one view).
            click = replace(click, pricing=_BILLED_AS_CPM)
        judged = _with_charge(ctx, click, reason)
        try:
            counted = await _store(ctx, judged)
        except ClickConflict:  # another click of this impression committed first
            counted = await _store(ctx, _with_charge(ctx, click, "duplicate"))
    return counted


def _store(ctx: Context, judged: Click) -> Awaitable[bool]:
    """Store the judged click, its charge held against the campaign's headroom from now
    until the commit (called right after the decision, with no await between: clicks in
    flight together each see the others' charges), then counted as its spend; the hold
    of a replay or a failed write is dropped."""
    return ctx.spend.bill(
        judged.campaign_id, judged.charge_usd, judged.at, ledger.record_click(ctx.store, judged)
    )


async def _invalid_reason(
    judge: _Judge,
    ctx: Context,
    impression_key: str,
    impression_keys: tuple[str, ...],
    click_id: str,
) -> tuple[str | None, bool]:
    """(the click's invalid reason or None, whether its view billed as CPM)."""
    # Seen: any of the keys names a stored impression; valid: one of them a valid one (an
    # AI ad's render may be a bot's and its view not); billed: a valid one billed (the AI
    # view bills, its render does not).
    seen = valid = billed = False
    for key in impression_keys:
        stored = await ctx.store.stored_impression(key)
        if stored is not None:
            seen = True
            if stored.invalid_reason is None:
                valid = True
                billed = billed or stored.billed
    verdict = click_verdict(
        ctx,
        judge.request,
        bound_to=judge.bound_to,
        publisher_id=judge.publisher_id,
        impression_seen=seen,
        impression_valid=valid,
        partner=judge.partner,
        partner_live=judge.live,
        # Copies of one click in flight together: one verdict, the allowance spent once.
        event_id=f"click:{impression_key}:{click_id}",
    )
    if verdict.reason is not None:
        return verdict.reason, billed
    if await ctx.store.valid_click_stored(impression_key):
        return "duplicate", billed
    return None, billed


def _with_charge(ctx: Context, click: Click, reason: str | None) -> Click:
    # Priced as the ad was served (its token's sealed pricing; a token issued before that
    # was sealed: the live ad set's), kept with the click for its conversion; the budget
    # and cap are the live campaign's.
    pricing = pricing_as_served(ctx, click.pricing, click.ad_id)
    judged = replace(click, invalid_reason=reason, pricing=pricing)
    headroom = ctx.spend.headroom(campaign_of(ctx, click.campaign_id))
    return replace(judged, charge_usd=ledger.click_charge(judged, pricing, headroom))
