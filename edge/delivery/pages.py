"""POST /dea/url/keywords and /dea/url/placements: the tag asks for ads for a page's slots.

Both call the same in-process matcher as /v1 (``edge.matching.match``) with the page's (or
the post's) text as content and the page URL (or post id) as the suppression thread.
Placements that share text and post are matched together, one distinct ad per slot, best
first; an unsafe text (news, tragedy) fills nothing. Each filled slot carries a signed,
single-use impression token for the beacon of its surface ("url" page slots, "ugc" posts).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from edge import matching
from edge.beacons import issue_impression_token
from edge.client_ip import request_client_ip
from edge.context import Context
from edge.counters import count_placements
from edge.creative import cpm_usd, creative
from edge.delivery import schemas
from edge.delivery.requests import json_body
from edge.errors import BadRequest, Forbidden
from edge.geo import locate_ip
from edge.http import json_response
from edge.store.events import normalise_origin
from matcher.types import GeoSignal, MatchRequest, MatchResult, ScoredAd

MAX_KEYWORDS = 20


@dataclass(frozen=True, slots=True)
class _Group:
    """Slots filled from one match: same text, same post (or page)."""

    content: str
    post_id: str | None
    slot_ids: tuple[str, ...]


async def keywords(ctx: Context, request: Request) -> Response:
    body = await json_body(ctx, request, schemas.KEYWORDS_REQUEST)
    pid = _publisher(ctx, request, body["publisher_id"])
    content = _join(body.get("title", ""), body.get("text", ""))
    group = _Group(content, None, tuple(body["slots"]))
    geo = _geo(ctx, request)
    result = await _match(ctx, group, body["page_url"], geo)
    placements = _fill(ctx, group, result, pid)
    count_placements(ctx.counters, pid, placements)
    keywords: list[str] = []
    for scored in result.ads if result else ():
        keywords.extend(k for k in scored.placement.ad.keywords if k not in keywords)
    return json_response(
        {
            "safe": not (result is not None and result.reason == "unsafe"),
            "keywords": keywords[:MAX_KEYWORDS],
            "placements": placements,
        }
    )


async def placements(ctx: Context, request: Request) -> Response:
    body = await json_body(ctx, request, schemas.PLACEMENTS_REQUEST)
    pid = _publisher(ctx, request, body["publisher_id"])
    groups: dict[tuple[str, str | None], list[str]] = {}
    slot_ids = [p["slot_id"] for p in body["placements"]]
    for i, slot_id in enumerate(slot_ids):
        if slot_id in slot_ids[:i]:
            raise BadRequest(f"slot {slot_id!r} is listed twice", field=f"placements[{i}].slot_id")
    for p in body["placements"]:
        key = (_join(p.get("title", ""), p["text"]), p.get("post_id"))
        groups.setdefault(key, []).append(p["slot_id"])
    geo = _geo(ctx, request)
    page_url = body["page_url"]
    todo = [_Group(content, post, tuple(slots)) for (content, post), slots in groups.items()]
    results = await asyncio.gather(*(_match(ctx, g, page_url, geo) for g in todo))
    by_slot: dict[str, dict[str, Any]] = {}
    for group, result in zip(todo, results, strict=True):
        for placement in _fill(ctx, group, result, pid):
            by_slot[placement["slot_id"]] = placement
    ordered = [by_slot[p["slot_id"]] for p in body["placements"]]
    count_placements(ctx.counters, pid, ordered)
    return json_response({"placements": ordered})


# -- helpers ----------------------------------------------------------------------------------


def _publisher(ctx: Context, request: Request, pid: str) -> str:
    reg = ctx.publishers
    if reg.get(pid) is None:
        raise Forbidden(
            f"publisher {pid!r} is not registered",
            field="publisher_id",
            code="unknown_publisher",
        )
    origin = request.headers.get("origin")
    # A browser names the page's origin; it must be one of this publisher's (another
    # site cannot spend a publisher's id). The edge's own pages (the demo) are allowed.
    if (
        origin is not None
        and origin != _origin_of(ctx.settings.base_url)
        and not reg.publisher_allows(pid, origin)
    ):
        raise Forbidden(
            f"origin {origin!r} is not registered for publisher {pid!r}",
            field="Origin",
            code="origin_not_allowed",
        )
    return pid


def _geo(ctx: Context, request: Request) -> GeoSignal | None:
    # The tag runs in the end user's browser, so the client address is the user's.
    return locate_ip(ctx.geo, request_client_ip(request.scope, ctx.settings.trusted_proxies))


async def _match(
    ctx: Context, group: _Group, page_url: str, geo: GeoSignal | None
) -> MatchResult | None:
    if not group.content.strip():
        return None  # nothing to match: every slot stays empty
    request = MatchRequest(
        product="ugc",
        content=group.content,
        thread_id=group.post_id or page_url,
        post_id=group.post_id,
        geo=geo,
        max_ads=len(group.slot_ids),
    )
    return await matching.match(ctx, request)


def _fill(
    ctx: Context, group: _Group, result: MatchResult | None, pid: str
) -> list[dict[str, Any]]:
    ads = list(result.ads) if result is not None and result.outcome == "matched" else []
    reason, retry = _why_empty(result)
    out = []
    unique: dict[str, ScoredAd] = {}  # one distinct ad per slot, best first
    for scored in ads:
        unique.setdefault(scored.placement.ad.id, scored)
    best = list(unique.values())
    for i, slot_id in enumerate(group.slot_ids):
        placement: dict[str, Any] = {"slot_id": slot_id}
        if group.post_id is not None:
            placement["post_id"] = group.post_id
        if i < len(best):
            placement["ad"] = _ad(ctx, best[i], pid, group.post_id, slot_id)
        else:
            placement["ad"] = None
            placement["reason"] = reason if not best else "no_relevant_demand"
            if retry is not None and not best:
                placement["retry_after_seconds"] = retry
        out.append(placement)
    return out


def _ad(
    ctx: Context, scored: ScoredAd, pid: str, post_id: str | None, slot_id: str
) -> dict[str, Any]:
    p = scored.placement
    assert ctx.signer is not None  # set at start-up
    token, _ = issue_impression_token(
        ctx.signer,
        surface="ugc" if post_id is not None else "url",
        env=ctx.settings.env,
        ad_id=p.ad.id,
        campaign_id=p.campaign.id,
        now=ctx.clock(),
        cpm_usd=cpm_usd(ctx, p),
        publisher_id=pid,
        post_id=post_id,
        slot_id=slot_id,
    )
    return {
        "ad_id": p.ad.id,
        **creative(p),
        "description": p.ad.description,
        "impression_token": token,
        "relevancy_score": round(min(1.0, max(0.0, scored.relevancy_score)), 4),
    }


@functools.cache
def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return normalise_origin(f"{parts.scheme}://{parts.netloc}")


def _join(title: str, text: str) -> str:
    return "\n\n".join(part for part in (title.strip(), text.strip()) if part)


def _why_empty(result: MatchResult | None) -> tuple[str, int | None]:
    """The placement ``reason`` (a closed set, schemas.NO_AD_REASONS) and any retry time."""
    if result is None:
        return "no_relevant_demand", None
    if result.reason == "unsafe":
        return "unsafe", None  # the page itself is the problem: no window to wait out
    if result.outcome == "no_match":
        # The post's no-match window (SPEC 2.4): the tag does not ask again before it ends.
        retry = result.retry_after_seconds
        seconds = None if retry is None else max(0, int(retry))
        return ("backoff" if result.reason == "backoff" else "no_relevant_demand"), seconds
    if result.outcome == "empty":
        return "suppressed", None
    return "no_relevant_demand", None
