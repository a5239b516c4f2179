"""GET /v1/ad-manager/impressions: what the edge recorded for given impression ids.

The tag makes one ``impression_id`` per rendered ad and sends it with the viewable beacon
(the ``viewable`` event's ``detail`` carries it too), so the ids a page produced name the
events of that page view. QA tests read them back here, over HTTP with an Ad Manager key,
to check that a staging or production edge counted each viewable ad exactly once, for the
right slot and ad, without reading the edge's database. Both environments.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.errors import BadGateway, BadRequest
from edge.http import json_response
from edge.openapi import json_body
from edge.partner.guard import admit
from edge.partner.schemas import operation, ref
from edge.store import StoreUnavailable

PATH = "/v1/ad-manager/impressions"
MAX_IDS = 50
_IMPRESSION_ID = re.compile(r"[A-Za-z0-9_\-]{8,64}")  # as the tag's beacons accept them
# One query value: an id, or ids separated by commas. Anchored, since an OpenAPI pattern
# matches anywhere in the value unless told otherwise.
_VALUE_PATTERN = rf"^{_IMPRESSION_ID.pattern}(,{_IMPRESSION_ID.pattern})*$"


def impression_ids(request: Request) -> list[str]:
    """The ``impression_id`` values (repeated or comma-separated), checked; else a 400."""
    for name in request.query_params:
        if name != "impression_id":
            raise BadRequest(
                f"{name} is not a known query parameter (expected impression_id)", field=name
            )
    # An empty value or an empty part between commas is refused like any other bad id.
    ids = [
        part for value in request.query_params.getlist("impression_id") for part in value.split(",")
    ]
    if not ids:
        raise BadRequest("give at least one impression_id", field="impression_id")
    if len(ids) > MAX_IDS:
        raise BadRequest(f"at most {MAX_IDS} impression ids per call", field="impression_id")
    for ident in ids:
        if not _IMPRESSION_ID.fullmatch(ident):
            raise BadRequest(
                f"{ident[:80]!r} is not an impression id (8 to 64 of A-Z a-z 0-9 _ -)",
                field="impression_id",
            )
    return list(dict.fromkeys(ids))


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="milliseconds")


def routes(ctx: Context) -> list[BaseRoute]:
    return [Route(PATH, partial(impressions, ctx), methods=["GET"])]


async def impressions(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ad-manager")
    ids = impression_ids(request)
    try:
        found = await ctx.store.impressions_by_tag_id(ids)
    except StoreUnavailable:
        raise BadGateway(
            "the event store is unavailable; retry shortly", headers={"Retry-After": "1"}
        ) from None
    items = []
    for iid in ids:
        if iid in found:
            record = dict(found[iid])
            at = float(record.pop("at"))
            items.append({"impression_id": iid, **record, "recorded_at": _iso(at)})
    body = {"impressions": items, "missing": [i for i in ids if i not in found]}
    return json_response(body, headers={**admission.headers, "Cache-Control": "no-store"})


IMPRESSION = {
    "type": "object",
    "required": ["impression_id", "kind", "ad_id", "invalid_reason", "recorded_at"],
    "properties": {
        "impression_id": {"type": "string", "description": "As the tag made it"},
        "kind": {
            "enum": ["url", "ugc"],
            "description": "url: a page-level slot; ugc: a slot inside a post",
        },
        "ad_id": {"type": "string", "description": "The catalogue ad's id"},
        "campaign_id": {"type": ["string", "null"]},
        "publisher_id": {"type": ["string", "null"]},
        "slot_id": {"type": ["string", "null"]},
        "post_id": {"type": ["string", "null"]},
        "invalid_reason": {
            "type": ["string", "null"],
            "description": "null: a valid impression, counted (and billed where it bills); "
            "else why the edge classified it as invalid traffic (stored, never counted)",
        },
        "recorded_at": {"type": "string", "format": "date-time"},
    },
}


def openapi(ctx: Context) -> dict[str, Any]:
    op = operation(
        ctx,
        "Viewable impressions the edge recorded, by the tag's impression ids",
        json_body(
            {
                "type": "object",
                "required": ["impressions", "missing"],
                "properties": {
                    "impressions": {"type": "array", "items": ref("RecordedImpression")},
                    "missing": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Ids the edge has not recorded (not yet, or never)",
                    },
                },
            },
            "One item per recorded id, in the order asked; each id is counted at most once",
        ),
        (400, 401, 429, 502),
        tag="ad-manager",
        params=[
            {
                "name": "impression_id",
                "in": "query",
                "required": True,
                "style": "form",
                "explode": True,
                "schema": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_IDS,
                    "items": {"type": "string", "pattern": _VALUE_PATTERN},
                },
                "description": "The `impression_id` of the tag's `viewable` events (repeat "
                f"the parameter or separate with commas; at most {MAX_IDS} ids in all)",
            }
        ],
    )
    op["description"] = (
        "For QA of a page: the tag's `viewable` event carries the `impression_id` it sent "
        "with the beacon, so the ids of one page view name that page view's impressions. "
        "Reads what is committed: an id appears once its beacon was acknowledged."
    )
    return {
        "paths": {PATH: {"get": op}},
        "components": {"schemas": {"RecordedImpression": IMPRESSION}},
    }
