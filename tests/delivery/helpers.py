"""Shared helpers of the /dea tests: a registered publisher, a scripted matcher."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2 as httpx

from edge import matching
from matcher.types import (
    Ad,
    AdSet,
    Campaign,
    MatchResult,
    PixelTracker,
    Placement,
    PricingModel,
    ScoredAd,
)

PUB = "pub-1"
ORIGIN = "https://news.example"


def register(client, publisher_id: str = PUB, *origins: str) -> None:
    ctx = client.app.state.ctx
    client.portal.call(ctx.store.upsert_publisher, publisher_id, list(origins or (ORIGIN,)), 1.0)
    client.portal.call(ctx.publishers.refresh)


def serve_ai(client, key: str, ad_id: str, message_id: str) -> dict[str, Any]:
    """/v1/ai/process by the partner of ``key`` serves ``ad_id`` (the scripted matcher's
    answer) for the message: its ad, beacon URLs and all (one partner's messages are one
    scope)."""
    client.app.state.ctx.matcher.ad_ids = (ad_id,)
    turn = {"message_id": message_id, "conversation_id": "c-1", "content": "kibble please"}
    r = client.post("/v1/ai/process", json=turn, headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    (ad,) = r.json()["ads"]
    return dict(ad)


def at_once(client, requests: list[tuple[str, str, dict[str, Any]]]) -> list[httpx.Response]:
    """Send ``(method, url, httpx keywords)`` requests all at once in the app's event loop,
    as concurrent callers would, and return the answers in order: from the test client's
    address and user agent (httpx's own is on the crawler list). These bypass the
    ``make_client`` check that every answer is documented."""
    from tests.conftest import US_CLIENT

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=client.app, client=US_CLIENT)
        agent = {"User-Agent": client.headers["user-agent"]}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers=agent
        ) as http:
            return list(
                await asyncio.gather(*(http.request(m, url, **kw) for m, url, kw in requests))
            )

    return client.portal.call(send)


def placement(ad_id: str = "ad-1", *, pricing: str = "cpm", bid: float = 4.0) -> Placement:
    ad = Ad(
        id=ad_id,
        title=f"Title {ad_id}",
        cta="Shop now",
        description=f"About {ad_id}",
        keywords=(f"kw-{ad_id}", "shared"),
        click_through_url=f"https://adv.example/{ad_id}?utm_source=x&a=b",
        ttl_seconds=900,
        pixel_trackers=(PixelTracker("acme", "impression", f"https://px.example/{ad_id}"),),
    )
    ad_set = AdSet(
        id="as-1", products=("ugc", "ai"), pricing_model=PricingModel(pricing, bid), ads=(ad,)
    )
    campaign = Campaign(
        id=f"cmp-{ad_id}", advertiser_name="Trailhead", status="active", start_at=None,
        end_at=None, budget_usd=None, ad_sets=(ad_set,),
    )  # fmt: skip
    return Placement(ad=ad, ad_set=ad_set, campaign=campaign)


def matched(*ad_ids: str, score: float = 0.8) -> MatchResult:
    return MatchResult("matched", tuple(ScoredAd(placement(a), score, score) for a in ad_ids))


class ScriptedMatcher:
    """Stands in for ``edge.matching.match``: answers by the content's first word."""

    def __init__(self, answers: dict[str, MatchResult]) -> None:
        self.answers = answers
        self.requests = []

    async def __call__(self, ctx, request, *, lane="partner"):
        self.requests.append(request)
        return self.answers[request.content.split()[0]]


def script(monkeypatch, answers: dict[str, MatchResult]) -> ScriptedMatcher:
    fake = ScriptedMatcher(answers)
    monkeypatch.setattr(matching, "match", fake, raising=False)
    return fake
