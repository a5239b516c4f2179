"""MatchResult -> the partner response bodies: UGC ads (and the earlier routes' extra
fields), the no-match and empty answers, AI ads.

The creative fields come from the catalogue exactly as written (``click_through_url`` is
used exactly as given, but for the ``{click_id}`` macro: ``ugc_ad``, ``ai_ad``). UGC ads also
carry the edge's own impression pixel, so a partner that fires ``pixel_trackers`` once the
ad is visible has the impression counted by the edge, and a ``click_url`` the partner fires
when a person clicks the ad (as AI ads do). The pixel's token and the AI beacon URLs name
the partner's key family (``KeyRecord.family``), so what its serves earn counts for its
key's report row without a store read when the beacon comes.
"""

from __future__ import annotations

from typing import Any

from edge.beacons import (
    ai_beacon_urls,
    ai_click_url,
    ai_derived_click_id,
    issue_impression_token,
    ugc_derived_click_id,
)
from edge.context import Context
from edge.creative import CLICK_ID_MACRO, cpm_usd, creative, with_click_id
from matcher.types import MatchResult, ScoredAd

EDGE_PIXEL_VENDOR = "edge"


def ugc_ad(
    ctx: Context, scored: ScoredAd, post_id: str, key_family: str | None = None
) -> dict[str, Any]:
    """A UGC ad: the creative, the edge's impression pixel among its ``pixel_trackers`` and
    its ``click_url``, both with one impression token; ``key_family``: the serving
    partner's, sealed in the token. A ``{click_id}`` the advertiser put in its
    ``click_through_url`` becomes the id the click URL stores when fired as given (the one a
    conversion then reports); any other URL is exactly as given."""
    assert ctx.signer is not None  # set at start-up, before any request
    p = scored.placement
    token, claims = issue_impression_token(
        ctx.signer,
        surface="ugc",
        env=ctx.settings.env,
        ad_id=p.ad.id,
        campaign_id=p.campaign.id,
        now=ctx.clock(),
        cpm_usd=cpm_usd(ctx, p),
        pricing=p.ad_set.pricing_model,
        post_id=post_id,
        key_family=key_family,
        form=ctx.settings.token_form,
    )
    base = ctx.settings.base_url
    ad = creative(p)
    ad["pixel_trackers"].append(
        {
            "vendor": EDGE_PIXEL_VENDOR,
            "tracker_type": "impression",
            "url": f"{base}/dea/ugc/impression?t={token}",
        }
    )
    if CLICK_ID_MACRO in ad["click_through_url"]:  # the id costs a hash: only when asked for
        click_id = ugc_derived_click_id(claims.token_id)
        ad["click_through_url"] = with_click_id(ad["click_through_url"], click_id)
    ad["ad_id"] = p.ad.id
    ad["click_url"] = f"{base}/dea/ugc/click?t={token}"
    return ad


def ugc_body(
    ctx: Context, result: MatchResult, post_id: str, key_family: str | None = None
) -> dict[str, Any]:
    """One of the three 200 shapes: matched, empty (``ads: []``) or no-match.
    ``key_family``: the serving partner's, sealed in each ad's edge pixel."""
    if result.outcome == "no_match":
        return {"no_ad_retry_after_seconds": no_match_seconds(result)}
    ads = [ugc_ad(ctx, s, post_id, key_family) for s in result.ads]
    return {"post_id": post_id, "ads": ads}


def no_match_seconds(result: MatchResult) -> int:
    # The matcher always sets it for a no-match; a floor of one minute keeps a caller that
    # honours it from hammering the edge should it ever be missing or zero.
    return max(60, int(result.retry_after_seconds or 0))


def legacy_ad(scored: ScoredAd) -> dict[str, Any]:
    """The UGC ad fields plus the earlier routes' ``pricing_model`` and ``relevancy_score``
    (no edge pixel: that API reports impressions through ``POST /ugc/impression``, and
    counting both would double-count)."""
    p = scored.placement
    ad = creative(p)
    ad["ad_id"] = p.ad.id
    ad["pricing_model"] = {
        "type": p.ad_set.pricing_model.type,
        "bid_amount": p.ad_set.pricing_model.bid_amount,
    }
    ad["relevancy_score"] = round(min(1.0, max(0.0, scored.relevancy_score)), 4)
    return ad


def ai_ad(
    ctx: Context,
    scored: ScoredAd,
    message_id: str,
    conv: str | None,
    scope: str,
    key_family: str | None = None,
) -> dict[str, Any]:
    """An AI ad; ``scope`` names the partner in its beacon URLs (``edge.threads``), for
    their dedupe keys, and ``key_family`` (its key's) for the report row they count for. A
    ``{click_id}`` the advertiser put in its ``click_through_url`` becomes the id the click
    URL stores when fired as given, the one a conversion then reports (as the tag does
    with its own click id for page ads); any other URL is exactly as given."""
    assert ctx.signer is not None and ctx.matcher is not None  # set at start-up
    p = scored.placement
    number = ctx.matcher.catalogue.ad_number(p.ad.id)
    base = ctx.settings.base_url
    # The ad set's pricing as served, sealed in the URLs: what the view, click and
    # conversion bill under, whatever the live catalogue says when they come. The issue
    # time sealed beside it bounds how long after this answer they count.
    signed = (ctx.signer, base, number, message_id, conv)
    pricing, issued_at = p.ad_set.pricing_model, ctx.clock()
    render, view = ai_beacon_urls(
        *signed, scope=scope, pricing=pricing, key_family=key_family, issued_at=issued_at
    )
    ad = creative(p)
    if CLICK_ID_MACRO in ad["click_through_url"]:  # the id costs a hash: only when asked for
        click_id = ai_derived_click_id(number, message_id, conv, scope=scope)
        ad["click_through_url"] = with_click_id(ad["click_through_url"], click_id)
    return {
        "ad_id": number,
        "placement": "after_message",
        **ad,
        "render_impression_url": render,
        "view_impression_url": view,
        "click_url": ai_click_url(
            *signed, scope=scope, pricing=pricing, key_family=key_family, issued_at=issued_at
        ),
    }


def ai_body(
    ctx: Context,
    result: MatchResult,
    message_id: str,
    conv: str | None,
    scope: str,
    key_family: str | None = None,
) -> dict[str, Any]:
    """Always ``{"message_id", "ads"}``; with no ad, ``no_ad_reason`` says why (
    keeps one schema for no-match and brand safety)."""
    body: dict[str, Any] = {
        "message_id": message_id,
        "ads": [ai_ad(ctx, s, message_id, conv, scope, key_family) for s in result.ads],
    }
    if not body["ads"]:
        body["no_ad_reason"] = result.reason or (
            "no_relevant_demand" if result.outcome == "no_match" else "suppressed"
        )
    return body
