"""HMAC signing of what the edge hands out and later takes back.

Two things are signed: AI beacon URLs (``sig`` over kind, ad, message and conversation) and
impression tokens (a compact payload the tag or a pixel sends back when an ad is seen).
Each use has its own ``purpose`` so a signature made for one is worthless for the other.
A token is base64 text, a dot and a signature: ``seal`` signs the base64 text of a JSON
payload, ``seal_bytes`` the raw bytes under the base64 (read strictly, so nothing in the
text is skipped), which a reader checks and then decodes once.

Whatever is signed is first encoded one way only: the purpose and then each part, every one
preceded by its length (8 bytes, big-endian). A separator-joined text would let a caller move
a separator from one part into the next and keep the signature valid for different values
(one signed beacon URL turned into many dedupe keys); with lengths there is exactly one way
to split the bytes back into parts.
The key comes from ``EDGE_SIGNING_KEY`` or, when unset, is generated once and kept in the
store, so tokens stay valid across restarts.

Rotation: ``EDGE_SIGNING_KEY_PREVIOUS`` names the key being retired. Everything new is
signed with the current key; a signature is checked against the current key first (the
common path costs what it did) and, only when that fails, against the previous one, so what
was handed out before the change keeps working until the previous key is dropped. A
signature made with neither key is refused as before.

Names that must never change (a partner's scope, ``edge.threads.partner_scope``, which the
dedupe keys of its AI beacons hold) are not signatures: they are made with ``names``, the
key the deployment had before its first rotation. That key is kept in the store when the
first rotation starts (it is the previous key then, already accepted for everything, and
retired afterwards), so a name made before any rotation is the name made after every one.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import secrets
from typing import Any

import orjson

from edge.settings import Settings
from edge.store import Store

_SIG_BYTES = 16  # 128-bit truncated HMAC-SHA256: ample against forgery, short in URLs
_SIG_CHARS = 22  # its unpadded base64
_META_NAME = "signing_key"
_NAMES_META = "names_key"  # the key stable names are made with, kept at the first rotation
_MAX_TOKEN = 2048  # characters: longer text is no token of ours, read no further


def same_text(expected: str, given: str) -> bool:
    """Constant-time equality of a value we computed and one a caller sent, whatever its
    characters: compared as bytes, because ``hmac.compare_digest`` raises on non-ASCII
    ``str`` (a 500 for any forged value that holds one)."""
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), given.encode("utf-8", "surrogatepass")
    )


def encode_parts(*parts: str | bytes) -> bytes:
    """The one unambiguous byte form of ``parts``: each one length-prefixed."""
    out = bytearray()
    for part in parts:
        raw = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        out += len(raw).to_bytes(8, "big")
        out += raw
    return bytes(out)


_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _b64(data: bytes) -> str:
    """Unpadded URL-safe base64 (``base64.urlsafe_b64encode`` without its wrappers)."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode()


# URL-safe to standard alphabet; the standard alphabet's own "+" and "/" and the padding
# become "!", which no base64 reading accepts, so a strict read takes URL-safe text only.
_FROM_URLSAFE_ONLY = bytes.maketrans(b"-_+/=", b"+/!!!")


_STANDARD = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# The padding an unpadded text of each length (mod 4) needs; a length of 1 (mod 4) is no
# base64 at all, and its three "=" make the strict read refuse it.
_PADDING = (b"", b"===", b"==", b"=")
# Per text length (mod 4), the last characters that set no bits beyond the bytes: after
# two characters (one byte) the last one's low 4 bits are unused, after three (two bytes)
# its low 2 bits; any other last character would be a second text of the same bytes.
_CANONICAL_LAST: tuple[frozenset[int], ...] = (
    frozenset(_STANDARD),
    frozenset(),
    frozenset(c for i, c in enumerate(_STANDARD) if i & 0b1111 == 0),
    frozenset(c for i, c in enumerate(_STANDARD) if i & 0b11 == 0),
)


def _unb64_strict(text: str) -> bytes:
    """Unpadded URL-safe base64 read strictly: a character outside the URL-safe alphabet
    (``+``, ``/``, ``=``, a space) is a ValueError rather than skipped, and so is a last
    character with bits set beyond the bytes, so bytes have exactly one text."""
    raw = text.encode("ascii").translate(_FROM_URLSAFE_ONLY)  # ValueError when not ASCII
    size = len(raw) & 3
    data = binascii.a2b_base64(raw + _PADDING[size], strict_mode=True)
    # Canonical: the last character sets no bits beyond the bytes (the URL-safe alphabet
    # maps one to one onto the standard one, and "!" is in neither).
    if raw and raw[-1] not in _CANONICAL_LAST[size]:
        raise ValueError("not the canonical base64 of its bytes")
    return data


def _unb64(text: str) -> bytes:
    """``base64.urlsafe_b64decode`` of unpadded text, without its per-call wrappers (the
    same non-strict reading: characters outside the alphabet are skipped)."""
    raw = text.encode("ascii").translate(_FROM_URLSAFE)  # ValueError when not ASCII
    return binascii.a2b_base64(raw + b"=" * (-len(raw) % 4))


