"""POST /dea/url/keywords and /dea/url/placements: the tag asks for ads for a page's slots.

Both call the same in-process matcher as /v1 (``edge.matching.match``) with the page's (or
the post's) text as content and the page URL (or post id) as the suppression thread.
Placements that share text and post are matched together, one distinct ad per slot, best
first; an unsafe text (news, tragedy) fills nothing. Each filled slot carries a signed,
single-use impression token for the beacon of its surface ("url" page slots, "ugc" posts).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from edge import matching
from edge.beacons import issue_impression_token
from edge.context import Context
from edge.delivery import schemas
from edge.delivery.client_ip import from_scope
from edge.delivery.publishers import registry
from edge.delivery.requests import json_body
from edge.errors import BadRequest, Forbidden
from edge.http import json_response
from edge.partner.geo import locate_ip
from edge.partner.render import cpm_usd, creative
from edge.store.events import normalise_origin
from matcher.types import GeoSignal, MatchRequest, MatchResult, ScoredAd

MAX_KEYWORDS = 20


@dataclass(frozen=True, slots=True)
class _Group:
    """Slots filled from one match: same text, same post (or page)."""

    content: str
    post_id: str | None
    slot_ids: tuple[str, ...]


class PageHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.own_origin = _origin_of(ctx.settings.base_url)

    async def keywords(self, request: Request) -> Response:
        body = await json_body(self.ctx, request, schemas.KEYWORDS_REQUEST)
        pid = self._publisher(request, body["publisher_id"])
        content = _join(body.get("title", ""), body.get("text", ""))
        group = _Group(content, None, tuple(body["slots"]))
        geo = self._geo(request)
        result = await self._match(group, body["page_url"], geo)
        placements = self._fill(group, result, pid)
        self._count(pid, placements)
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

    async def placements(self, request: Request) -> Response:
        body = await json_body(self.ctx, request, schemas.PLACEMENTS_REQUEST)
        pid = self._publisher(request, body["publisher_id"])
        groups: dict[tuple[str, str | None], list[str]] = {}
        slot_ids = [p["slot_id"] for p in body["placements"]]
        for i, slot_id in enumerate(slot_ids):
            if slot_id in slot_ids[:i]:
                raise BadRequest(
                    f"slot {slot_id!r} is listed twice", field=f"placements[{i}].slot_id"
                )
        for p in body["placements"]:
            key = (_join(p.get("title", ""), p["text"]), p.get("post_id"))
            groups.setdefault(key, []).append(p["slot_id"])
        geo = self._geo(request)
        page_url = body["page_url"]
        todo = [_Group(content, post, tuple(slots)) for (content, post), slots in groups.items()]
        results = await asyncio.gather(*(self._match(g, page_url, geo) for g in todo))
        by_slot: dict[str, dict[str, Any]] = {}
        for group, result in zip(todo, results, strict=True):
            for placement in self._fill(group, result, pid):
                by_slot[placement["slot_id"]] = placement
        ordered = [by_slot[p["slot_id"]] for p in body["placements"]]
        self._count(pid, ordered)
        return json_response({"placements": ordered})

    # -- helpers ---------------------------------------------------------------------------

    def _publisher(self, request: Request, pid: str) -> str:
        reg = registry(self.ctx)
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
            and origin != self.own_origin
            and not reg.publisher_allows(pid, origin)
        ):
            raise Forbidden(
                f"origin {origin!r} is not registered for publisher {pid!r}",
                field="Origin",
                code="origin_not_allowed",
            )
        return pid

    def _geo(self, request: Request) -> GeoSignal | None:
        # The tag runs in the end user's browser, so the client address is the user's.
        ip = request.scope.get("state", {}).get("client_ip")
        if ip is None:
            found = from_scope(request.scope, self.ctx.settings.trusted_proxies)
            ip = None if found is None else str(found)
        return locate_ip(self.ctx.geo, ip)

    async def _match(
        self, group: _Group, page_url: str, geo: GeoSignal | None
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
        return await matching.match(self.ctx, request)

    def _fill(self, group: _Group, result: MatchResult | None, pid: str) -> list[dict[str, Any]]:
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
                placement["ad"] = self._ad(best[i], pid, group.post_id, slot_id)
            else:
                placement["ad"] = None
                placement["reason"] = reason if not best else "no_relevant_demand"
                if retry is not None and not best:
                    placement["retry_after_seconds"] = retry
            out.append(placement)
        return out

    def _ad(self, scored: ScoredAd, pid: str, post_id: str | None, slot_id: str) -> dict[str, Any]:
        p = scored.placement
        assert self.ctx.signer is not None  # set at start-up
        token, _ = issue_impression_token(
            self.ctx.signer,
            surface="ugc" if post_id is not None else "url",
            env=self.ctx.settings.env,
            ad_id=p.ad.id,
            campaign_id=p.campaign.id,
            now=self.ctx.clock(),
            cpm_usd=cpm_usd(self.ctx, p),
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

    def _count(self, pid: str, placements: list[dict[str, Any]]) -> None:
        counters = self.ctx.counters
        filled = [p for p in placements if p["ad"] is not None]
        counters.add("publisher", pid, "requests", len(placements))
        if filled:
            counters.add("publisher", pid, "matches", len(filled))
        if len(filled) < len(placements):
            counters.add("publisher", pid, "no_matches", len(placements) - len(filled))
        for p in filled:
            counters.add("ad", p["ad"]["ad_id"], "matches")


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
