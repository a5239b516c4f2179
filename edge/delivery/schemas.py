"""JSON Schemas of the /dea bodies: served in /openapi.json and enforced by ``validate``.

docs/dea-api.md explains them in prose; these are the normative form. ``struct_of`` derives
a msgspec ``Struct`` from a flat body schema (the beacons' hot bodies), so the bytes are
checked in one C pass by the same declaration.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from edge.delivery.validate import json_schema_pattern

MAX_SLOTS = 20
MAX_PAGE_TEXT = 20_000
MAX_POST_TEXT = 10_000
FAILURE_REASONS = ("render_error", "creative_error", "timeout", "csp_blocked", "other")
NO_AD_REASONS = ("unsafe", "no_relevant_demand", "backoff", "suppressed")

PUBLISHER_ID = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
    "description": "Registered with `edge publishers add`.",
}
# Ids hold no control, invisible format or line-separator characters: "abc" and "abc\n" (or
# "abc" with a zero-width space) would otherwise be two ids that look like one.
ID_TEXT = (
    r"^[^\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    r"\u2060-\u206f\ufeff\ufff9-\ufffb]+$"
)
TAG_VERSION = {
    "type": "string",
    "minLength": 1,
    "maxLength": 32,
    "pattern": ID_TEXT,
    "description": "Tag version.",
}
PAGE_URL = {"type": "string", "maxLength": 2048, "pattern": r"^https?://[^\s]+$"}
SLOT_ID = {"type": "string", "minLength": 1, "maxLength": 128, "pattern": ID_TEXT}
POST_ID = {"type": "string", "minLength": 1, "maxLength": 256, "pattern": ID_TEXT}
# Signed: a token that is not base64url "payload.signature" fails its signature check (400
# invalid_token), so no pattern here.
TOKEN = {"type": "string", "minLength": 1, "maxLength": 2048}
IMPRESSION_ID = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9_\-]{8,64}$",
    "description": "Unique per impression, made by the tag (128 random bits); a retry reuses it.",
}


def _object(required: list[str], **props: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": props,
    }


KEYWORDS_REQUEST = _object(
    ["publisher_id", "v", "page_url", "slots"],
    publisher_id=PUBLISHER_ID,
    v=TAG_VERSION,
    page_url=PAGE_URL,
    title={"type": "string", "maxLength": 500},
    text={"type": "string", "maxLength": MAX_PAGE_TEXT},
    slots={
        "type": "array",
        "items": SLOT_ID,
        "minItems": 1,
        "maxItems": MAX_SLOTS,
        "uniqueItems": True,
    },
)

PLACEMENT_REQUEST = _object(
    ["slot_id", "text"],
    slot_id=SLOT_ID,
    post_id=POST_ID,
    title={"type": "string", "maxLength": 500},
    text={"type": "string", "maxLength": MAX_POST_TEXT},
)
PLACEMENTS_REQUEST = _object(
    ["publisher_id", "v", "page_url", "placements"],
    publisher_id=PUBLISHER_ID,
    v=TAG_VERSION,
    page_url=PAGE_URL,
    placements={"type": "array", "items": PLACEMENT_REQUEST, "minItems": 1, "maxItems": MAX_SLOTS},
)

IMPRESSION_REQUEST = _object(
    ["impression_token", "impression_id", "v"],
    impression_token=TOKEN,
    impression_id=IMPRESSION_ID,
    v=TAG_VERSION,
    visible_ratio={"type": "number", "minimum": 0, "maximum": 1},
    visible_ms={"type": "integer", "minimum": 0, "maximum": 86_400_000},
)

HOVER_REQUEST = _object(
    ["impression_token", "hover_ms", "v"],
    impression_token=TOKEN,
    hover_ms={"type": "integer", "minimum": 0, "maximum": 3_600_000},
    v=TAG_VERSION,
)

FAILURE_REQUEST = _object(
    ["publisher_id", "v", "page_url", "slot_id", "reason"],
    publisher_id=PUBLISHER_ID,
    v=TAG_VERSION,
    page_url=PAGE_URL,
    slot_id=SLOT_ID,
    impression_token=TOKEN,
    reason={"type": "string", "enum": list(FAILURE_REASONS)},
    message={"type": "string", "maxLength": 1000},
)

AI_BEACON_QUERY = (
    "ad_id",
    "message_id",
    "conversation_id",
    "scope",
    "pricing",
    "key_family",
    "issued_at",
    "sig",
)

CLICK_ID = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9_\-]{8,64}$",
    "description": "Unique per rendered ad, made by the tag (128 random bits); a resent click "
    "reuses it. It is the id a conversion reports, and what a {click_id} macro in "
    "click_through_url becomes. Never beginning ugc- or ai-: those are the edge's own ids "
    "(400).",
}
CLICK_REQUEST = _object(
    ["impression_token", "click_id", "v"],
    impression_token=TOKEN,
    click_id=CLICK_ID,
    v=TAG_VERSION,
)
# A click URL's &click_id=: the partner's own id (the tag's body carries its own, CLICK_ID).
PARTNER_CLICK_ID = {
    "type": "string",
    "pattern": r"^[A-Za-z0-9_\-]{8,64}$",
    "description": "The partner's id for this click; the id a conversion reports.",
}
AI_CLICK_QUERY = (*AI_BEACON_QUERY, "click_id")
UGC_CLICK_QUERY = ("t", "click_id")
CONVERSION_REQUEST = _object(
    ["click_id"],
    click_id={
        **CLICK_ID,
        "description": "The click's id exactly as the click carried it, which is what the "
        "advertiser's {click_id} macro received: the tag's, the partner's &click_id= on an "
        "AI or UGC click_url, or without one the id that click URL stores (given in the "
        "answer's click_through_url).",
    },
    value_usd={
        "type": "number",
        "minimum": 0,
        "maximum": 1e9,
        "description": "What the conversion was worth to the advertiser (reported, not billed).",
    },
)

# -- responses (documentation; the tests check answers against them) ---------------------------

PIXEL_TRACKER = _object(
    ["vendor", "tracker_type", "url"],
    vendor={"type": "string"},
    tracker_type={"type": "string"},
    url={"type": "string"},
)
AD = _object(
    ["ad_id", "title", "cta", "advertiser_name", "description", "click_through_url",
     "ttl_seconds", "pixel_trackers", "impression_token", "relevancy_score"],
    ad_id={"type": "string"},
    title={"type": "string"},
    cta={"type": "string"},
    advertiser_name={"type": "string"},
    description={"type": "string"},
    click_through_url={
        "type": "string",
        "description": "As the advertiser gave it; the tag opens it so, but for each "
        "{click_id} the advertiser put in it, which becomes this rendering's click_id.",
    },
    ttl_seconds={"type": "integer"},
    pixel_trackers={"type": "array", "items": PIXEL_TRACKER},
    impression_token={"type": "string", "description": "Signed, single-use; send it back."},
    relevancy_score={"type": "number", "minimum": 0, "maximum": 1},
)  # fmt: skip
PLACEMENT = _object(
    ["slot_id", "ad"],
    slot_id=SLOT_ID,
    post_id=POST_ID,
    ad={"type": ["object", "null"], **{k: v for k, v in AD.items() if k != "type"}},
    reason={"type": "string", "enum": list(NO_AD_REASONS)},
    retry_after_seconds={"type": "integer", "minimum": 0},
)
KEYWORDS_RESPONSE = _object(
    ["safe", "keywords", "placements"],
    safe={"type": "boolean"},
    keywords={"type": "array", "items": {"type": "string"}},
    placements={"type": "array", "items": PLACEMENT},
)
PLACEMENTS_RESPONSE = _object(["placements"], placements={"type": "array", "items": PLACEMENT})
IMPRESSION_RESPONSE = _object(
    ["acknowledged", "counted"],
    acknowledged={"type": "boolean"},
    counted={"type": "boolean", "description": "False for a replay: nothing was counted."},
)
ACK_RESPONSE = _object(["acknowledged"], acknowledged={"type": "boolean"})
CLICK_RESPONSE = _object(
    ["acknowledged", "counted"],
    acknowledged={"type": "boolean"},
    counted={
        "type": "boolean",
        "description": "False for a replay (this click_id stored already with this "
        "impression_token): nothing was counted. A new click is counted even when it is "
        "invalid (stored with its reason, never billed).",
    },
)
CONVERSION_RESPONSE = _object(
    ["acknowledged", "counted", "billed_usd"],
    acknowledged={"type": "boolean"},
    counted={"type": "boolean", "description": "False when this click had converted already."},
    billed_usd={"type": "number", "description": "What this call billed (0 unless CPA)."},
)


# -- the same schemas as msgspec types ---------------------------------------------------------

_PYTHON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float}
_META = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "minimum": "ge",
    "maximum": "le",
}
_NOTES = frozenset({"type", "description", "examples"})


def struct_of(name: str, schema: dict[str, Any]) -> type[msgspec.Struct]:
    """A msgspec ``Struct`` accepting what ``schema`` accepts: a closed object whose
    properties are strings, integers or numbers with lengths, patterns and ranges. Decoded
    with ``strict=True``, a value never changes type (``true`` is not an integer, ``1.0``
    is not one either); a pattern is searched, its final ``$`` the end of the text, as
    ``validate`` reads it. Anything else in the schema is a ``ValueError``: a schema this
    cannot express stays with ``validate`` alone."""
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise ValueError(f"{name}: only closed objects can be a Struct")
    required = set(schema.get("required", ()))
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for key, sub in schema["properties"].items():
        kind = sub.get("type")
        if not isinstance(kind, str) or kind not in _PYTHON_TYPES:
            raise ValueError(f"{name}.{key}: type {kind!r} has no Struct form")
        meta: dict[str, Any] = {}
        for keyword, value in sub.items():
            if keyword in _META:
                meta[_META[keyword]] = value
            elif keyword == "pattern":
                meta["pattern"] = json_schema_pattern(value).pattern
            elif keyword not in _NOTES:
                raise ValueError(f"{name}.{key}: {keyword!r} has no Struct form")
        python: Any = _PYTHON_TYPES[kind]
        if meta:
            python = Annotated[python, msgspec.Meta(**meta)]
        if key in required:
            fields.append((key, python))
        else:
            fields.append((key, python | msgspec.UnsetType, msgspec.UNSET))
    missing = required - set(schema["properties"])
    if missing:
        raise ValueError(f"{name}: required fields without a declaration: {sorted(missing)}")
    return msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)
