"""OpenAPI fragments of the Ad Manager routes and the earlier-described (legacy) routes."""

from __future__ import annotations

from typing import Any

from edge.context import Context
from edge.openapi import DEVICE_USER_AGENT, json_body
from edge.partner.bodies import DisableRequest, ImpressionRequest, LegacyProcessRequest
from edge.partner.schemas import (
    CREATIVE,
    PIXEL,
    declared,
    operation,
    ref,
)

_PRICING = {
    "type": "object",
    "required": ["type", "bid_amount"],
    "properties": {
        "type": {"enum": ["cpc", "cpm", "cpa"]},
        "bid_amount": {"type": "number", "description": "USD"},
    },
}
_GEO = {
    "type": ["object", "null"],
    "description": "null: all of the US",
    "properties": {
        "countries": {"type": "array", "items": {"type": "string"}},
        "states": {"type": "array", "items": {"type": "string"}},
        "dmas": {"type": "array", "items": {"type": "string"}},
        "cities": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["city", "state"],
                "properties": {
                    "city": {"type": "string"},
                    "state": {"type": "string", "examples": ["US-TX"]},
                },
            },
        },
        "zipcodes": {"type": "array", "items": {"type": "string"}},
        "radius": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["lat", "lon", "km"],
                "properties": {
                    "lat": {"type": "number"},
                    "lon": {"type": "number"},
                    "km": {"type": "number"},
                },
            },
        },
    },
}
_CATALOGUE_AD = {
    "type": "object",
    "required": ["id", "title", "cta", "description", "click_through_url", "ttl_seconds"],
    "properties": {
        "id": {
            "type": "string",
            "description": "The ad's id: a string, as in UGC answers' `ad_id` (AI answers carry "
            "an integer `ad_id` derived from it instead)",
        },
        "title": {"type": "string"},
        "cta": {"type": "string"},
        "description": {"type": "string"},
        "keywords": {"type": "array", "items": {"type": "string"}},
        "click_through_url": {"type": "string"},
        "ttl_seconds": {"type": "integer"},
        "pixel_trackers": {"type": "array", "items": ref("PixelTracker")},
    },
}
_AD_SET_FIELDS = {
    "id": {"type": "string"},
    "products": {"type": "array", "items": {"enum": ["ugc", "ai"]}},
    "pricing_model": _PRICING,
    "geo": _GEO,
    "ads": {"type": "array", "items": ref("CatalogueAd")},
}
CAMPAIGN_AD_SET = {
    "type": "object",
    "description": "An ad set inside its campaign, in the catalogue file's format",
    "required": ["id", "products", "pricing_model", "ads"],
    "properties": _AD_SET_FIELDS,
}
AD_SET = {
    "type": "object",
    "description": "A catalogue ad set and the id of the campaign it belongs to",
    "required": ["id", "campaign_id", "products", "pricing_model", "ads"],
    "properties": {**_AD_SET_FIELDS, "campaign_id": {"type": "string"}},
}
CAMPAIGN = {
    "type": "object",
    "description": "A catalogue campaign with its ad sets, in the catalogue file's format",
    "required": ["id", "advertiser_name", "status", "ad_sets"],
    "properties": {
        "id": {"type": "string"},
        "advertiser_name": {"type": "string"},
        "status": {"enum": ["active", "paused", "archived"]},
        "start_at": {"type": ["string", "null"], "format": "date-time"},
        "end_at": {"type": ["string", "null"], "format": "date-time"},
        "budget_usd": {"type": ["number", "null"]},
        "pacing": {
            "enum": ["even", "asap"],
            "description": "even: spend follows a straight line over the flight (and the day, "
            "with a daily cap); asap: as fast as demand allows, up to the budget and cap",
        },
        "daily_cap_usd": {
            "type": ["number", "null"],
            "description": "Most USD billed per UTC day; null: no daily cap",
        },
        "ad_sets": {"type": "array", "items": ref("CampaignAdSet")},
    },
}


def _page(item: str, name: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": [name, "next_cursor"],
        "properties": {
            name: {"type": "array", "items": ref(item)},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "Pass as ?cursor= for the next page; null on the last page",
            },
        },
    }


