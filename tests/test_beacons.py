import re
from urllib.parse import parse_qsl, urlsplit

import msgspec
import pytest

from edge.beacons import (
    AI_URL_MAX_AGE_SECONDS,
    CLOCK_SKEW_SECONDS,
    IMPRESSION_PURPOSE,
    IMPRESSION_TOKEN_TTL_SECONDS,
    LEGACY_IMPRESSION_PURPOSE,
    AiBeacon,
    ExpiredBeacon,
    ImpressionClaims,
    InvalidToken,
    ai_beacon_urls,
    issue_impression_token,
    read_impression_token,
    verify_ai_beacon,
)
from edge.signing import Signer
from tests.conftest import other_tail

SIGNER = Signer(b"k" * 32)
OTHER = Signer(b"x" * 32)
SCOPE = "partner-0001"
NOW = 1_790_000_000.0  # what the edge's clock says when a beacon comes


def _query(url):
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def test_ai_urls_are_on_dea_and_verify():
    render, view = ai_beacon_urls(SIGNER, "https://edge.example", 42, "m-1", "c-9", scope=SCOPE)
    assert render.startswith("https://edge.example/dea/ai/impressions/render?")
    assert view.startswith("https://edge.example/dea/ai/impressions/view?")
    q = _query(render)
    assert list(q) == ["ad_id", "message_id", "conversation_id", "scope", "sig"]
    assert (q["ad_id"], q["message_id"], q["conversation_id"]) == ("42", "m-1", "c-9")
    assert q["scope"] == SCOPE
    beacon = verify_ai_beacon(SIGNER, "render", q, now=NOW)
    assert (beacon.kind, beacon.ad_id, beacon.message_id) == ("render", 42, "m-1")
    assert beacon.scope == SCOPE


@pytest.mark.parametrize(
    "tamper",
    [
        lambda q: {**q, "ad_id": "43"},
        lambda q: {**q, "message_id": "m-2"},
        lambda q: {**q, "conversation_id": ""},
        lambda q: {k: v for k, v in q.items() if k != "sig"},
        lambda q: {**q, "ad_id": "forty-two"},
        # The scope names the partner: neither dropped (the unscoped form's keys) nor
        # swapped for another partner's.
        lambda q: {k: v for k, v in q.items() if k != "scope"},
        lambda q: {**q, "scope": "partner-0002"},
        lambda q: {**q, "scope": ""},
        lambda q: {**q, "scope": "partner:0001"},
    ],
)
def test_tampered_ai_beacon_is_refused(tamper):
    render, _ = ai_beacon_urls(SIGNER, "https://e", 42, "m-1", "c-9", scope=SCOPE)
    with pytest.raises(InvalidToken):
        verify_ai_beacon(SIGNER, "render", tamper(_query(render)), now=NOW)


def test_render_signature_does_not_open_the_view_beacon():
    render, _ = ai_beacon_urls(SIGNER, "https://e", 42, "m-1", None, scope=SCOPE)
    with pytest.raises(InvalidToken):
        verify_ai_beacon(SIGNER, "view", _query(render), now=NOW)
    with pytest.raises(InvalidToken):
        verify_ai_beacon(OTHER, "render", _query(render), now=NOW)


def _token(**kw):
    args = dict(surface="url", env="production", ad_id="ad-1", campaign_id="cmp-1", now=1000.0)
    return issue_impression_token(SIGNER, **{**args, **kw})


def test_impression_token_round_trip_and_unique_ids():
    token, claims = _token(cpm_usd=2.5, publisher_id="pub-1", slot_id="side")
    assert read_impression_token(SIGNER, token, surface="url", env="production", now=1001) == claims
    assert _token()[1].token_id != claims.token_id


@pytest.mark.parametrize(
    ("mutate", "kw", "match"),
    [
        (other_tail, {}, "not one"),
        (lambda t: "x" + t, {}, "not one"),
        (lambda t: t, {"surface": "ugc"}, "belongs"),
        (lambda t: t, {"env": "sandbox"}, "environment"),
        (lambda t: t, {"now": 1000.0 + IMPRESSION_TOKEN_TTL_SECONDS + 1}, "expired"),
        (lambda t: 12345, {}, "not one"),
    ],
)
def test_bad_impression_tokens(mutate, kw, match):
    token, _ = _token()
    args = {"surface": "url", "env": "production", "now": 1001.0, **kw}
    with pytest.raises(InvalidToken, match=match):
        read_impression_token(SIGNER, mutate(token), **args)


