"""Signed beacon material shared by the routes that hand it out and those that take it back.

- AI beacon URLs: built by ``/v1/ai/process``, verified by
  ``/dea/ai/impressions/{render,view}`` and ``/dea/ai/click``. ``sig`` covers kind, ad,
  message, conversation, the partner's scope (``edge.threads.partner_scope``) and the ad
  set's pricing model and bid as the ad was served (``pricing``, what the view, click and
  conversion bill under), the rotation family of the partner's key (``key_family``,
  whose report row the view, click and conversion count for) and the URL's issue time
  (``issued_at``, epoch seconds): a URL is good for ``AI_URL_MAX_AGE_SECONDS`` after it,
  as an impression token is, and from ``CLOCK_SKEW_SECONDS`` before it (another
  node's clock may run that far ahead). URLs issued before scopes existed have none of
  these, those issued before pricing was sealed no pricing, family or issue time, those
  issued before the family was sealed no family or issue time, those issued before the
  issue time was sealed no issue time, and are verified and keyed as they were (count for
  no key without a family, and never expire without an issue time: an upgrade loses none
  of the beacons of URLs handed out before it).
- Impression tokens: issued with every filled ``/dea`` placement and inside the
  edge's own pixel of a ``/v1/ugc/process`` ad; single-use (the token id is the dedupe key)
  and valid for ``IMPRESSION_TOKEN_TTL_SECONDS`` after its issue time, which may be up to
  ``CLOCK_SKEW_SECONDS`` ahead of the reading node's clock. A pixel's token names the
  partner whose serve issued it (``key_family``); the tag's name none.

What names a partner is its key's rotation family: the id of its first key (``key_`` and
12 hex digits), the id ``edge report`` and ``edge keys list`` print. It is no secret (it
authenticates nothing; only the operator's CLI acts on it) and short; the API key and its
hash are never put in a token or URL.

An impression token is read on every impression beacon, so its form is chosen for reading:
a version byte, then the claims as a msgpack array in the fields' order (each value typed
and length-prefixed by msgpack itself, so the bytes split one way only), in base64 with
the signature of the bytes after a dot (``Signer.seal_bytes``). One C pass turns the
checked bytes into the frozen claims. Tokens of the earlier form (JSON in base64, signed
as text) are always read too: the version byte 3 makes every new token start with "A", and
base64 of JSON starts with "e", so the first character picks the reader.

A node of an earlier release reads the JSON form only. During a rolling upgrade the new
nodes therefore issue the JSON form (``token_form="json"``, the ``EDGE_TOKEN_FORM`` setting)
until every node reads both, so a token issued by one node counts on any other.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
from dataclasses import dataclass
from typing import Literal, cast
from urllib.parse import urlencode

import msgspec

from edge.settings import TokenForm
from edge.signing import Signer, encode_parts
from matcher.types import PricingModel

AI_BEACON_PURPOSE = "ai-beacon/v2"  # v2: length-prefixed parts
IMPRESSION_PURPOSE = "impression/v3"  # v3: a version byte and a msgpack array of the claims
LEGACY_IMPRESSION_PURPOSE = "impression/v2"  # JSON payload; issued during an upgrade only
_TOKEN_VERSION = b"\x03"
_FIRST_CHARACTER = "A"  # base64 of any first byte below 4 starts with it
IMPRESSION_TOKEN_TTL_SECONDS = 24 * 3600
# How far ahead of this node's clock a token's or an AI URL's issue time may be. Another
# node may have issued it, and the clocks of NTP-synced machines differ by milliseconds to
# seconds (more after a host resumes): one from a node that runs ahead is not refused as
# expired. An issue time further ahead is no clock's drift, and it is refused.
CLOCK_SKEW_SECONDS = 300
# An AI URL is the AI product's impression token: the answer it came with is rendered,
# viewed and clicked while the conversation is on screen, so it is good for as long.
AI_URL_MAX_AGE_SECONDS = IMPRESSION_TOKEN_TTL_SECONDS
AiBeaconKind = Literal["render", "view", "click"]
Surface = Literal["url", "ugc"]
PricingType = Literal["cpc", "cpm", "cpa"]
# An ad set's pricing model and bid as a token seals them: (type, bid in USD).
SealedPricing = tuple[PricingType, float]


_AD_NUMBER = re.compile(r"[0-9]{1,16}")


class InvalidToken(ValueError):
    """A token or beacon signature that is forged, malformed, expired or for elsewhere;
    ``field``: the query parameter at fault, when it is not the signature."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ExpiredBeacon(InvalidToken):
    """A genuine AI beacon URL fired past its max age (or issued too far in the future)."""


