"""OpenAPI 3.1 fragments of the partner routes: request and response schemas, statuses.

Each route module's ``openapi(ctx)`` returns one of the ``*_doc`` fragments below for the
paths it serves; ``edge.openapi`` merges them. tests/test_openapi_coverage.py keeps the
statuses here true to what the routes answer.
"""

from __future__ import annotations

from typing import Any

from edge.context import Context
from edge.openapi import error_for, json_body
from edge.partner.bodies import AiProcessRequest, SandboxProcessRequest, UgcProcessRequest
from edge.partner.declare import schema_components

REF = "#/components/schemas/"
# What every keyed answer carries (and a 429 with them): the key's quota and what is left.
RATE_HEADERS = {
    "RateLimit-Policy": {
        "description": 'IETF RateLimit-Policy: "<product>";q=<requests>;w=<seconds>',
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": 'IETF RateLimit: "<product>";r=<remaining>;t=<seconds until full>',
        "schema": {"type": "string"},
    },
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF + name}


def keyed_error(code: int) -> dict[str, Any]:
    resp = error_for(code)
    if code == 429:
        resp["headers"].update(RATE_HEADERS)
    return resp


def operation(
    ctx: Context,
    summary: str,
    ok: dict[str, Any],
    errors: tuple[int, ...],
    *,
    tag: str,
    body: dict[str, Any] | None = None,
    params: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    codes = sorted({*errors, *((403,) if ctx.settings.is_production else ())})
    ok = {**ok, "headers": {**ok.get("headers", {}), **RATE_HEADERS}}
    op: dict[str, Any] = {
        "summary": summary,
        "tags": [tag],
        "security": [{"ApiKey": []}],
        "responses": {"200": ok, **{str(c): keyed_error(c) for c in codes}},
    }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


# -- shared ad shapes ----------------------------------------------------------------------------

PIXEL = {
    "type": "object",
    "required": ["vendor", "tracker_type", "url"],
    "properties": {
        "vendor": {"type": "string"},
        "tracker_type": {
            "type": "string",
            "examples": ["impression"],
            "description": "impression, viewable or click: fire impression and viewable "
            "trackers when the ad is visible, click trackers when the user clicks it (never on "
            "view).",
        },
        "url": {"type": "string", "format": "uri"},
    },
}
CREATIVE = {
    "title": {"type": "string"},
    "cta": {"type": "string"},
    "click_through_url": {"type": "string", "description": "Used exactly as given"},
    "advertiser_name": {"type": "string"},
    "ttl_seconds": {"type": "integer", "minimum": 1},
    "pixel_trackers": {"type": "array", "items": ref("PixelTracker")},
}
_CREATIVE_REQ = list(CREATIVE)
UGC_AD = {
    "type": "object",
    "description": "A matched ad, with ad_id. pixel_trackers also holds the edge's own pixel "
    "(vendor `edge`, /dea/ugc/impression), which counts the impression when fired.",
    "required": [*_CREATIVE_REQ, "ad_id", "click_url"],
    "properties": {
        **CREATIVE,
        "click_through_url": {
            "type": "string",
            "description": "Used exactly as given, but for a {click_id} placeholder the "
            "advertiser put in it: it holds the id click_url stores when fired as given, the "
            "one the advertiser's conversion reports",
        },
        "click_url": {
            "type": "string",
            "format": "uri",
            "description": "Fire it (GET) when a person clicks the ad, then open "
            "click_through_url; never on view. The click counts once, after the ad's edge "
            "pixel, and bills a CPC ad's bid.",
        },
        "ad_id": {
            "type": "string",
            "description": "The catalogue ad's id, a string. Note: AI answers "
            "(/v1/ai/process) carry `ad_id` as an integer instead; keep the two types apart "
            "in a typed client.",
        },
    },
}


def declared(*types: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The JSON Schema of request bodies declared in ``edge.partner.bodies`` (the same
    declarations that decode them): a schema per type, and the named components they use."""
    return schema_components(*types, ref_template=REF + "{name}")


UGC_MATCHED: dict[str, Any] = {
    "type": "object",
    "description": "Matched (ads ordered by relevance) or empty (ads: [])",
    "required": ["post_id", "ads"],
    "properties": {"post_id": {"type": "string"}, "ads": {"type": "array", "items": ref("UgcAd")}},
}
NO_MATCH: dict[str, Any] = {
    "type": "object",
    "description": "No match: no `ads` field; do not ask again before this many seconds",
    "required": ["no_ad_retry_after_seconds"],
    "additionalProperties": False,
    "properties": {"no_ad_retry_after_seconds": {"type": "integer", "minimum": 1}},
}
SANDBOX_EXPLAIN = {
    "type": "object",
    "description": "Why this answer (sandbox only, with explain: true)",
    "required": ["outcome", "reason"],
    "properties": {
        "outcome": {"enum": ["matched", "empty", "no_match"]},
        "reason": {
            "type": "string",
            "description": "sandbox_sample (the 1-in-5 no-match), unsafe, "
            "no_relevant_demand, backoff, suppressed, ...",
        },
        "detail": {"type": "string"},
        "ads": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "ad_id": {"type": "string"},
                    "relevancy_score": {"type": "number"},
                    "rank_score": {"type": "number"},
                },
            },
        },
        "matcher": {"type": "object", "description": "The matcher's gates and scores"},
    },
}
UGC_COMPONENTS = {
    "PixelTracker": PIXEL,
    "UgcAd": UGC_AD,
    **declared(UgcProcessRequest)[1],
    "UgcMatched": UGC_MATCHED,
    "NoMatch": NO_MATCH,
}


RETRIES = (
    "Retries are safe. The same call (same key, body and X-Forwarded-For) within 120 s of "
    "an answer gets that answer again, marked `Idempotent-Replayed: true`, without a second "
    "match, request count or serve; a retry sent while the first call is still being "
    "matched waits for it. On a timeout or a dropped connection, retry the same body. On a "
    "502, wait `Retry-After` seconds and retry the same body: a 502 is not remembered, so "
    "the retry is matched afresh. After 120 s the same body is a new request."
)


REPLAYED = {
    "description": "`true` when this answers a retry of the same call (same key, body and "
    "X-Forwarded-For) within 120 s: the first call's answer again, counted once",
    "schema": {"const": "true"},
}


def ugc_process_doc(ctx: Context, path: str, *, sandbox: bool) -> dict[str, Any]:
    components: dict[str, Any] = dict(UGC_COMPONENTS)
    response: dict[str, Any] = {"oneOf": [ref("UgcMatched"), ref("NoMatch")]}
    request = ref("UgcProcessRequest")
    summary = "Match an ad to a post"
    if sandbox:
        components.update(declared(SandboxProcessRequest)[1])
        components["SandboxExplain"] = SANDBOX_EXPLAIN
        explain = {"explain": ref("SandboxExplain")}
        components["SandboxMatched"] = {
            **UGC_MATCHED,
            "properties": {**UGC_MATCHED["properties"], **explain},
        }
        components["SandboxNoMatch"] = {
            **NO_MATCH,
            "properties": {**NO_MATCH["properties"], **explain},
        }
        request = ref("SandboxProcessRequest")
        response = {
            "oneOf": [ref("SandboxMatched"), ref("SandboxNoMatch")],
            "description": "The production shapes; with explain: true also an `explain` "
            "object. About 1 post_id in 5 gets the no-match body (a hash of post_id).",
        }
        summary = "Sandbox: match against the static catalogue"
    op = operation(
        ctx,
        summary,
        {
            **json_body(response, "Matched, empty or no match"),
            "headers": {"Idempotent-Replayed": REPLAYED},
        },
        (400, 401, 413, 415, 429, 502),
        tag="ugc",
        body=request,
        params=[
            {
                "name": "X-Forwarded-For",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "The end user's IP, for geo targeting when geo_target has "
                "no usable signal (leftmost entry)",
            }
        ],
    )
    op["description"] = RETRIES
    return {"paths": {path: {"post": op}}, "components": {"schemas": components}}


# -- AI ----------------------------------------------------------------------------------------

AI_AD = {
    "type": "object",
    "required": ["ad_id", "placement", *_CREATIVE_REQ, "render_impression_url"],
    "properties": {
        "ad_id": {
            "type": "integer",
            "minimum": 1,
            "maximum": 2**53 - 1,
            "description": "An integer, stable per ad, derived from the catalogue ad's string "
            "id (below 2^53, so exact in JavaScript). Note: UGC answers carry the string id "
            "as `ad_id` instead; keep the two types apart in a typed client.",
        },
        "placement": {"type": "string", "enum": ["after_message"]},
        **CREATIVE,
        "click_through_url": {
            "type": "string",
            "description": "The advertiser's URL, to open as given: exactly as the advertiser "
            "gave it, except that each {click_id} macro the advertiser put in it already holds "
            "the id click_url stores for this click when fired without &click_id= (the id the "
            "advertiser reports a conversion with)",
        },
        "render_impression_url": {
            "type": "string",
            "format": "uri",
            "description": "Signed render beacon, for this partner: fire it (GET) verbatim "
            "when the ad is rendered",
        },
        "view_impression_url": {
            "type": "string",
            "format": "uri",
            "description": "Signed viewable-impression beacon, for this partner: fire it "
            "(GET) verbatim when the ad is viewable",
        },
        "click_url": {
            "type": "string",
            "format": "uri",
            "description": "Signed click beacon, for this partner: fire it (GET) once when "
            "the user clicks the ad, beside opening click_through_url. It may carry "
            "&click_id=ID appended to name the click (the id a CPA conversion later reports); "
            "without it the click's id is the one click_through_url's {click_id} macro "
            "received, so for an ad whose advertiser put the macro there append none or that "
            "same id",
        },
    },
}
AI_RESPONSE = {
    "type": "object",
    "required": ["message_id", "ads"],
    "properties": {
        "message_id": {"type": "string"},
        "ads": {"type": "array", "items": ref("AiAd")},
        "no_ad_reason": {
            "type": "string",
            "description": "Only when ads is empty: unsafe (brand safety; also every turn "
            "of a conversation for 24 hours after a turn judged self-harm), "
            "no_relevant_demand, or the gate that held the most relevant ads back: "
            "disabled_in_thread, frequency_capped, budget_exhausted, daily_cap_reached, "
            "pacing_ahead (suppressed: an answer without ads or reason)",
        },
    },
}


def ai_process_doc(ctx: Context, path: str) -> dict[str, Any]:
    op = operation(
        ctx,
        "Match an ad to an assistant turn",
        {
            **json_body(ref("AiProcessResponse"), "Ads (possibly none, with no_ad_reason)"),
            "headers": {"Idempotent-Replayed": REPLAYED},
        },
        (401, 413, 415, 422, 429, 502),
        tag="ai",
        body=ref("AiProcessRequest"),
    )
    op["description"] = RETRIES
    return {
        "paths": {path: {"post": op}},
        "components": {
            "schemas": {
                "PixelTracker": PIXEL,
                "AiAd": AI_AD,
                **declared(AiProcessRequest)[1],
                "AiProcessResponse": AI_RESPONSE,
            }
        },
    }