@pytest.mark.parametrize("form", ["binary", "json"])
def test_a_token_issued_by_a_node_whose_clock_is_a_little_ahead_is_taken(form):
    # Issued at 1000 by a node whose clock runs 3 s ahead of this one's (997): it was
    # refused as "expired", a final 400 to the tag, and the impression and its click billed
    # nothing.
    token, claims = _token(form=form)
    for now in (997.0, 1000.0 - CLOCK_SKEW_SECONDS):
        assert read_impression_token(SIGNER, token, surface="url", env="production", now=now) == (
            claims
        )


@pytest.mark.parametrize("form", ["binary", "json"])
@pytest.mark.parametrize("ahead", [CLOCK_SKEW_SECONDS + 1, 3600, 10 * 86400])
def test_a_token_issued_further_ahead_than_clocks_drift_is_refused(form, ahead):
    token, _ = _token(form=form)
    with pytest.raises(InvalidToken) as refused:
        read_impression_token(SIGNER, token, surface="url", env="production", now=1000.0 - ahead)
    assert str(refused.value) == "the impression token's issue time is ahead of this edge's clock"


def test_a_token_expires_a_day_after_its_issue_whatever_the_skew_allowed():
    token, claims = _token()
    last = 1000.0 + IMPRESSION_TOKEN_TTL_SECONDS
    assert read_impression_token(SIGNER, token, surface="url", env="production", now=last) == (
        claims
    )
    with pytest.raises(InvalidToken) as refused:
        read_impression_token(SIGNER, token, surface="url", env="production", now=last + 1)
    assert str(refused.value) == "the impression token has expired"


def test_signer_hides_its_key_and_refuses_short_keys():
    assert "k" * 32 not in repr(SIGNER)
    with pytest.raises(ValueError):
        Signer(b"short")


@pytest.mark.parametrize("signature", ["é" * 22, "\udcff", "", "x" * 500])
def test_signer_refuses_any_odd_signature_without_raising(signature):
    signer = Signer(b"k" * 32)
    assert signer.verify("purpose", b"message", signature=signature) is False
    good = signer.sign("purpose", b"message")
    assert signer.verify("purpose", b"message", signature=good) is True


def test_moving_a_newline_between_ai_ids_breaks_the_signature():
    # The old encoding joined the ids with newlines: "m" + "\n\nc" and "m\n" + "\nc" signed
    # the same bytes, so one signed URL could be re-split into many dedupe keys.
    render, _ = ai_beacon_urls(SIGNER, "https://e", 42, "m", "\n\nc", scope=SCOPE)
    q = _query(render)
    assert verify_ai_beacon(SIGNER, "render", q, now=NOW).conversation_id == "\n\nc"
    for message_id, conv in (("m\n", "\nc"), ("m\n\n", "c"), ("m\n\nc", "")):
        with pytest.raises(InvalidToken):
            verify_ai_beacon(
                SIGNER, "render", {**q, "message_id": message_id, "conversation_id": conv}, now=NOW
            )


def test_signed_parts_cannot_be_re_split():
    assert SIGNER.sign("p", "ab", "c") != SIGNER.sign("p", "a", "bc")
    assert SIGNER.sign("p", "a\n", "b") != SIGNER.sign("p", "a", "\nb")
    assert SIGNER.sign("p", "a", "") != SIGNER.sign("p", "a")
    assert SIGNER.sign("pa", "b") != SIGNER.sign("p", "ab")


def test_a_signature_is_the_hmac_of_the_length_prefixed_parts():
    # The keyed state kept per purpose must give exactly HMAC-SHA256(key, encoded parts),
    # truncated to 16 bytes, whatever was signed before and for which purpose.
    import base64
    import hashlib
    import hmac

    from edge.signing import encode_parts

    cases = [("p", ("a", "b")), ("impression/v2", ("tok",)), ("p", ()), ("q", (b"\x00", "é"))]
    for key in (b"z" * 32, b"y" * 64, b"x" * 65, bytes(range(200))):  # a long key is hashed
        signer = Signer(key)
        for purpose, parts in cases * 2:
            mac = hmac.new(key, encode_parts(purpose, *parts), hashlib.sha256).digest()[:16]
            expected = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
            assert signer.sign(purpose, *parts) == expected


