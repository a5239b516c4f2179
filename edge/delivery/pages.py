"""POST /dea/url/keywords and /dea/url/placements: the tag asks for ads for a page's slots.

Both call the same in-process matcher as /v1 (``edge.matching.match``) with the page's (or
the post's) text as content and the page URL (or post id) as the suppression thread.
Placements that share text and post are matched together, one distinct ad per slot, best
first; an unsafe text (news, tragedy) fills nothing. Each filled slot carries a signed,
single-use impression token for the beacon of its surface ("url" page slots, "ugc" posts),
bound to the client that asked (a keyed hash of its address and user agent).

Abuse controls, cheapest first: the client's request rate (429) before the body is read;
then a registered ``Origin`` of the publisher (403; browsers always send it on these POSTs)
and the publisher's request rate (429). A page matched recently for the same text, post,
slots and place is answered from the page-match cache without the model, whatever the tag
lane's load. The texts that need the model are charged to the client's text budget (429)
and take one of the tag lane's slots (503 when none is free).
"""

from __future__ import annotations

import asyncio
import contextlib
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
from edge.delivery.page_cache import page_key, servable
from edge.delivery.requests import json_body
from edge.errors import BadRequest, Forbidden
from edge.geo import locate_ip
from edge.http import header, json_response
from edge.origins import normalise_origin
from edge.threads import publisher_thread, publisher_window
from matcher.types import GeoSignal, MatchRequest, MatchResult, ScoredAd

MAX_KEYWORDS = 20


@dataclass(frozen=True, slots=True)
class _Group:
    """Slots filled from one match: same text, same post (or page)."""

    content: str
    post_id: str | None
    slot_ids: tuple[str, ...]


async def keywords(ctx: Context, request: Request) -> Response:
    client_key, binding = _admit(ctx, request)
    body = await json_body(ctx, request, schemas.KEYWORDS_REQUEST)
    pid = _publisher(ctx, request, body["publisher_id"])
    content = _join(body.get("title", ""), body.get("text", ""))
    group = _Group(content, None, tuple(body["slots"]))
    geo = _geo(ctx, request)
    (result,) = await _match_groups(ctx, [group], body["page_url"], geo, pid, client_key)
    placements = _fill(ctx, group, result, pid, binding)
    count_placements(ctx.counters, pid, placements, functools.partial(_campaign_id, ctx))
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
    client_key, binding = _admit(ctx, request)
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
    results = await _match_groups(ctx, todo, page_url, geo, pid, client_key)
    by_slot: dict[str, dict[str, Any]] = {}
    for group, result in zip(todo, results, strict=True):
        for placement in _fill(ctx, group, result, pid, binding):
            by_slot[placement["slot_id"]] = placement
    ordered = [by_slot[p["slot_id"]] for p in body["placements"]]
    count_placements(ctx.counters, pid, ordered, functools.partial(_campaign_id, ctx))
    return json_response({"placements": ordered})


# -- helpers ----------------------------------------------------------------------------------


def _admit(ctx: Context, request: Request) -> tuple[str, str]:
    """The client's key (``edge.ivt.client_key``, its limits') and binding
    (``edge.ivt.client_binding``, for its tokens), within its request rate (before the
    body)."""
    client = ctx.clients.of_scope(request.scope)
    key = ctx.clients.key(client)
    ctx.tag_limits.enforce(ctx.tag_limits.match_client, key, "client address")
    return key, ctx.clients.binding(client, header(request.scope, b"user-agent") or "")


def _publisher(ctx: Context, request: Request, pid: str) -> str:
    require_publisher_origin(ctx, request, pid)
    ctx.tag_limits.enforce(ctx.tag_limits.match_publisher, pid, "publisher")
    return pid


def require_publisher_origin(ctx: Context, request: Request, pid: str) -> None:
    """A registered publisher, called from one of its registered origins (403 otherwise).

    Browsers send ``Origin`` on every POST, so a request without one is a script, not the
    tag: a public publisher id alone must not be enough to spend a publisher's traffic.
    The edge's own pages (the demo) are allowed.
    """
    reg = ctx.publishers
    if reg.get(pid) is None:
        raise Forbidden(
            f"publisher {pid!r} is not registered",
            field="publisher_id",
            code="unknown_publisher",
        )
    origin = request.headers.get("origin")
    if origin is None:
        raise Forbidden(
            "an Origin header from one of the publisher's registered origins is required",
            field="Origin",
            code="origin_required",
        )
    if origin != _origin_of(ctx.settings.base_url) and not reg.publisher_allows(pid, origin):
        raise Forbidden(
            f"origin {origin!r} is not registered for publisher {pid!r}",
            field="Origin",
            code="origin_not_allowed",
        )