# -- AI beacon URLs ----------------------------------------------------------------------------


_SCOPE = re.compile(r"[A-Za-z0-9_\-]{8,64}")
_KEY_FAMILY = re.compile(r"[A-Za-z0-9_\-]{1,64}")  # a key id (edge.keys), as issued
_ISSUED_AT = re.compile(r"[0-9]{1,12}")  # whole epoch seconds, as issued
# An AI URL's pricing: "<type>:<bid in USD>", the bid as Python writes a float back.
_PRICING = re.compile(r"(cpc|cpm|cpa):([0-9]{1,12}(?:\.[0-9]{1,20})?(?:e-?[0-9]{1,3})?)")


def pricing_text(pricing: PricingModel) -> str:
    """The pricing as an AI URL carries it (``cpc:1.25``): the bid's shortest exact form."""
    return f"{pricing.type}:{pricing.bid_amount!r}"


def _pricing_of(text: str) -> PricingModel:
    found = _PRICING.fullmatch(text)
    if found is None:
        raise InvalidToken("the beacon's pricing is not one this edge issued", "pricing")
    kind = cast(PricingType, found[1])
    return PricingModel(kind, float(found[2]))


def _ai_parts(
    kind: str,
    ad_id: int,
    message_id: str,
    conversation_id: str,
    scope: str,
    pricing: str,
    key_family: str,
    issued_at: str,
) -> tuple[str, ...]:
    # A URL without a scope (issued before scopes) signs the four parts it always did; with
    # one, five; with a pricing too (never without a scope), six; with a key family too
    # (never without a pricing), seven; with an issue time too (never without a key
    # family), eight: length-prefixed parts never let one form's signature stand for
    # another's, so no part can be stripped from a URL that has it.
    parts = (kind, str(ad_id), message_id, conversation_id)
    if not scope:
        return parts
    if not pricing:
        return (*parts, scope)
    if not key_family:
        return (*parts, scope, pricing)
    if not issued_at:
        return (*parts, scope, pricing, key_family)
    return (*parts, scope, pricing, key_family, issued_at)


def _ai_query(
    signer: Signer,
    kind: str,
    ad_id: int,
    message_id: str,
    conv: str,
    scope: str | None,
    pricing: PricingModel | None,
    key_family: str | None,
    issued_at: float | None,
) -> str:
    query: dict[str, str | int] = {"ad_id": ad_id, "message_id": message_id}
    query["conversation_id"] = conv
    priced = family = issued = ""
    if scope:
        query["scope"] = scope
        if pricing is not None:  # sealed only beside a scope: every URL issued now has one
            priced = query["pricing"] = pricing_text(pricing)
            if key_family:  # only beside a pricing: every URL issued now has one
                family = query["key_family"] = key_family
                if issued_at is not None:  # only beside a family: every URL issued now
                    issued = query["issued_at"] = str(int(issued_at))
    parts = _ai_parts(kind, ad_id, message_id, conv, scope or "", priced, family, issued)
    query["sig"] = signer.sign(AI_BEACON_PURPOSE, *parts)
    return urlencode(query)


def ai_beacon_urls(
    signer: Signer,
    base_url: str,
    ad_id: int,
    message_id: str,
    conversation_id: str | None,
    *,
    scope: str | None,
    pricing: PricingModel | None = None,
    key_family: str | None = None,
    issued_at: float | None = None,
) -> tuple[str, str]:
    """(render_impression_url, view_impression_url), ready to fire verbatim. ``scope``: the
    partner's (``edge.threads.partner_scope``); None builds the form issued before scopes
    existed (for tests of it: the edge always names the partner). ``pricing``: the ad
    set's as the ad is served, sealed in the URL (with a scope only); None builds the form
    issued before pricing was sealed. ``key_family``: the rotation family of the partner's
    key (``KeyRecord.family``), sealed beside a pricing only; None builds the form issued
    before it was sealed. ``issued_at``: now (the edge's clock), sealed beside a key family
    only, whole seconds; None builds the form issued before it was sealed, which never
    expires."""
    conv = conversation_id or ""
    sealed = (scope, pricing, key_family, issued_at)
    render, view = (
        f"{base_url}/dea/ai/impressions/{kind}?"
        + _ai_query(signer, kind, ad_id, message_id, conv, *sealed)
        for kind in ("render", "view")
    )
    return render, view


