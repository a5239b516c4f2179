"""The /dea delivery routes called by the tag and pixels.

Handlers live in ``edge.delivery`` (pages: the match routes; events: the beacons); this
module lists the routes, their preflight methods for the CORS middleware and their OpenAPI
description.
``GET /dea/tag.js`` belongs to ``edge.routes.tag``; ``GET /dea/health`` to ``health``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.routing import BaseRoute, Route

from edge.beacons import AI_URL_MAX_AGE_SECONDS, CLOCK_SKEW_SECONDS
from edge.context import Context
from edge.delivery import clicks, events, pages, schemas
from edge.http import counting_route
from edge.openapi import DEVICE_USER_AGENT, error_for, error_response, json_body

KEYWORDS = "/dea/url/keywords"
PLACEMENTS = "/dea/url/placements"
URL_IMPRESSION = "/dea/url/impression"
FAILURES = "/dea/url/placements/failures"
HOVER = "/dea/url/hover"
UGC_IMPRESSION = "/dea/ugc/impression"
AI_RENDER = "/dea/ai/impressions/render"
AI_VIEW = "/dea/ai/impressions/view"
URL_CLICK = "/dea/url/click"
UGC_CLICK = "/dea/ugc/click"
AI_CLICK = "/dea/ai/click"

# Paths a browser preflights (its POSTs carry JSON), with the methods a preflight may ask for.
PREFLIGHT_PATHS = {
    KEYWORDS: frozenset({"POST"}),
    PLACEMENTS: frozenset({"POST"}),
    URL_IMPRESSION: frozenset({"POST"}),
    FAILURES: frozenset({"POST"}),
    HOVER: frozenset({"POST"}),
    UGC_IMPRESSION: frozenset({"GET", "POST"}),
    URL_CLICK: frozenset({"POST"}),
    UGC_CLICK: frozenset({"GET", "POST"}),
}
# Where a publisher's performance monitoring may see timings (Timing-Allow-Origin).
TIMING_PATHS = (KEYWORDS, PLACEMENTS)


def _ai_enabled(ctx: Context) -> bool:
    return ctx.settings.is_production  # the AI product has no sandbox


def _beacons(ctx: Context) -> list[tuple[str, Any, list[str]]]:
    """The durable beacons: (path, bound handler, methods). The routes below and the beacon
    lane (``edge.lane``) are both made from this one list."""
    out: list[tuple[str, Any, list[str]]] = [
        (URL_IMPRESSION, partial(events.url_impression, ctx), ["POST"]),
        (FAILURES, partial(events.failure, ctx), ["POST"]),
        (HOVER, partial(events.hover, ctx), ["POST"]),
        (UGC_IMPRESSION, partial(events.ugc_impression, ctx), ["GET", "POST"]),
        (URL_CLICK, partial(clicks.url_click, ctx), ["POST"]),
        (UGC_CLICK, partial(clicks.ugc_click, ctx), ["GET", "POST"]),
    ]
    if _ai_enabled(ctx):
        out += [
            (AI_RENDER, partial(events.ai_render, ctx), ["GET"]),
            (AI_VIEW, partial(events.ai_view, ctx), ["GET"]),
            (AI_CLICK, partial(clicks.ai_click, ctx), ["GET"]),
        ]
    return out


def lane_endpoints(ctx: Context) -> dict[tuple[str, str], Any]:
    """``(METHOD, path)`` -> handler of every beacon, for the beacon lane."""
    return {(m, path): ep for path, ep, methods in _beacons(ctx) for m in methods}


def lane_direct(ctx: Context) -> dict[tuple[str, str], Any]:
    """The beacons the lane answers in their direct form (``edge.lane``): the impressions."""
    return {
        ("POST", URL_IMPRESSION): partial(events.direct_impression, ctx, "url"),
        ("POST", UGC_IMPRESSION): partial(events.direct_impression, ctx, "ugc"),
    }


def routes(ctx: Context) -> list[BaseRoute]:
    # A beacon's GET changes state: no implicit HEAD (``counting_route``).
    return [
        Route(KEYWORDS, partial(pages.keywords, ctx), methods=["POST"]),
        Route(PLACEMENTS, partial(pages.placements, ctx), methods=["POST"]),
        *(counting_route(path, ep, methods) for path, ep, methods in _beacons(ctx)),
    ]


# -- OpenAPI -----------------------------------------------------------------------------------


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    content = {"schema": schema}
    return {
        "required": True,
        "content": {"application/json": content, "text/plain": content},
    }


def _errors(ctx: Context, *statuses: int) -> dict[str, Any]:
    codes = {*statuses, *((403,) if ctx.settings.is_production else ())}
    return {str(s): error_for(s) for s in sorted(codes)}


def _preflight(methods: frozenset[str]) -> dict[str, Any]:
    return {
        "summary": "CORS preflight (registered publisher origins only)",
        "tags": ["delivery"],
        "parameters": [
            {"name": "Origin", "in": "header", "required": True, "schema": {"type": "string"}},
            {
                "name": "Access-Control-Request-Method",
                "in": "header",
                "required": True,
                "schema": {"enum": sorted(methods)},
            },
        ],
        "responses": {
            "204": {"description": "Granted: Access-Control-Allow-Origin, Max-Age 7200"},
            "400": error_response("Not a preflight (no Access-Control-Request-Method)"),
            "403": error_response("Origin not registered, or method/headers not allowed"),
        },
    }


def _post(
    ctx: Context,
    summary: str,
    request: dict[str, Any],
    response: dict[str, Any],
    *errors: int,
    ok: str = "200",
) -> dict[str, Any]:
    return {
        "summary": summary,
        "tags": ["delivery"],
        "requestBody": _body(request),
        "responses": {ok: json_body(response), **_errors(ctx, 400, 413, 415, *errors)},
    }


def openapi(ctx: Context) -> dict[str, Any]:
    s = schemas
    paths: dict[str, Any] = {
        KEYWORDS: {
            "post": _post(ctx, "Ads for the page's own slots", s.KEYWORDS_REQUEST,
                          s.KEYWORDS_RESPONSE, 403, 429, 502, 503),
        },
        PLACEMENTS: {
            "post": _post(ctx, "Ads for explicit slots (UGC posts, late slots)",
                          s.PLACEMENTS_REQUEST, s.PLACEMENTS_RESPONSE, 403, 429, 502, 503),
        },
        URL_IMPRESSION: {
            "post": _post(ctx, "A page-level ad was viewable (billing-grade)",
                          s.IMPRESSION_REQUEST, s.IMPRESSION_RESPONSE, 503),
        },
        FAILURES: {
            "post": _post(ctx, "A placement failed to render", s.FAILURE_REQUEST,
                          s.ACK_RESPONSE, 403, 429, 503),
        },
        HOVER: {
            "post": _post(ctx, "Hover engagement, once per token", s.HOVER_REQUEST,
                          s.ACK_RESPONSE, 503),
        },
        UGC_IMPRESSION: {
            "post": _post(ctx, "A UGC ad was viewable (billing-grade)", s.IMPRESSION_REQUEST,
                          s.IMPRESSION_RESPONSE, 503),
            "get": {
                "summary": "Impression pixel (from an ad's pixel_trackers)",
                "tags": ["delivery"],
                "parameters": [
                    {"name": "t", "in": "query", "required": True, "schema": s.TOKEN},
                    DEVICE_USER_AGENT,
                ],
                "responses": {
                    "204": {"description": "Stored (or already stored: a replay counts nothing)"},
                    **_errors(ctx, 400, 503),
                },
            },
        },
        URL_CLICK: {
            "post": _post(ctx, "A person clicked a page-level ad (billing-grade)",
                          s.CLICK_REQUEST, s.CLICK_RESPONSE, 503),
        },
        UGC_CLICK: {
            "post": _post(ctx, "A person clicked a UGC ad (billing-grade)",
                          s.CLICK_REQUEST, s.CLICK_RESPONSE, 503),
            "get": _ugc_click_url(ctx),
        },
    }  # fmt: skip
    for path, methods in PREFLIGHT_PATHS.items():
        paths[path]["options"] = _preflight(methods)
    if _ai_enabled(ctx):
        for path, kind in ((AI_RENDER, "rendered"), (AI_VIEW, "viewable")):
            paths[path] = {"get": _ai_beacon(ctx, kind)}
        paths[AI_CLICK] = {"get": _ai_click(ctx)}
        for path in (AI_RENDER, AI_VIEW, AI_CLICK):
            paths[path]["get"]["parameters"].append(DEVICE_USER_AGENT)
    return {"paths": paths}


def _ai_beacon(ctx: Context, kind: str) -> dict[str, Any]:
    text = {"type": "string", "maxLength": 256}
    return {
        "summary": f"An AI ad was {kind}; the URL from /v1/ai/process, fired verbatim",
        "tags": ["delivery"],
        "parameters": [
            {"name": "ad_id", "in": "query", "required": True, "schema": {"type": "integer"}},
            {"name": "message_id", "in": "query", "required": True, "schema": text},
            {"name": "conversation_id", "in": "query", "required": False, "schema": text},
            {
                "name": "scope",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "pattern": r"^[A-Za-z0-9_\-]{8,64}$"},
                "description": "The partner the URL was built for (a keyed hash of its key "
                "family, the same after a rotation); URLs issued before it existed have none",
            },
            {
                "name": "pricing",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "pattern": r"^(cpc|cpm|cpa):[0-9.e\-]+$"},
                "description": "The ad set's pricing model and bid when the ad was served "
                "(signed): what its view, click and conversion bill under; URLs issued before "
                "it existed have none and are priced from the live catalogue",
            },
            {
                "name": "key_family",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "pattern": r"^[A-Za-z0-9_\-]{1,64}$"},
                "description": "The partner's key family (the id of its first key, as edge "
                "report prints it; signed, beside a pricing only): the key row its view, "
                "click and conversion count for; URLs issued before it existed have none and "
                "count for no key",
            },
            {
                "name": "issued_at",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "pattern": r"^[0-9]{1,12}$"},
                "description": "When the URL was issued, in epoch seconds (signed, beside a "
                f"key_family only): a URL fired more than {AI_URL_MAX_AGE_SECONDS} seconds "
                f"after it, or with an issue time more than {CLOCK_SKEW_SECONDS} "
                "seconds ahead of the edge's clock, is a 400 (invalid_token) and counts "
                "nothing; URLs issued before it existed have none and never expire",
            },
            {"name": "sig", "in": "query", "required": True, "schema": text},
        ],
        "responses": {
            "204": {
                "description": "Stored once per (ad_id, message_id) in its conversation, of "
                "its partner; replays count nothing"
            },
            **_errors(ctx, 400, 503),
        },
    }


def _ai_click(ctx: Context) -> dict[str, Any]:
    op = _ai_beacon(ctx, "clicked")
    op["summary"] = "A person clicked an AI ad; the click_url from /v1/ai/process"
    op["parameters"].append(
        {
            "name": "click_id",
            "in": "query",
            "required": False,
            "schema": schemas.PARTNER_CLICK_ID,
            "description": "The partner's id for this click (8-64 of A-Z a-z 0-9 _ -, not "
            "beginning ugc- or ai- unless it is the id this URL derives); "
            "without it, one id per (ad_id, message_id) in its conversation, of its partner",
        }
    )
    op["responses"]["204"] = {
        "description": "Stored (a click with no stored impression, or a second one of the "
        "same ad and message, is stored invalid and never billed); a replay counts nothing"
    }
    return op


def _ugc_click_url(ctx: Context) -> dict[str, Any]:
    return {
        "summary": "A person clicked a partner's UGC ad; the click_url from /v1/ugc/process",
        "tags": ["delivery"],
        "parameters": [
            {"name": "t", "in": "query", "required": True, "schema": schemas.TOKEN},
            {
                "name": "click_id",
                "in": "query",
                "required": False,
                "schema": schemas.PARTNER_CLICK_ID,
                "description": "The partner's id for this click (8-64 of A-Z a-z 0-9 _ -, not "
                "beginning ugc- or ai- unless it is the id this URL derives); "
                "without it, one id per impression token (the one an advertiser's {click_id} "
                "macro in the ad's click_through_url received)",
            },
            DEVICE_USER_AGENT,
        ],
        "responses": {
            "204": {
                "description": "Stored (a click whose pixel was never fired, or a second click "
                "of the same ad, is stored invalid and never billed); a replay counts nothing"
            },
            **_errors(ctx, 400, 503),
        },
    }
