"""POST /v1/ad-manager/conversions: an advertiser's server reports a conversion of a click.

Authenticated with an Ad Manager key (``X-API-Key``), the same key that reads the
catalogue: a conversion moves money, so it comes from the account's server, never from a
browser. The body names the ``click_id`` the advertiser received through the ``{click_id}``
macro of its own ``click_through_url``. Rules:

- an unknown click id (never stored, or forged) is refused: 404 ``unknown_click``;
- an invalid click (no impression, a duplicate) is refused: 422 ``invalid_click``;
- a click id is unique per impression, not globally (an AI partner's id is its own, not
  signed): when it names a valid click and invalid ones (say another signed URL fired with
  it first), the valid one converts; when it names two valid clicks of different
  impressions, nothing says which the conversion belongs to: 422 ``ambiguous_click``,
  nothing billed;
- a conversion is attributed to its click within ``EDGE_CONVERSION_WINDOW_DAYS`` (30 by
  default) of the click; a later report is refused: 422 ``conversion_window_closed``;
- one conversion per click: a second report answers ``counted: false`` and bills nothing;
- a conversion of a click on an ad served as CPA bills the bid its ad set had when the ad
  was served (kept with the click), in the same commit, whatever the live catalogue says
  now, unless the campaign has reached its budget or today's cap or is no longer in the
  live catalogue; an ad served under another pricing model counts it without billing (a
  click stored before clicks kept their pricing is priced from the live catalogue).

Production only: the sandbox bills nothing, so it has no conversions.
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge import ledger
from edge.context import Context
from edge.delivery import schemas
from edge.delivery.events import campaign_of, pricing_as_served
from edge.delivery.requests import store_errors
from edge.delivery.validate import validate
from edge.errors import NotFound, Unprocessable
from edge.http import json_response, no_query, read_json
from edge.openapi import error_for, error_response
from edge.openapi import json_body as json_doc
from edge.partner.guard import admit
from edge.store import Conversion

PATH = "/v1/ad-manager/conversions"


def routes(ctx: Context) -> list[BaseRoute]:
    if not ctx.settings.is_production:
        return []
    return [Route(PATH, partial(convert, ctx), methods=["POST"])]


async def convert(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ad-manager")
    no_query(request.scope)
    raw = await read_json(request, max_bytes=ctx.settings.max_body_bytes)
    validate(raw, schemas.CONVERSION_REQUEST)
    body = cast(dict[str, Any], raw)
    async with store_errors():
        # Valid clicks come first: two are enough to tell one valid click from several.
        clicks = await ctx.store.clicks_by_id(body["click_id"], ctx.settings.env, 2)
    if not clicks:
        raise NotFound("no click with this click_id", field="click_id", code="unknown_click")
    click = clicks[0]
    if click.invalid_reason is not None:
        raise Unprocessable(
            f"this click is invalid ({click.invalid_reason}) and cannot convert",
            field="click_id",
            code="invalid_click",
        )
    if len(clicks) > 1 and clicks[1].invalid_reason is None:
        raise Unprocessable(
            "valid clicks of more than one ad or message carry this click_id; "
            "which one converted cannot be told",
            field="click_id",
            code="ambiguous_click",
        )
    window = ctx.settings.conversion_window_days * 86_400
    if ctx.clock() - click.at > window:
        raise Unprocessable(
            f"this click is more than {ctx.settings.conversion_window_days} days old: "
            "a conversion is attributed to a click within that window only",
            field="click_id",
            code="conversion_window_closed",
        )
    # Priced as the click's ad was served (kept with the click; a click stored before
    # clicks kept it: the live ad set's); the budget and cap are the live campaign's.
    pricing = pricing_as_served(ctx, click.pricing, click.ad_id)
    # Reports of one click's conversion that this process takes at once go in turn: only
    # one can count, so only one holds a charge (``Turns``).
    event = f"conversion {click.impression_key} {click.click_id}"
    async with ctx.spend.turns.turn(event), store_errors():
        if ctx.spend.turns.counted(event):  # reported here a moment ago
            counted, charge = False, None
        else:
            # The decision and the hold of its charge (``spend.bill``) with no await
            # between: conversions in flight together each see the others' charges.
            charge = ledger.conversion_charge(
                pricing, ctx.spend.headroom(campaign_of(ctx, click.campaign_id))
            )
            conversion = Conversion(click, ctx.clock(), body.get("value_usd"), charge)
            counted = await ctx.spend.bill(
                click.campaign_id,
                charge,
                conversion.at,
                ledger.record_conversion(ctx.store, conversion),
            )
            if counted:
                ctx.spend.turns.remember(event)
    billed = charge if counted and charge else 0.0
    return json_response(
        {"acknowledged": True, "counted": counted, "billed_usd": billed},
        headers={**admission.headers, "Cache-Control": "no-store"},
    )


def openapi(ctx: Context) -> dict[str, Any]:
    if not ctx.settings.is_production:
        return {}
    content = {"schema": schemas.CONVERSION_REQUEST}
    op = {
        "summary": "Report a conversion of a click (CPA billing)",
        "description": __doc__,
        "tags": ["ad-manager"],
        "security": [{"ApiKey": []}],
        "requestBody": {"required": True, "content": {"application/json": content}},
        "responses": {
            "200": json_doc(schemas.CONVERSION_RESPONSE),
            **{str(s): error_for(s) for s in (400, 401, 403, 413, 415, 429, 503)},
            "404": error_response("unknown_click: no click with this click_id (or a forged one)"),
            "422": error_response(
                "invalid_click: the click is invalid and cannot "
                "convert, ambiguous_click: valid clicks of more than one ad or message "
                "carry this click_id, or conversion_window_closed: the click is older than "
                "the attribution window"
            ),
        },
    }
    return {"paths": {PATH: {"post": op}}}