def ai_click_url(
    signer: Signer,
    base_url: str,
    ad_id: int,
    message_id: str,
    conversation_id: str | None,
    *,
    scope: str | None,
    pricing: PricingModel | None = None,
    key_family: str | None = None,
    issued_at: float | None = None,
) -> str:
    """The click beacon URL of an AI ad: fired once when the user clicks it. The partner may
    append ``&click_id=...`` (its own id for the click, unsigned). ``scope``, ``pricing``,
    ``key_family`` and ``issued_at`` as in ``ai_beacon_urls``."""
    conv = conversation_id or ""
    sealed = (scope, pricing, key_family, issued_at)
    query = _ai_query(signer, "click", ad_id, message_id, conv, *sealed)
    return f"{base_url}/dea/ai/click?" + query


@dataclass(frozen=True, slots=True)
class AiBeacon:
    """A verified AI beacon. Partners number their conversations and messages themselves,
    so a ``message_id`` repeats across conversations and a conversation id across
    partners: its impression and click are keyed on the message in its conversation of
    its partner (``scope``, signed in the URL). The keys, by the URL's form:

    - with a scope (every URL issued now): ``ai-s:<scope>:...``, then the conversation id
      preceded by its length (0 without one) and the message id; a scope holds no colon;
    - issued before scopes, with a conversation: ``ai-c:...`` as then (the conversation id
      preceded by its length); without one: ``ai:...``, the message id alone.

    So no two partners, (conversation, message) pairs or URL forms share a key, and a URL
    handed out before scopes counts under exactly the key it always had. The sealed
    ``pricing``, ``key_family`` and ``issued_at`` are in no key: a URL names its view with
    or without them (a message served again hands out the same keys)."""

    kind: AiBeaconKind
    ad_id: int
    message_id: str
    conversation_id: str
    scope: str = ""  # the partner's (edge.threads.partner_scope); "" issued before scopes
    # The ad set's pricing model and bid as the ad was served; None issued before it was
    # sealed.
    pricing: PricingModel | None = None
    # The rotation family of the partner's key (whose report row it counts for); None
    # issued before it was sealed.
    key_family: str | None = None
    # When the URL was issued (epoch seconds); None issued before it was sealed.
    issued_at: int | None = None

    def _keyed(self, *head: str) -> str:
        conv, message = self.conversation_id, self.message_id
        if self.scope:
            parts = (*head, str(self.ad_id), str(len(conv)), conv, message)
            return ":".join(("ai-s", self.scope, *parts))
        if not conv:
            return ":".join(("ai", *head, str(self.ad_id), message))
        return ":".join(("ai-c", *head, str(self.ad_id), str(len(conv)), conv, message))

    def impression_key(self, kind: AiBeaconKind) -> str:
        """The dedupe key of this ad's ``kind`` impression (render, view) of the message."""
        return self._keyed(kind)

    @property
    def click_impression_key(self) -> str:
        """The impression a click on this ad in the message belongs to (one valid click)."""
        return self._keyed()

    @property
    def derived_click_id(self) -> str:
        """The click id when the partner names none: one per ad and message (in its
        conversation, of its partner), so a refired click URL is a replay."""
        if self.scope:
            ids = (self.scope, str(self.ad_id), self.message_id, self.conversation_id)
            return "ai-" + hashlib.sha256(encode_parts("ai-click", *ids)).hexdigest()[:32]
        # Issued before scopes: the id it always had (ids hold no line separators, so the
        # join is unambiguous).
        legacy = [str(self.ad_id), self.message_id]
        if self.conversation_id:
            legacy.append(self.conversation_id)
        return "ai-" + hashlib.sha256("\n".join(legacy).encode()).hexdigest()[:32]


def ai_derived_click_id(
    ad_id: int, message_id: str, conversation_id: str | None, *, scope: str
) -> str:
    """The click id ``/dea/ai/click`` stores for this ad's click URL fired without
    ``&click_id=`` (what an advertiser's ``{click_id}`` macro becomes in an AI answer)."""
    return AiBeacon("click", ad_id, message_id, conversation_id or "", scope).derived_click_id


def ugc_derived_click_id(token_id: str) -> str:
    """The click id ``GET /dea/ugc/click`` stores for a partner's UGC ad fired without
    ``&click_id=`` (what an advertiser's ``{click_id}`` macro becomes in a UGC answer): one
    per impression token, so a refired click URL is a replay."""
    return "ugc-" + hashlib.sha256(encode_parts("ugc-click", token_id)).hexdigest()[:32]


