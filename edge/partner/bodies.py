"""The partner request bodies, validated into typed values.

Unknown fields are refused (a misspelt ``geo_taget`` must not silently drop targeting),
like the ``/dea`` payloads. Limits are ours where the partner contract names none and are
documented in docs/decisions.md and the OpenAPI document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge.errors import BadRequest, Unprocessable
from edge.partner.fields import Fields, kind
from edge.partner.geo import parse_geo_target, parse_location
from matcher.catalogue import parse_timestamp
from matcher.types import GeoSignal

MAX_MESSAGE_CHARS = 10_000  # the earlier routes' limit, kept for /v1 too (a longer one: 400)
MAX_ID_CHARS = 256
MAX_AI_TEXT_CHARS = 20_000  # assistant answers run longer than posts
MAX_DISABLE_PAIRS = 100
MAX_META_DEPTH = 16  # meta_data is stored as JSON; deeper nesting is refused, never a 500


@dataclass(frozen=True, slots=True)
class UgcBody:
    post_id: str
    message: str
    created_at: float | None
    geo: GeoSignal | None
    explain: bool = False


@dataclass(frozen=True, slots=True)
class AiBody:
    message_id: str
    content: str
    conversation_id: str | None
    prompt: str | None
    geo: GeoSignal | None


@dataclass(frozen=True, slots=True)
class DisablePair:
    post_id: str
    ad_id: str
    meta_data: dict[str, Any] | None


def _message(f: Fields, key: str, max_len: int) -> str:
    # "must be non-empty": whitespace alone carries nothing to match either.
    return f.required(key, max_len=max_len)


def parse_created_at(f: Fields) -> float | None:
    """Epoch seconds of an RFC 3339 date-time; a timestamp without offset is taken as UTC."""
    text = f.text("created_at", max_len=40)
    if text is None:
        return None
    when = parse_timestamp(text.strip(), naive_is_utc=True)
    if when is None:
        raise f.fail("created_at", "must be an RFC 3339 timestamp such as 2026-05-01T12:30:00Z")
    return when


def parse_ugc(data: Any, *, sandbox: bool = False) -> UgcBody:
    """``/v1/ugc/process`` (and the sandbox's ``/ugc/v1/process``, which adds ``explain``)."""
    f = Fields(data, BadRequest)
    allowed = ["post_id", "message", "created_at", "geo_target"]
    f.only([*allowed, "explain"] if sandbox else allowed)
    post_id = f.required("post_id", max_len=MAX_ID_CHARS, ident=True)
    return UgcBody(
        post_id=post_id,
        message=_message(f, "message", MAX_MESSAGE_CHARS),
        created_at=parse_created_at(f),
        geo=parse_geo_target(f.obj("geo_target")),
        explain=f.boolean("explain") if sandbox else False,
    )


def parse_ai(data: Any) -> AiBody:
    """``/v1/ai/process``; every failure is a 422."""
    f = Fields(data, Unprocessable)
    f.only(["message_id", "content", "conversation_id", "location", "prompt"])
    message_id = f.required("message_id", max_len=MAX_ID_CHARS, ident=True)
    return AiBody(
        message_id=message_id,
        content=_message(f, "content", MAX_AI_TEXT_CHARS),
        conversation_id=f.text("conversation_id", max_len=MAX_ID_CHARS, ident=True),
        prompt=f.text("prompt", max_len=MAX_AI_TEXT_CHARS, allow_blank=True) or None,
        geo=parse_location(f, "location"),
    )


def parse_legacy_process(data: Any) -> UgcBody:
    """Earlier ``/ugc/process``: ``meta.location`` instead of ``geo_target``."""
    f = Fields(data, BadRequest)
    f.only(["post_id", "message", "meta"])
    post_id = f.required("post_id", max_len=MAX_ID_CHARS, ident=True)
    message = _message(f, "message", MAX_MESSAGE_CHARS)
    meta = f.obj("meta")  # other meta keys are the partner's own analytics: kept out of matching
    geo = parse_location(meta, "location") if meta is not None else None
    return UgcBody(post_id=post_id, message=message, created_at=None, geo=geo)


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests objects and arrays (a scalar is 0), without recursion."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, depth + 1) for v in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def parse_disable(data: Any) -> list[DisablePair]:
    """Earlier ``/ugc/disable``: a JSON array of suppression pairs."""
    if not isinstance(data, list):
        raise BadRequest(
            f"the body must be a JSON array of {{post_id, ad_id}} pairs, not {kind(data)}",
            field="body",
        )
    if not data:
        raise BadRequest("the array must hold at least one pair", field="body")
    if len(data) > MAX_DISABLE_PAIRS:
        raise BadRequest(f"at most {MAX_DISABLE_PAIRS} pairs per call", field="body")
    pairs = []
    for i, raw in enumerate(data):
        f = Fields(raw, BadRequest, prefix=f"[{i}].")
        f.only(["post_id", "ad_id", "meta_data"])
        meta = f.data.get("meta_data")
        if meta is not None and not isinstance(meta, dict):
            raise f.fail("meta_data", f"must be an object, not {kind(meta)}")
        if meta is not None and json_depth(meta) > MAX_META_DEPTH:
            raise f.fail("meta_data", f"must be nested at most {MAX_META_DEPTH} levels deep")
        post_id = f.required("post_id", max_len=MAX_ID_CHARS, ident=True)
        ad_id = f.required("ad_id", max_len=MAX_ID_CHARS, ident=True)
        pairs.append(DisablePair(post_id, ad_id, meta))
    return pairs


def parse_impression(data: Any) -> tuple[str, str]:
    """Earlier ``/ugc/impression``: (post_id, ad_id)."""
    f = Fields(data, BadRequest)
    f.only(["post_id", "ad_id"])
    post_id = f.required("post_id", max_len=MAX_ID_CHARS, ident=True)
    ad_id = f.required("ad_id", max_len=MAX_ID_CHARS, ident=True)
    return post_id, ad_id