def _geo(ctx: Context, request: Request) -> GeoSignal | None:
    # The tag runs in the end user's browser, so the client address is the user's.
    return locate_ip(ctx.geo, request_client_ip(request.scope, ctx.settings.trusted_proxies))


async def _match_groups(
    ctx: Context,
    groups: list[_Group],
    page_url: str,
    geo: GeoSignal | None,
    pid: str,
    client_key: str,
) -> list[MatchResult | None]:
    """One result per group, from the page-match cache where it can be; the groups that
    need the model are charged to the client's text budget (429) and hold one tag-lane slot
    for this request (503 when none is free)."""
    cache = ctx.page_cache
    matcher = ctx.matcher
    version = matcher.catalogue.content_hash if matcher is not None else ""
    keys = [
        page_key(version, pid, page_url, g.content, g.post_id, len(g.slot_ids), geo) for g in groups
    ]

    async def one(group: _Group, key: str) -> MatchResult | None:
        if not group.content.strip():
            return None  # nothing to match: every slot stays empty
        request = MatchRequest(
            product="ugc",
            content=group.content,
            # The publisher's own post (or page): scoped so that no partner's post of the
            # same id shares its disables, frequency or no-match window (edge.threads).
            thread_id=publisher_thread(pid, group.post_id or page_url),
            post_id=None if group.post_id is None else publisher_thread(pid, group.post_id),
            window_id=None
            if group.post_id is None
            else publisher_window(pid, group.post_id, group.content),
            geo=geo,
            max_ads=len(group.slot_ids),
        )
        return await cache.get_or_match(key, lambda: matching.match(ctx, request, lane="tag"))

    if matcher is not None and any(cache.get(k) is not None for k in keys):
        # A cached answer holds only while each of its ads still passes the campaign gates
        # (live in this catalogue, flight, status, budget, cap, pacing); one that does not is
        # dropped here and the page matched afresh (page_cache.servable). Thread gates and
        # answers without ads are not re-checked: those hold until the entry expires.
        # The ledger's live figures, read with no await before the check: the copy a match
        # takes (``snapshot``) costs ~57 us after each billing at 10k campaigns with spend.
        keep = functools.partial(
            servable, matcher=matcher, spend=ctx.spend.current(), now=ctx.clock()
        )
        for key in keys:
            cache.keep_only(key, keep)
    pairs = list(zip(groups, keys, strict=True))

    def model_text() -> int:
        return sum(len(g.content) for g, k in pairs if g.content.strip() and not cache.known(k))

    to_match = model_text()
    if to_match:
        # A busy lane sheds the request (after a short wait) before it is charged; no await
        # between a free slot and taking it below. The wait may have let another visitor's
        # match of the same page in.
        await ctx.admission.wait_for_tag()
        to_match = model_text()
        if to_match:
            ctx.tag_limits.charge_text(client_key, to_match)
    slot = ctx.admission.tag_slot() if to_match else contextlib.nullcontext()
    with slot:
        return list(await asyncio.gather(*(one(g, k) for g, k in pairs)))


def _fill(
    ctx: Context, group: _Group, result: MatchResult | None, pid: str, binding: str
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
            placement["ad"] = _ad(ctx, best[i], pid, group.post_id, slot_id, binding)
        else:
            placement["ad"] = None
            placement["reason"] = reason if not best else "no_relevant_demand"
            if retry is not None and not best:
                placement["retry_after_seconds"] = retry
        out.append(placement)
    return out


def _ad(
    ctx: Context,
    scored: ScoredAd,
    pid: str,
    post_id: str | None,
    slot_id: str,
    binding: str,  # the client's, sealed into the token
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
        pricing=p.ad_set.pricing_model,
        publisher_id=pid,
        post_id=post_id,
        slot_id=slot_id,
        client=binding,
        form=ctx.settings.token_form,
    )
    return {
        "ad_id": p.ad.id,
        **creative(p),
        "description": p.ad.description,
        "impression_token": token,
        "relevancy_score": round(min(1.0, max(0.0, scored.relevancy_score)), 4),
    }


def _campaign_id(ctx: Context, ad_id: str) -> str | None:
    placement = ctx.matcher.catalogue.placement(ad_id) if ctx.matcher else None
    return placement.campaign.id if placement is not None else None


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
        # The post's no-match window: the tag does not ask again before it ends.
        retry = result.retry_after_seconds
        seconds = None if retry is None else max(0, int(retry))
        return ("backoff" if result.reason == "backoff" else "no_relevant_demand"), seconds
    if result.outcome == "empty":
        return "suppressed", None
    return "no_relevant_demand", None