def verify_ai_beacon(
    signer: Signer, kind: AiBeaconKind, query: dict[str, str], *, now: float
) -> AiBeacon:
    """The beacon the query describes, or InvalidToken when it is not one we signed
    (``ExpiredBeacon`` when it is, but its issue time is not within its max age of ``now``,
    the edge's clock)."""
    for name in ("ad_id", "message_id", "sig"):
        if name not in query:
            raise InvalidToken(f"ad_id, message_id and sig are required; {name} is missing", name)
    raw_ad = query["ad_id"]
    if not _AD_NUMBER.fullmatch(raw_ad):  # int() also takes "+3", " 3", "3_0" and "٣"
        raise InvalidToken("ad_id is not one this edge issued (the number of an ad)", "ad_id")
    ad_id = int(raw_ad)
    message_id = query["message_id"]
    conv = query.get("conversation_id", "")
    sig = query["sig"]
    scope = query.get("scope")
    if scope is not None and not _SCOPE.fullmatch(scope):
        raise InvalidToken("the beacon's scope is not one this edge issued", "scope")
    priced = query.get("pricing")
    pricing = None if priced is None else _pricing_of(priced)
    family = query.get("key_family")
    if family is not None and not _KEY_FAMILY.fullmatch(family):
        raise InvalidToken("the beacon's key_family is not one this edge issued", "key_family")
    issued = query.get("issued_at")
    if issued is not None and not _ISSUED_AT.fullmatch(issued):
        raise InvalidToken("the beacon's issued_at is not one this edge issued", "issued_at")
    # The edge seals each of these with the one before it: a URL that has one without the
    # one before lost that one (a URL cut or rebuilt by hand).
    chain = (("scope", scope), ("pricing", priced), ("key_family", family), ("issued_at", issued))
    for (before, had), (name, value) in itertools.pairwise(chain):
        if value is not None and not had:
            raise InvalidToken(
                f"{before} is missing from the beacon URL (its {name} is sealed with it)", before
            )
    sealed = (scope or "", priced or "", family or "", issued or "")
    parts = _ai_parts(kind, ad_id, message_id, conv, *sealed)
    if not signer.verify(AI_BEACON_PURPOSE, *parts, signature=sig):
        raise InvalidToken("the beacon signature does not match")
    issued_at = None if issued is None else int(issued)
    # Checked once the URL is known to be ours: a forgery is told it is one, whatever its age.
    if issued_at is not None and now - issued_at > AI_URL_MAX_AGE_SECONDS:
        hours = AI_URL_MAX_AGE_SECONDS // 3600
        raise ExpiredBeacon(f"the beacon URL has expired ({hours} hours after its answer)")
    if issued_at is not None and issued_at - now > CLOCK_SKEW_SECONDS:
        raise ExpiredBeacon("the beacon URL's issue time is ahead of this edge's clock")
    return AiBeacon(kind, ad_id, message_id, conv, scope or "", pricing, family, issued_at)


# -- impression tokens -------------------------------------------------------------------------


class ImpressionClaims(msgspec.Struct, frozen=True, array_like=True):
    """What a valid impression token says (a frozen msgspec ``Struct``: made per beacon, at a
    fraction of a frozen dataclass's cost). The fields' order is the token's layout: a new
    field goes last with a default, any other change is a new token version."""

    token_id: str  # unique per token: the key that makes a replay count once
    surface: Surface  # which beacon route takes it
    env: str
    ad_id: str
    campaign_id: str
    issued_at: int
    cpm_usd: float | None = None  # the bid when the ad set prices per mille, at issue time
    publisher_id: str | None = None
    post_id: str | None = None
    slot_id: str | None = None
    # A keyed hash of the client the token was issued to (edge.ivt.client_binding): the
    # tag's match routes bind their tokens; a partner's pixel token is not bound (None).
    client: str | None = None
    # The ad set's pricing model and bid when the ad was served, what its click (CPC) and
    # conversion (CPA) bill under; None in a token issued before it was sealed.
    pricing: SealedPricing | None = None
    # The rotation family of the partner's key whose serve issued the token (a pixel's:
    # its impression and click count for that key's report row); None in the tag's tokens
    # and in a token issued before it was sealed.
    key_family: str | None = None

    @property
    def served_pricing(self) -> PricingModel | None:
        """The pricing model sealed at issue, or None when the token has none."""
        if self.pricing is None:
            return None
        return PricingModel(*self.pricing)


def token_id(now: float) -> str:
    """A new token id: its issue time (epoch microseconds, 13 hex digits until 2112), then 96
    random bits.

    The id is the impression's dedupe key, which the store keeps in a B-tree: ids that sort
    by issue time put the keys of beacons that arrive together on the few pages of the
    recent end of the index, instead of one random page per beacon."""
    return f"{int(now * 1_000_000):013x}{secrets.token_urlsafe(12)}"


