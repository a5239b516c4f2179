"""Product-scoped API keys.

A key reads ``prod-ugc-<32 base62>-<6 base62 checksum>`` (``sandbox-`` for the sandbox;
products ``ugc``, ``ai``, ``ad-manager``). The checksum (CRC32 of what precedes it) lets a
secret scanner recognise a leaked key and lets us turn away typos without a store read.
Only a SHA-256 of the key is stored; ``lookup`` (a prefix of that hash) finds the row and
the whole hash is then compared in constant time.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import string
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from edge.errors import Conflict, Unauthorized
from edge.signing import same_text
from edge.store.base import KeyRecord, Store

PRODUCTS = ("ugc", "ai", "ad-manager")
ENV_PREFIX = {"production": "prod", "sandbox": "sandbox"}
PREFIX_ENV = {v: k for k, v in ENV_PREFIX.items()}
SECONDARY_TTL_SECONDS = 24 * 3600  # after a rotation the previous key lives 24 hours
# A key's name is a label shown in one cell of `edge keys list`: one line, bounded.
NAME_MAX_LEN = 100
_ALPHABET = string.digits + string.ascii_letters
_RANDOM_LEN = 32  # ~190 bits
_CHECK_LEN = 6
_LOOKUP_LEN = 24
_CACHE_MAX = 10_000

log = logging.getLogger("edge.keys")


def _base62(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        n, r = divmod(n, 62)
        out.append(_ALPHABET[r])
    return "".join(reversed(out))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode()), _CHECK_LEN)


@dataclass(frozen=True, slots=True)
class ParsedKey:
    env: str
    product: str


def generate(env: str, product: str) -> str:
    if env not in ENV_PREFIX or product not in PRODUCTS:
        raise ValueError(f"no such environment/product: {env}/{product}")
    body = f"{ENV_PREFIX[env]}-{product}-" + "".join(
        secrets.choice(_ALPHABET) for _ in range(_RANDOM_LEN)
    )
    return f"{body}-{_checksum(body)}"


def parse(key: str) -> ParsedKey | None:
    """Environment and product of a well-formed key with a correct checksum, else None."""
    if len(key) > 80:
        return None
    body, _, check = key.rpartition("-")
    head, _, random_part = body.rpartition("-")
    prefix, _, product = head.partition("-")
    if (
        prefix not in PREFIX_ENV
        or product not in PRODUCTS
        or len(random_part) != _RANDOM_LEN
        or not all(c in _ALPHABET for c in random_part)
        or not same_text(_checksum(body), check)
    ):
        return None
    return ParsedKey(PREFIX_ENV[prefix], product)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot label a key (in words, one line), or None when it can: at most
    ``NAME_MAX_LEN`` characters, all printable (no newline, tab or other control or
    invisible format character, which would break the one-line-per-key listing)."""
    if len(name) > NAME_MAX_LEN:
        return f"is {len(name):,} characters long; at most {NAME_MAX_LEN} are allowed"
    bad = next((i for i, ch in enumerate(name) if not ch.isprintable() and ch != " "), None)
    if bad is not None:
        return (
            f"has a control or non-printing character {name[bad]!r} at position {bad + 1}; "
            "use printable characters on one line"
        )
    return None


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Rotation:
    api_key: str
    secondary_key: str
    secondary_expires_at: float
    record: KeyRecord
    # key_ids of the family's earlier secondary (at most one), which stopped working now.
    retired: tuple[str, ...] = ()


def live_until(family: list[KeyRecord]) -> float:
    """Until when a rotation family has a valid key, given all its keys: forever (``inf``)
    with an active one, the latest expiry of its secondaries without, and never (``-inf``)
    once every key is revoked (or there is none)."""
    until = -math.inf
    for record in family:
        if record.revoked_at is None:
            until = max(until, math.inf if record.expires_at is None else record.expires_at)
    return until


