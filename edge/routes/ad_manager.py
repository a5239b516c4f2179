"""GET /v1/ad-manager/campaigns and /v1/ad-manager/ad-sets.

Both environments, same paths: production lists the live catalogue, the sandbox
its static one. Items have the catalogue file's fields; an ad set also names its
``campaign_id``. Pages are ordered by id and the cursor is the last id seen, so a
catalogue reload between pages neither repeats nor skips what is still there.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Sequence
from functools import partial
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.errors import BadRequest
from edge.http import json_response
from edge.partner import schemas_admin
from edge.partner.fields import control_character
from edge.partner.guard import admit
from edge.partner.listing import Listing

CAMPAIGNS = "/v1/ad-manager/campaigns"
AD_SETS = "/v1/ad-manager/ad-sets"
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_CURSOR = re.compile(r"[A-Za-z0-9_-]{1,1400}")  # base64url of an id, no padding


def encode_cursor(kind: str, last_id: str) -> str:
    """The cursor after ``last_id`` in the listing ``kind`` (its path's last part): the
    kind travels inside, so a cursor of one listing is refused by the other rather than
    read as a position in it (a silent restart, or an empty last page)."""
    return base64.urlsafe_b64encode(f"{kind}:{last_id}".encode()).rstrip(b"=").decode()


def decode_cursor(kind: str, cursor: str) -> str:
    """The id a cursor of ``encode_cursor`` for ``kind`` holds; any other text (not
    base64url, not the exact form this API writes, another listing's, or no printable id
    inside) is a 400."""
    try:
        if not _CURSOR.fullmatch(cursor):
            raise ValueError(cursor)
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        last_id = text.removeprefix(f"{kind}:")
        if last_id == text or not last_id.isprintable():
            raise ValueError(cursor)
        if encode_cursor(kind, last_id) != cursor:
            raise ValueError(cursor)
    except (binascii.Error, ValueError):
        raise BadRequest("cursor is not one this API returned", field="cursor") from None
    return last_id


def page_params(request: Request, kind: str, allowed: Sequence[str]) -> tuple[int, str | None]:
    """(limit, id after which the page starts) from the query string of listing ``kind``."""
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name not in allowed:
            raise BadRequest(
                f"{name} is not a known query parameter (expected {', '.join(allowed)})",
                field=name,
            )
        if name in seen:  # which one counts would be a guess
            raise BadRequest(f"query parameter {name!r} is repeated", field=name)
        seen.add(name)
    raw = request.query_params.get("limit")
    limit = DEFAULT_LIMIT
    if raw is not None:
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:
            raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
        limit = int(raw)
    cursor = request.query_params.get("cursor")
    return limit, decode_cursor(kind, cursor) if cursor else None


def paginate(
    kind: str,
    items: Sequence[dict[str, Any]],
    ids: Sequence[str],
    limit: int,
    after: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of id-sorted ``items`` starting after the id ``after``; the next cursor."""
    start = bisect.bisect_right(ids, after) if after is not None else 0
    page = list(items[start : start + limit])
    more = start + limit < len(items)
    return page, encode_cursor(kind, page[-1]["id"]) if more and page else None


def routes(ctx: Context) -> list[BaseRoute]:
    return [
        Route(CAMPAIGNS, partial(campaigns, ctx), methods=["GET"]),
        Route(AD_SETS, partial(ad_sets, ctx), methods=["GET"]),
    ]


async def listing(ctx: Context) -> Listing:
    """The listing of the loaded catalogue, built on first use (and again after a reload)."""
    assert ctx.matcher is not None  # set at start-up, before any request
    catalogue = ctx.matcher.catalogue
    built = ctx.ad_listing
    if built is None or built.catalogue is not catalogue:
        built = ctx.ad_listing = await anyio.to_thread.run_sync(Listing, catalogue)
    return built


def _answer(headers: dict[str, str], body: dict[str, Any]) -> Response:
    return json_response(body, headers={**headers, "Cache-Control": "no-store"})


async def campaigns(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ad-manager")
    limit, after = page_params(request, "campaigns", ("limit", "cursor"))
    lst = await listing(ctx)
    page, cursor = paginate("campaigns", lst.campaigns, lst.campaign_ids, limit, after)
    return _answer(admission.headers, {"campaigns": page, "next_cursor": cursor})


async def ad_sets(ctx: Context, request: Request) -> Response:
    admission = await admit(ctx, request, "ad-manager")
    limit, after = page_params(request, "ad-sets", ("limit", "cursor", "campaign_id"))
    lst = await listing(ctx)
    items, ids = lst.ad_sets, lst.ad_set_ids
    wanted = request.query_params.get("campaign_id")
    if wanted is not None:
        if not wanted or len(wanted) > 256 or control_character(wanted) is not None:
            raise BadRequest(
                "campaign_id must be 1 to 256 characters without control characters",
                field="campaign_id",
            )
        items = [s for s in items if s["campaign_id"] == wanted]
        ids = [s["id"] for s in items]
    page, cursor = paginate("ad-sets", items, ids, limit, after)
    return _answer(admission.headers, {"ad_sets": page, "next_cursor": cursor})


def openapi(ctx: Context) -> dict[str, Any]:
    return schemas_admin.ad_manager_doc(ctx, CAMPAIGNS, AD_SETS, DEFAULT_LIMIT, MAX_LIMIT)
