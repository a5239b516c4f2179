"""The partner request bodies: each declared once, as a msgspec ``Struct``.

The declaration is both the check (``edge.partner.declare.decode``: one pass from bytes to a
typed value) and the published schema (``edge.partner.schemas`` takes their JSON Schema),
so the document and the behaviour cannot disagree. Unknown fields are refused (a misspelt
``geo_taget`` must not silently drop targeting), like the ``/dea`` payloads; a null field is
the same as an absent one. Limits are ours where the partner contract names none and are
documented in docs/decisions.md and the OpenAPI document.

The ``parse_*`` functions decode a body and turn it into the value the routes use
(``created_at`` as epoch seconds, the geo fields as a ``GeoSignal``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from edge.errors import BadRequest, EdgeError, Unprocessable
from edge.partner.declare import Invalid, decode, text
from edge.partner.geo import LOCATION as LOCATION_TEXT
from edge.partner.geo import GeoTarget, geo_signal, location_signal
from matcher.catalogue import parse_timestamp
from matcher.types import GeoSignal

MAX_MESSAGE_CHARS = 10_000  # the earlier routes' limit, kept for /v1 too (a longer one: 400)
MAX_ID_CHARS = 256
MAX_AI_TEXT_CHARS = 20_000  # assistant answers run longer than posts
MAX_DISABLE_PAIRS = 100
MAX_META_DEPTH = 16  # meta_data is stored as JSON; deeper nesting is refused, never a 500

Id = Annotated[str, text(MAX_ID_CHARS, ident=True)]
Message = Annotated[
    str, text(MAX_MESSAGE_CHARS, description="Not blank, at most 10,000 characters")
]
CreatedAt = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=40,
        description="RFC 3339 date-time of the source post; without an offset it is UTC",
        extra_json_schema={"format": "date-time"},
    ),
]


class UgcProcessRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A post to match: /v1/ugc/process."""

    post_id: Id
    message: Message
    created_at: CreatedAt | None = None
    geo_target: GeoTarget | None = None


class SandboxProcessRequest(UgcProcessRequest, forbid_unknown_fields=True):
    """A post to match in the sandbox; `explain: true` adds why."""

    explain: Annotated[bool, Meta(description="true: the answer also says why")] | None = None


class AiProcessRequest(msgspec.Struct, forbid_unknown_fields=True):
    """An assistant turn to match: /v1/ai/process."""

    message_id: Id
    content: Annotated[str, text(MAX_AI_TEXT_CHARS, description="The assistant's answer")]
    conversation_id: (
        Annotated[
            str,
            text(
                MAX_ID_CHARS,
                ident=True,
                description="The conversation this turn belongs to: each ad's frequency cap "
                "counts per conversation, and a turn judged self-harm holds every turn of it "
                "(no ad) for 24 hours. Without it, each turn is a conversation of its own.",
            ),
        ]
        | None
    ) = None
    location: LOCATION_TEXT | None = None
    prompt: (
        Annotated[
            str,
            text(
                MAX_AI_TEXT_CHARS,
                blank=True,
                description="The user's message that this turn answers. Send it: brand safety "
                "reads the user's intent there (an answer about mattresses to a user who wrote "
                "that they do not want to wake up gets no ad only when the prompt is sent), "
                "and the match reads it beside the answer.",
            ),
        ]
        | None
    ) = None


class LegacyMeta(msgspec.Struct):
    """Partner metadata; keys other than `location` are the partner's own and ignored."""

    location: LOCATION_TEXT | None = None


class LegacyProcessRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A post to match on the earlier /ugc/process."""

    post_id: Id
    message: Message
    meta: LegacyMeta | None = None


class DisablePairRequest(msgspec.Struct, forbid_unknown_fields=True):
    """One ad to suppress in one thread."""

    post_id: Id
    ad_id: Id
    meta_data: (
        Annotated[
            dict[str, Any],
            Meta(
                description=f"Analytics, stored as given: at most {MAX_META_DEPTH} levels deep, "
                "integers within 64 bits",
                extra={"max_depth": MAX_META_DEPTH},
            ),
        ]
        | None
    ) = None


DisableRequest = Annotated[
    list[DisablePairRequest], Meta(min_length=1, max_length=MAX_DISABLE_PAIRS)
]


class ImpressionRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A viewable impression on the earlier /ugc/impression."""

    post_id: Id
    ad_id: Id


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


def _created_at(text: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 date-time; a timestamp without offset is taken as UTC."""
    if text is None:
        return None
    when = parse_timestamp(text.strip(), naive_is_utc=True)
    if when is None:
        raise Invalid("created_at", "must be an RFC 3339 timestamp such as 2026-05-01T12:30:00Z")
    return when


def _refused(error: type[EdgeError], exc: Invalid) -> EdgeError:
    return error(f"{exc.path} {exc.message}", field=exc.path)


def parse_ugc(raw: bytes, *, sandbox: bool = False) -> UgcBody:
    """``/v1/ugc/process`` (and the sandbox's ``/ugc/v1/process``, which adds ``explain``)."""
    req: UgcProcessRequest = decode(
        SandboxProcessRequest if sandbox else UgcProcessRequest, raw, BadRequest
    )
    try:
        return UgcBody(
            post_id=req.post_id,
            message=req.message,
            created_at=_created_at(req.created_at),
            geo=geo_signal(req.geo_target, "geo_target"),
            explain=isinstance(req, SandboxProcessRequest) and bool(req.explain),
        )
    except Invalid as exc:
        raise _refused(BadRequest, exc) from None


def parse_ai(raw: bytes) -> AiBody:
    """``/v1/ai/process``; every failure is a 422."""
    req = decode(AiProcessRequest, raw, Unprocessable)
    return AiBody(
        message_id=req.message_id,
        content=req.content,
        conversation_id=req.conversation_id,
        prompt=req.prompt or None,
        geo=location_signal(req.location),
    )


def parse_legacy_process(raw: bytes) -> UgcBody:
    """Earlier ``/ugc/process``: ``meta.location`` instead of ``geo_target``."""
    req = decode(LegacyProcessRequest, raw, BadRequest)
    geo = location_signal(req.meta.location) if req.meta else None
    return UgcBody(post_id=req.post_id, message=req.message, created_at=None, geo=geo)


def parse_disable(raw: bytes) -> list[DisablePair]:
    """Earlier ``/ugc/disable``: a JSON array of suppression pairs."""
    pairs: list[DisablePairRequest] = decode(DisableRequest, raw, BadRequest)
    return [DisablePair(p.post_id, p.ad_id, p.meta_data) for p in pairs]


def parse_impression(raw: bytes) -> tuple[str, str]:
    """Earlier ``/ugc/impression``: (post_id, ad_id)."""
    req = decode(ImpressionRequest, raw, BadRequest)
    return req.post_id, req.ad_id