class Keyring:
    """Issues, verifies, rotates and revokes keys on top of the store.

    Verified records are cached for ``cache_seconds`` so the hot path rarely reads the
    store; a revocation made by another process (the CLI) takes effect within that time.
    So are the families' liveness (``family_live``), which beacons of what a partner was
    handed read.
    """

    def __init__(self, store: Store, clock: Callable[[], float], cache_seconds: float) -> None:
        self._store = store
        self._clock = clock
        self._ttl = cache_seconds
        self._cache: OrderedDict[str, tuple[KeyRecord, float]] = OrderedDict()
        # Per family: until when it has a valid key (``live_until``), and when that was read.
        self._families: OrderedDict[str, tuple[float, float]] = OrderedDict()

    async def issue(self, env: str, product: str, name: str = "") -> tuple[str, KeyRecord]:
        key = generate(env, product)
        record = self._record(key, env, product, name)
        await self._store.insert_key(record)
        return key, record

    def _record(
        self, key: str, env: str, product: str, name: str, family_id: str | None = None
    ) -> KeyRecord:
        digest = key_hash(key)
        return KeyRecord(
            key_id="key_" + secrets.token_hex(6),
            lookup=digest[:_LOOKUP_LEN],
            key_hash=digest,
            env=env,
            product=product,
            name=name,
            created_at=self._clock(),
            family_id=family_id,
        )

    async def find(self, key: str) -> KeyRecord | None:
        """The stored record of this exact key, or None (no validity check)."""
        if parse(key) is None:
            return None
        digest = key_hash(key)
        lookup = digest[:_LOOKUP_LEN]
        now = self._clock()
        cached = self._cache.get(lookup)
        if cached is not None and now - cached[1] < self._ttl:
            record = cached[0]
            self._cache.move_to_end(lookup)
        else:
            found = await self._store.key_by_lookup(lookup)
            if found is None:
                self._cache.pop(lookup, None)
                return None
            record = found
            self._cache[lookup] = (record, now)
            if len(self._cache) > _CACHE_MAX:
                self._cache.popitem(last=False)
        if not same_text(record.key_hash, digest):
            return None
        return record

    async def verify(self, key: str | None, *, env: str, product: str) -> KeyRecord:
        """The record of a key valid for this environment and product; else Unauthorized.
        Spaces and tabs around it are not part of it (HTTP's optional whitespace around a
        field value, which the server does not always strip at the end)."""
        key = key.strip(" \t") if key else key
        if not key:
            raise Unauthorized("an X-API-Key header is required", field="X-API-Key")
        parsed = parse(key)
        if parsed is None:
            raise Unauthorized("the API key is malformed", field="X-API-Key")
        if parsed.env != env:
            raise Unauthorized(
                f"this is a {parsed.env} key; this is the {env} environment", field="X-API-Key"
            )
        if parsed.product != product:
            raise Unauthorized(
                f"this key is for the {parsed.product} product; this endpoint needs {product}",
                field="X-API-Key",
            )
        record = await self.find(key)
        if record is None:
            raise Unauthorized("the API key is not known", field="X-API-Key")
        status = record.status(self._clock())
        if status == "revoked":
            raise Unauthorized("the API key was revoked", field="X-API-Key")
        if status == "expired":
            raise Unauthorized("the API key expired after rotation", field="X-API-Key")
        return record

    async def family_live(self, family: str) -> bool:
        """Whether the rotation family ``family`` (``KeyRecord.family``) still has a valid
        key: an active one, or a secondary within its 24 hours. A family whose every key is
        revoked (or expired) is not, nor is one the store does not know. Read from the store
        at most once per family every ``cache_seconds`` (a read awaits the store, never
        blocking the event loop), like a verified key; a change this keyring makes, or one
        another node announces (``forget``), applies at once."""
        now = self._clock()
        cached = self._families.get(family)
        if cached is not None and now - cached[1] < self._ttl:
            self._families.move_to_end(family)
            return now < cached[0]
        until = live_until(await self._store.keys_in_family(family))
        self._families[family] = (until, now)
        if len(self._families) > _CACHE_MAX:
            self._families.popitem(last=False)
        return now < until

    async def rotate(self, key: str) -> Rotation:
        """New primary for ``key``'s product; ``key`` stays valid for 24 hours.

        A family keeps at most one secondary: the older one (from an earlier rotation) ends
        now, so rotating again and again never leaves several keys valid at once.
        The one code path of operator rotation (``edge keys rotate``) and the earlier
        self-service endpoint (``GET /keys/apiKey``).
        """
        old = await self.find(key)
        now = self._clock()
        if old is None or not old.is_valid(now):
            raise Unauthorized("the API key is not valid", field="X-API-Key")
        if old.status(now) != "active":
            raise Conflict(
                "this key was already rotated; rotate its replacement instead", field="X-API-Key"
            )
        new_key = generate(old.env, old.product)
        record = self._record(new_key, old.env, old.product, old.name, family_id=old.family)
        expires = now + SECONDARY_TTL_SECONDS
        older = [
            k
            for k in await self._store.keys_in_family(old.family)
            if k.key_id != old.key_id and k.status(now) == "secondary"
        ]
        retire = tuple(k.key_id for k in older)
        if not await self._store.rotate_key(old.key_id, record, expires, now, retire):
            raise Conflict("this key was rotated concurrently", field="X-API-Key")
        for k in (old, *older):
            self._cache.pop(k.lookup, None)
        self._families.pop(old.family, None)
        await self._announce()
        return Rotation(new_key, key, expires, record, retire)

    async def revoke(self, key_or_id: str) -> KeyRecord | None:
        """Revoke by the key itself or by its ``key_id``; the record, or None if unknown."""
        record = (
            await self._store.key_by_id(key_or_id)
            if key_or_id.startswith("key_")
            else await self.find(key_or_id)
        )
        if record is None or not await self._store.revoke_key(record.key_id, self._clock()):
            return None
        self._cache.pop(record.lookup, None)
        self._families.pop(record.family, None)
        await self._announce()
        return await self._store.key_by_id(record.key_id)

    def forget(self) -> None:
        """Drop every cached verification and family (another node changed a key)."""
        self._cache.clear()
        self._families.clear()

    async def _announce(self) -> None:
        # Other nodes drop their cached verifications at once (within their cache time
        # anyway, should the announcement be lost: the change itself is committed).
        try:
            await self._store.announce("keys")
        except Exception as exc:
            log.warning("could not announce a key change: %s", exc)