class Signer:
    def __init__(
        self, key: bytes, *, previous: bytes | None = None, names: bytes | None = None
    ) -> None:
        """``previous``: the key being retired, whose signatures are still accepted;
        ``names``: the key stable names are made with, when it is not ``key``."""
        if len(key) < 32:
            raise ValueError("the signing key must have at least 32 bytes")
        # One keyed HMAC-SHA256 per purpose, fed the purpose's length-prefixed bytes once; a
        # signature copies it and adds only its parts, so the key's pads are not derived
        # again per call.
        self._key = key
        self._prepared: dict[str, hmac.HMAC] = {}  # purpose -> its keyed, primed HMAC
        self.previous = None if previous is None or previous == key else Signer(previous)
        self.names = self if names is None or names == key else Signer(names)

    def __repr__(self) -> str:
        return "Signer(<secret>)"

    @classmethod
    async def from_settings(cls, settings: Settings, store: Store) -> Signer:
        if settings.signing_key:
            key = settings.signing_key.encode()
        else:
            key = await store.put_meta_if_absent(_META_NAME, secrets.token_bytes(32))
        if not settings.signing_key_previous:
            return cls(key, names=await store.get_meta(_NAMES_META))
        previous = settings.signing_key_previous.encode()
        # The first rotation keeps the key everything was named with; a later one finds it.
        names = await store.put_meta_if_absent(_NAMES_META, previous)
        return cls(key, previous=previous, names=names)

    def sign(self, purpose: str, *parts: str | bytes) -> str:
        """Signature of ``parts`` for ``purpose`` (see ``encode_parts``)."""
        return _b64(self._mac(purpose, encode_parts(*parts)))

    def _mac(self, purpose: str, encoded: bytes) -> bytes:
        """The truncated HMAC of ``purpose`` followed by already encoded parts."""
        mac = (self._prepared.get(purpose) or self._prepare(purpose)).copy()
        mac.update(encoded)
        return mac.digest()[:_SIG_BYTES]

    def _prepare(self, purpose: str) -> hmac.HMAC:
        prepared = hmac.new(self._key, encode_parts(purpose), hashlib.sha256)
        self._prepared[purpose] = prepared
        return prepared

    def verify(self, purpose: str, *parts: str | bytes, signature: object) -> bool:
        """Whether ``signature`` is the current key's, or else the previous key's."""
        # A forged signature may hold any character (or not be text at all).
        if not isinstance(signature, str):
            return False
        if same_text(self.sign(purpose, *parts), signature):
            return True
        previous = self.previous
        return previous is not None and same_text(previous.sign(purpose, *parts), signature)

    def seal(self, purpose: str, payload: dict[str, Any]) -> str:
        """A URL-safe token carrying ``payload``, readable by anyone, forgeable by no one."""
        body = _b64(orjson.dumps(payload))
        return f"{body}.{self.sign(purpose, body)}"

    def seal_bytes(self, purpose: str, data: bytes) -> str:
        """A URL-safe token carrying ``data``: base64 of the bytes, a dot, the signature of
        the bytes themselves (as one part)."""
        return f"{_b64(data)}.{_b64(self._mac(purpose, len(data).to_bytes(8, 'big') + data))}"

    def unseal_bytes(self, purpose: str, token: str) -> bytes | None:
        """The bytes of a token this signer (or its previous key) sealed with ``seal_bytes``
        for ``purpose``, else None (the signature compared in constant time)."""
        body, dot, signature = token.partition(".")
        if len(token) > _MAX_TOKEN or not dot or "." in signature:
            return None
        try:
            data = _unb64_strict(body)
        except ValueError:
            return None
        given = signature.encode("utf-8", "surrogatepass")
        if self._signed_bytes(purpose, data, given):
            return data
        previous = self.previous
        if previous is not None and previous._signed_bytes(purpose, data, given):
            return data
        return None

    def _signed_bytes(self, purpose: str, data: bytes, given: bytes) -> bool:
        """Whether ``given`` is this key's signature of ``data`` as ``seal_bytes`` makes it."""
        prepared = self._prepared.get(purpose) or self._prepare(purpose)
        mac = prepared.copy()
        mac.update(len(data).to_bytes(8, "big") + data)
        # The signature's text: the truncated MAC's 16 bytes are 22 base64 characters and
        # two of padding.
        expected = binascii.b2a_base64(mac.digest()[:_SIG_BYTES], newline=False)
        expected = expected.translate(_TO_URLSAFE)[:_SIG_CHARS]
        # Compared as bytes in constant time, as ``same_text`` does (any character may come).
        return hmac.compare_digest(expected, given)

    def unseal(self, purpose: str, token: str) -> dict[str, Any] | None:
        """The payload of a token this signer (or its previous key) sealed for ``purpose``,
        else None."""
        if not isinstance(token, str) or len(token) > _MAX_TOKEN or token.count(".") != 1:
            return None
        body, signature = token.split(".")
        if not self.verify(purpose, body, signature=signature):
            return None
        try:
            payload = orjson.loads(_unb64(body))
        except (ValueError, orjson.JSONDecodeError):
            return None
        return payload if isinstance(payload, dict) else None