def test_token_base64_is_the_standard_urlsafe_form():
    import base64
    import random

    from edge.signing import _b64, _unb64

    rnd = random.Random(7)
    for n in range(200):
        data = rnd.randbytes(n)
        text = base64.urlsafe_b64encode(data).rstrip(b"=").decode()
        assert _b64(data) == text and _unb64(text) == data
        for junk in ("!", "é", "=", "==a", " ", "a", "+/", "\x00"):
            odd = text[: n // 2] + junk + text[n // 2 :]
            try:
                expected: object = base64.urlsafe_b64decode(odd + "=" * (-len(odd) % 4))
            except ValueError:
                expected = ValueError
            try:
                got: object = _unb64(odd)
            except ValueError:
                got = ValueError
            assert got == expected, odd


# -- the token's forms -------------------------------------------------------------------------


def _legacy_token(signer=SIGNER, **kw):
    """A token of the earlier JSON form, as edges issued it before the binary one."""
    payload = {"t": "legacy-id", "s": "url", "e": "production", "a": "ad-1", "c": "cmp-1"}
    payload |= {"i": 1000, "m": 1.5, "p": "pub-1", "o": None, "l": "side", "b": "bound"}
    return signer.seal(LEGACY_IMPRESSION_PURPOSE, {**payload, **kw})


def test_tokens_of_the_earlier_form_are_read_until_they_expire():
    args = {"surface": "url", "env": "production"}
    claims = read_impression_token(SIGNER, _legacy_token(), **args, now=1001)
    assert (claims.token_id, claims.ad_id, claims.cpm_usd, claims.client) == (
        "legacy-id", "ad-1", 1.5, "bound"
    )  # fmt: skip
    late = 1000 + IMPRESSION_TOKEN_TTL_SECONDS + 1
    with pytest.raises(InvalidToken, match="expired"):
        read_impression_token(SIGNER, _legacy_token(), surface="url", env="production", now=late)
    for bad in (_legacy_token(OTHER), other_tail(_legacy_token()), "x" + _legacy_token()):
        with pytest.raises(InvalidToken, match="not one"):
            read_impression_token(SIGNER, bad, surface="url", env="production", now=1001)


def test_a_token_is_a_version_byte_and_the_claims_signed_as_raw_bytes():
    import base64
    import hashlib
    import hmac

    from edge.signing import encode_parts

    token, claims = _token(cpm_usd=2.5, publisher_id="pub-1", slot_id="side", client="c" * 22)
    body, sig = token.split(".")
    assert token.startswith("A")  # what tells it from the earlier form
    data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    assert data[:1] == b"\x03"
    assert msgspec.msgpack.decode(data[1:], type=ImpressionClaims) == claims
    mac = hmac.new(b"k" * 32, encode_parts(IMPRESSION_PURPOSE, data), hashlib.sha256).digest()
    assert sig == base64.urlsafe_b64encode(mac[:16]).rstrip(b"=").decode()
    # The same claims in the earlier form were about a third longer in a URL.
    assert len(token) < len(_legacy_token(t=claims.token_id, b="c" * 22)) * 0.8


B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _sealed(data: bytes, purpose: str = IMPRESSION_PURPOSE, signer=SIGNER) -> str:
    return signer.seal_bytes(purpose, data)


def test_every_edited_byte_and_every_truncation_of_a_token_is_refused():
    token, _ = _token(publisher_id="pub-1")
    body, sig = token.split(".")
    args = {"surface": "url", "env": "production", "now": 1001.0}
    for i, char in enumerate(body):
        other = B64URL[(B64URL.index(char) + 1) % 64]
        with pytest.raises(InvalidToken, match="not one"):
            read_impression_token(SIGNER, f"{body[:i]}{other}{body[i + 1 :]}.{sig}", **args)
    for cut in range(1, len(token)):
        with pytest.raises(InvalidToken):
            read_impression_token(SIGNER, token[:cut], **args)
    for odd in ("+", "/", "=", " ", "!", "é", "\x00"):
        with pytest.raises(InvalidToken, match="not one"):
            read_impression_token(SIGNER, f"{body[:5]}{odd}{body[5:]}.{sig}", **args)
        with pytest.raises(InvalidToken, match="not one"):
            read_impression_token(SIGNER, f"{body}.{sig}{odd}", **args)


def test_every_other_character_anywhere_in_the_signature_is_refused():
    # The signature's last character carries only two bits of the MAC: a reader that
    # decodes it leniently, or compares a prefix, would take some of these edits.
    token, _ = _token(publisher_id="pub-1")
    body, sig = token.split(".")
    args = {"surface": "url", "env": "production", "now": 1001.0}
    for i, char in enumerate(sig):
        for other in B64URL.replace(char, ""):
            with pytest.raises(InvalidToken, match="not one"):
                read_impression_token(SIGNER, f"{body}.{sig[:i]}{other}{sig[i + 1 :]}", **args)


def test_signed_bytes_of_another_purpose_version_or_shape_are_refused():
    _, claims = _token()
    data = b"\x03" + msgspec.msgpack.encode(claims)
    args = {"surface": "url", "env": "production", "now": 1001.0}
    assert read_impression_token(SIGNER, _sealed(data), **args) == claims
    for other in (
        _sealed(data, LEGACY_IMPRESSION_PURPOSE),  # the same bytes for another purpose
        _sealed(data, "client/v1"),
        _sealed(data, signer=OTHER),
        _sealed(b"\x02" + data[1:]),  # another version, starting with "A" too
    ):
        with pytest.raises(InvalidToken, match="not one"):
            read_impression_token(SIGNER, other, **args)
    for shape in (data + b"\x00", data[:-1], b"\x03", b"\x03" + msgspec.msgpack.encode([1, 2])):
        with pytest.raises(InvalidToken, match="malformed"):
            read_impression_token(SIGNER, _sealed(shape), **args)


def test_strict_token_base64_reads_url_safe_text_only():
    import base64
    import random

    from edge.signing import _b64, _unb64_strict

    rnd = random.Random(11)
    for n in range(1, 120):
        data = rnd.randbytes(n)
        text = _b64(data)
        assert _unb64_strict(text) == data
        assert text == base64.urlsafe_b64encode(data).rstrip(b"=").decode()
        for junk in ("+", "/", "=", " ", "\n", "é", "A"):
            odd = text[: n // 2] + junk + text[n // 2 :]
            if junk == "A":
                continue  # still URL-safe base64 (of other bytes, or of no whole bytes)
            with pytest.raises(ValueError):
                _unb64_strict(odd)


def test_strict_token_base64_takes_one_text_per_bytes():
    """A last character with bits set beyond the bytes is refused: of the 64 last
    characters after one or two whole bytes, only those some bytes' own encoding ends with
    are read (4 and 16 of them: 2 and 4 bits of data), so no two texts give the same
    bytes."""
    import contextlib
    import random

    from edge.signing import _b64, _unb64_strict

    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    rnd = random.Random(5)
    for n, usable in ((1, 4), (2, 16), (4, 4), (5, 16)):
        data = rnd.randbytes(n)
        text = _b64(data)
        read = {}
        for last in alphabet:
            with contextlib.suppress(ValueError):
                read[last] = _unb64_strict(text[:-1] + last)
        assert len(read) == usable
        assert all(_b64(got) == text[:-1] + last for last, got in read.items())
        assert read[text[-1]] == data


def test_an_ai_message_is_keyed_in_its_conversation():
    def beacon(message_id, conversation_id=""):
        return AiBeacon("render", 7, message_id, conversation_id)

    keys = {
        b.impression_key("render")
        for b in (
            beacon("1", "c-1"),
            beacon("1", "c-2"),
            beacon("1"),
            beacon("c-1:1"),
            beacon("1:1", "c"),
            beacon("1", "c:1"),
            beacon("2:c-1:1"),
        )
    }
    assert len(keys) == 7
    assert beacon("1").impression_key("view") == "ai:view:7:1"  # as before conversations
    assert beacon("1").click_impression_key == "ai:7:1"
    assert beacon("1", "c-1").derived_click_id != beacon("1", "c-2").derived_click_id
    assert beacon("1", "c-1").derived_click_id == beacon("1", "c-1").derived_click_id


def test_an_ai_message_is_keyed_for_its_partner():
    """Partners number conversations themselves: the same ad, conversation and message of
    two partners (two scopes) are two messages, in every key and derived click id."""

    def beacon(scope, message_id="1", conversation_id="7"):
        return AiBeacon("click", 7, message_id, conversation_id, scope)

    a, b = beacon("partner-0001"), beacon("partner-0002")
    assert a.impression_key("render") == "ai-s:partner-0001:render:7:1:7:1"
    assert a.click_impression_key == "ai-s:partner-0001:7:1:7:1"
    for kind in ("render", "view"):
        assert a.impression_key(kind) != b.impression_key(kind)
    assert a.click_impression_key != b.click_impression_key
    assert a.derived_click_id != b.derived_click_id
    assert a.derived_click_id == beacon("partner-0001").derived_click_id
    assert re.fullmatch(r"ai-[0-9a-f]{32}", a.derived_click_id)  # a conversion's click id
    # Neither a scoped key nor id is ever one of the unscoped form's.
    legacy = AiBeacon("click", 7, "1", "7")
    assert a.impression_key("render") != legacy.impression_key("render")
    assert a.derived_click_id != legacy.derived_click_id
    keys = {
        beacon(s, m, c).impression_key("view")
        for s in ("partner-0001", "partner-0001x")
        for m, c in (("1", "7"), ("7:1", ""), ("1", "1:7"), ("", "1:7:1"))
    }
    assert len(keys) == 8


def test_ai_urls_issued_before_partner_scopes_keep_their_keys():
    """A URL handed out before scopes (no scope parameter) still verifies and counts under
    exactly the keys and click id it had: a beacon fired across the deploy is neither lost
    nor counted twice."""
    render, _ = ai_beacon_urls(SIGNER, "https://e", 7, "1", "c-1", scope=None)
    q = _query(render)
    assert list(q) == ["ad_id", "message_id", "conversation_id", "sig"]
    # The signature of that form: the four length-prefixed parts, as it always was.
    assert q["sig"] == SIGNER.sign("ai-beacon/v2", "render", "7", "1", "c-1")
    beacon = verify_ai_beacon(SIGNER, "render", q, now=NOW)
    assert beacon.scope == ""
    assert beacon.impression_key("render") == "ai-c:render:7:3:c-1:1"
    assert beacon.click_impression_key == "ai-c:7:3:c-1:1"
    assert beacon.derived_click_id == "ai-b7d48984dfb71a2b5a0733528b9fe62a"
    lone = AiBeacon("click", 7, "1", "")
    assert lone.impression_key("view") == "ai:view:7:1"
    assert lone.derived_click_id == "ai-8de0f44db9df564622f8e978a2424036"
    # A scope cannot be added to such a URL (nor taken from a scoped one: see above).
    with pytest.raises(InvalidToken):
        verify_ai_beacon(SIGNER, "render", {**q, "scope": SCOPE}, now=NOW)


def test_a_partner_scope_is_its_key_familys_and_names_no_key():
    from edge.store import KeyRecord
    from edge.threads import partner_scope

    def key(key_id, family_id=None):
        return KeyRecord(key_id, "l", "h", "production", "ai", "n", 0.0, family_id=family_id)

    first, other = key("key_aaaaaaaaaaaa"), key("key_cccccccccccc")
    rotated = key("key_bbbbbbbbbbbb", family_id=first.key_id)
    scope = partner_scope(SIGNER, "ai", first)
    assert re.fullmatch(r"[A-Za-z0-9_\-]{12}", scope)
    assert partner_scope(SIGNER, "ai", rotated) == scope  # a rotation keeps it
    assert partner_scope(SIGNER, "ai", other) != scope
    assert partner_scope(SIGNER, "ugc", first) != scope
    assert partner_scope(OTHER, "ai", first) != scope  # keyed: nothing to compute it from
    assert first.key_id[4:] not in scope  # the family's id is not in it


def _partner_view(family: str | None = "key_0123456789ab") -> dict[str, str]:
    from matcher.types import PricingModel

    pricing = PricingModel("cpc", 1.25)
    _render, view = ai_beacon_urls(
        SIGNER, "https://edge.example", 42, "m-1", "c-9", scope=SCOPE, pricing=pricing,
        key_family=family,
    )  # fmt: skip
    return _query(view)


def test_an_ai_url_seals_the_partners_key_family_beside_its_pricing():
    q = _partner_view()
    assert list(q)[-2:] == ["key_family", "sig"]
    assert verify_ai_beacon(SIGNER, "view", q, now=NOW).key_family == "key_0123456789ab"
    # A URL issued before the family was sealed verifies and names no key.
    assert verify_ai_beacon(SIGNER, "view", _partner_view(None), now=NOW).key_family is None


@pytest.mark.parametrize(
    "tamper",
    [
        lambda q: {**q, "key_family": "key_ba9876543210"},  # another partner's row
        lambda q: {k: v for k, v in q.items() if k != "key_family"},
        lambda q: {k: v for k, v in q.items() if k != "pricing"},  # family without pricing
        lambda q: {**q, "key_family": "key:0123"},
        lambda q: {**q, "key_family": ""},
    ],
)
def test_a_tampered_key_family_is_refused(tamper):
    with pytest.raises(InvalidToken):
        verify_ai_beacon(SIGNER, "view", tamper(_partner_view()), now=NOW)


@pytest.mark.parametrize("form", ["binary", "json"])
def test_both_token_forms_seal_the_key_family_and_read_old_tokens_without_it(form):
    token, _ = issue_impression_token(
        SIGNER, surface="ugc", env="production", ad_id="ad-1", campaign_id="cmp-1",
        now=1000.0, key_family="key_0123456789ab", form=form,
    )  # fmt: skip
    read = read_impression_token(SIGNER, token, surface="ugc", env="production", now=1000.0)
    assert read.key_family == "key_0123456789ab"
    old, _ = issue_impression_token(
        SIGNER, surface="ugc", env="production", ad_id="ad-1", campaign_id="cmp-1",
        now=1000.0, form=form,
    )  # fmt: skip
    read = read_impression_token(SIGNER, old, surface="ugc", env="production", now=1000.0)
    assert read.key_family is None


def test_a_binary_token_of_the_release_before_the_key_family_still_reads():
    # That release's claims array ends at the pricing: one element fewer.
    _, claims = _token(cpm_usd=2.5)
    old = list(msgspec.msgpack.decode(msgspec.msgpack.encode(claims)))
    assert old[-1] is None  # the key family, which that release did not write
    token = _sealed(b"\x03" + msgspec.msgpack.encode(old[:-1]))
    read = read_impression_token(SIGNER, token, surface="url", env="production", now=1001.0)
    assert (read.ad_id, read.cpm_usd, read.key_family) == (claims.ad_id, 2.5, None)


# -- AI URLs carry their issue time -----------------------------------------------------------


def _issued_view(issued_at: float | None = NOW) -> dict[str, str]:
    from matcher.types import PricingModel

    _render, view = ai_beacon_urls(
        SIGNER, "https://edge.example", 42, "m-1", "c-9", scope=SCOPE,
        pricing=PricingModel("cpc", 1.25), key_family="key_0123456789ab", issued_at=issued_at,
    )  # fmt: skip
    return _query(view)


def test_an_ai_url_seals_its_issue_time_beside_the_key_family():
    q = _issued_view(NOW + 0.75)  # whole seconds
    assert list(q)[-3:] == ["key_family", "issued_at", "sig"]
    assert q["issued_at"] == str(int(NOW))
    beacon = verify_ai_beacon(SIGNER, "view", q, now=NOW + 10)
    assert (beacon.key_family, beacon.issued_at) == ("key_0123456789ab", int(NOW))


@pytest.mark.parametrize(
    ("age", "good"),
    [
        (0, True),
        (AI_URL_MAX_AGE_SECONDS, True),
        (AI_URL_MAX_AGE_SECONDS + 1, False),
        (-CLOCK_SKEW_SECONDS, True),  # a node whose clock is a little ahead
        (-CLOCK_SKEW_SECONDS - 1, False),
    ],
)
def test_an_ai_url_is_good_for_its_max_age_and_a_little_skew(age, good):
    q = _issued_view()
    if good:
        verify_ai_beacon(SIGNER, "view", q, now=NOW + age)
    else:
        with pytest.raises(ExpiredBeacon):
            verify_ai_beacon(SIGNER, "view", q, now=NOW + age)


def test_the_max_age_of_an_ai_url_is_an_impression_tokens():
    assert AI_URL_MAX_AGE_SECONDS == IMPRESSION_TOKEN_TTL_SECONDS
    assert 0 < CLOCK_SKEW_SECONDS <= 600


@pytest.mark.parametrize(
    "tamper",
    [
        lambda q: {**q, "issued_at": str(int(NOW) + 86_400)},  # made younger
        lambda q: {k: v for k, v in q.items() if k != "issued_at"},  # stripped
        lambda q: {k: v for k, v in q.items() if k != "key_family"},  # issue time alone
        lambda q: {**q, "issued_at": "+1790000000"},
        lambda q: {**q, "issued_at": "1.79e9"},
        lambda q: {**q, "issued_at": ""},
    ],
)
def test_a_tampered_or_stripped_issue_time_is_refused(tamper):
    with pytest.raises(InvalidToken) as caught:
        verify_ai_beacon(SIGNER, "view", tamper(_issued_view()), now=NOW)
    assert not isinstance(caught.value, ExpiredBeacon)


def test_ai_urls_issued_before_the_issue_time_was_sealed_still_verify_at_any_age():
    q = _issued_view(None)
    assert "issued_at" not in q
    beacon = verify_ai_beacon(SIGNER, "view", q, now=NOW + 400 * 86_400)
    assert (beacon.key_family, beacon.issued_at) == ("key_0123456789ab", None)