def issue_impression_token(
    signer: Signer,
    *,
    surface: Surface,
    env: str,
    ad_id: str,
    campaign_id: str,
    now: float,
    cpm_usd: float | None = None,
    publisher_id: str | None = None,
    post_id: str | None = None,
    slot_id: str | None = None,
    client: str | None = None,
    pricing: PricingModel | None = None,
    key_family: str | None = None,
    form: TokenForm = "binary",
) -> tuple[str, ImpressionClaims]:
    """A new token and its claims; ``pricing``: the ad set's pricing model as the ad is
    served (sealed, so the ad's click and conversion bill under it); ``key_family``: the
    partner's key family when a partner's serve issues it; ``form`` "json" issues
    the earlier form, which nodes of an earlier release read (see the module's note on
    rolling upgrades)."""
    issued_at = int(now)
    claims = ImpressionClaims(
        token_id=token_id(now),
        surface=surface,
        env=env,
        ad_id=ad_id,
        campaign_id=campaign_id,
        issued_at=issued_at,
        cpm_usd=cpm_usd,
        publisher_id=publisher_id,
        post_id=post_id,
        slot_id=slot_id,
        client=client,
        pricing=None if pricing is None else (pricing.type, pricing.bid_amount),
        key_family=key_family,
    )
    if form == "json":
        return signer.seal(LEGACY_IMPRESSION_PURPOSE, _legacy_payload(claims)), claims
    token = signer.seal_bytes(IMPRESSION_PURPOSE, _TOKEN_VERSION + _ENCODER.encode(claims))
    return token, claims


def _legacy_payload(claims: ImpressionClaims) -> dict[str, object]:
    """The claims as the earlier form's JSON payload (the keys ``_read_legacy`` reads);
    the sealed pricing and key family only when there is one (an earlier release ignores
    the keys)."""
    payload: dict[str, object] = {
        "t": claims.token_id,
        "s": claims.surface,
        "e": claims.env,
        "a": claims.ad_id,
        "c": claims.campaign_id,
        "i": claims.issued_at,
        "m": claims.cpm_usd,
        "p": claims.publisher_id,
        "o": claims.post_id,
        "l": claims.slot_id,
        "b": claims.client,
    }
    if claims.pricing is not None:
        payload["r"] = claims.pricing
    if claims.key_family is not None:
        payload["k"] = claims.key_family
    return payload


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(ImpressionClaims)


def read_impression_token(
    signer: Signer, token: object, *, surface: Surface, env: str, now: float
) -> ImpressionClaims:
    """Claims of a valid token for this surface and environment, else InvalidToken."""
    if not isinstance(token, str):
        raise InvalidToken("the impression token is not one this edge issued")
    if not token.startswith(_FIRST_CHARACTER):
        claims = _read_legacy(signer, token)
    else:
        data = signer.unseal_bytes(IMPRESSION_PURPOSE, token)
        if data is None or data[:1] != _TOKEN_VERSION:
            raise InvalidToken("the impression token is not one this edge issued")
        try:
            claims = _DECODER.decode(memoryview(data)[1:])
        except msgspec.DecodeError:
            raise InvalidToken("the impression token is malformed") from None
    if claims.surface != surface:
        raise InvalidToken(f"this token belongs to the /dea/{claims.surface} beacon")
    if claims.env != env:
        raise InvalidToken(f"this token was issued by the {claims.env} environment")
    age = now - claims.issued_at
    if age > IMPRESSION_TOKEN_TTL_SECONDS:
        raise InvalidToken("the impression token has expired")
    if age < -CLOCK_SKEW_SECONDS:
        raise InvalidToken("the impression token's issue time is ahead of this edge's clock")
    return claims


def _read_legacy(signer: Signer, token: str) -> ImpressionClaims:
    """Claims of a token of the earlier JSON form (issued before an upgrade)."""
    payload = signer.unseal(LEGACY_IMPRESSION_PURPOSE, token)
    if payload is None:
        raise InvalidToken("the impression token is not one this edge issued")
    try:
        claims = ImpressionClaims(
            token_id=str(payload["t"]),
            surface=payload["s"],
            env=payload["e"],
            ad_id=str(payload["a"]),
            campaign_id=str(payload["c"]),
            issued_at=int(payload["i"]),
            cpm_usd=payload["m"],
            publisher_id=payload["p"],
            post_id=payload["o"],
            slot_id=payload["l"],
            client=payload.get("b"),
            pricing=msgspec.convert(payload.get("r"), SealedPricing | None),
            key_family=msgspec.convert(payload.get("k"), str | None),
        )
    except (KeyError, TypeError, ValueError, msgspec.ValidationError):
        raise InvalidToken("the impression token is malformed") from None
    return claims