def ad_manager_doc(
    ctx: Context, campaigns: str, ad_sets: str, default_limit: int, max_limit: int
) -> dict[str, Any]:
    paging = [
        {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": 1, "maximum": max_limit},
            "description": f"Items per page (default {default_limit})",
        },
        {
            "name": "cursor",
            "in": "query",
            "schema": {"type": "string"},
            "description": "next_cursor of the previous page of this listing (opaque: a cursor "
            "of the other listing is a 400)",
        },
    ]
    by_campaign = {"name": "campaign_id", "in": "query", "schema": {"type": "string"}}
    errors = (400, 401, 429, 502)  # 502: the key store could not answer
    return {
        "paths": {
            campaigns: {
                "get": operation(
                    ctx,
                    "Campaigns of the catalogue, ordered by id",
                    json_body(ref("CampaignPage")),
                    errors,
                    tag="ad-manager",
                    params=paging,
                )
            },
            ad_sets: {
                "get": operation(
                    ctx,
                    "Ad sets of the catalogue, ordered by id",
                    json_body(ref("AdSetPage")),
                    errors,
                    tag="ad-manager",
                    params=[*paging, by_campaign],
                )
            },
        },
        "components": {
            "schemas": {
                "PixelTracker": PIXEL,
                "Campaign": CAMPAIGN,
                "AdSet": AD_SET,
                "CampaignAdSet": CAMPAIGN_AD_SET,
                "CatalogueAd": _CATALOGUE_AD,
                "CampaignPage": _page("Campaign", "campaigns"),
                "AdSetPage": _page("AdSet", "ad_sets"),
            }
        },
    }


# -- earlier-described routes (behind EDGE_LEGACY_API) ---------------------------------------

LEGACY_AD = {
    "type": "object",
    "description": "The UGC ad fields plus pricing_model and relevancy_score (no edge pixel "
    "and no click_url: this API reports impressions through POST /ugc/impression)",
    "required": [*CREATIVE, "ad_id", "pricing_model", "relevancy_score"],
    "properties": {
        **CREATIVE,
        "ad_id": {"type": "string", "description": "The catalogue ad's id (a string)"},
        "pricing_model": _PRICING,
        "relevancy_score": {"type": "number", "minimum": 0, "maximum": 1},
    },
}
# The request bodies, from their declarations: the legacy match, the disable array (its
# items a component) and the impression.
(LEGACY_REQUEST, DISABLE_REQUEST, IMPRESSION_REQUEST), LEGACY_BODIES = declared(
    LegacyProcessRequest, DisableRequest, ImpressionRequest
)


def legacy_doc(ctx: Context, paths: dict[str, str]) -> dict[str, Any]:
    process = operation(
        ctx,
        "Earlier description: match (ads: [] when nothing passes)",
        json_body(
            {
                "type": "object",
                "required": ["post_id", "ads"],
                "properties": {
                    "post_id": {"type": "string"},
                    "ads": {"type": "array", "items": ref("LegacyAd")},
                },
            }
        ),
        (400, 401, 413, 415, 429, 502),
        tag="legacy",
        body=LEGACY_REQUEST,
    )
    disable = operation(
        ctx,
        "Earlier description: disable ads in threads (idempotent)",
        json_body({"type": "object", "properties": {"success": {"type": "boolean"}}}),
        (400, 401, 413, 415, 429, 502, 503),
        tag="legacy",
        body=DISABLE_REQUEST,
    )
    impression = operation(
        ctx,
        "Earlier description: a viewable impression (billing-grade)",
        json_body(
            {
                "type": "object",
                "required": ["post_id", "acknowledged"],
                "properties": {"post_id": {"type": "string"}, "acknowledged": {"type": "boolean"}},
            },
            "Durably stored; a replay of the same Idempotency-Key and body counts once "
            "(answered with Idempotent-Replayed: true). Judged by the invalid-traffic "
            "rules (a bot's user agent in X-Device-User-Agent, the reader's browser, when "
            "sent: the caller's own User-Agent is not judged; an ad that no match of this "
            "post by this partner served): an invalid one is stored, never billed, and "
            "answered alike",
        ),
        (400, 401, 413, 415, 422, 429, 502, 503),
        tag="legacy",
        body=IMPRESSION_REQUEST,
        params=[
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "maxLength": 255},
                "description": "Retries with the same key and body count once; the key "
                "sent again with another body is a 422 idempotency_key_reused",
            },
            DEVICE_USER_AGENT,
        ],
    )
    rotate = operation(
        ctx,
        "Earlier description: self-service key rotation (old key valid 24 h)",
        json_body(
            {
                "type": "object",
                "required": ["apiKey", "secondaryKey", "secondaryKeyExpiresAt"],
                "properties": {
                    "apiKey": {"type": "string"},
                    "secondaryKey": {"type": "string"},
                    "secondaryKeyExpiresAt": {"type": "string", "format": "date-time"},
                },
            }
        ),
        (401, 409, 429, 502),
        tag="legacy",
    )
    return {
        "paths": {
            paths["process"]: {"post": process},
            paths["disable"]: {"post": disable},
            paths["impression"]: {"post": impression},
            paths["rotate"]: {"get": rotate},
        },
        "components": {"schemas": {"PixelTracker": PIXEL, "LegacyAd": LEGACY_AD, **LEGACY_BODIES}},
    }
