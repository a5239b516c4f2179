"""The store interface. Callers (routes, CLI, the matcher's state adapter) speak only to this.

A backend implements every method; SQLite is the default (``edge.store.sqlite``) and a
PostgreSQL backend for several edge instances would be another subclass with the same
methods. Every write method returns only after its data is committed, so a 2xx built on it
is a durable acknowledgement.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from edge.store.events import EventStore
from edge.store.matcher_state import MatcherStateStore

Product = Literal["ugc", "ai", "ad-manager"]
KeyStatus = Literal["active", "secondary", "expired", "revoked"]


class StoreUnavailable(Exception):
    """The store could not commit or answer (disk full, locked too long, closed)."""


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    lookup: str
    key_hash: str
    env: str
    product: str
    name: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    replaced_by: str | None = None
    family_id: str | None = None  # the first key of its rotation chain; None: itself

    @property
    def family(self) -> str:
        """The rotation family: the key and every key that replaced it share it."""
        return self.family_id or self.key_id

    def status(self, now: float) -> KeyStatus:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is None:
            return "active"
        # Valid strictly before the expiry instant: "after the expiry only the new key works".
        return "secondary" if now < self.expires_at else "expired"

    def is_valid(self, now: float) -> bool:
        return self.status(now) in ("active", "secondary")


@dataclass(frozen=True, slots=True)
class TagVersionRecord:
    version: str
    integrity: str  # "sha384-..." of the bytes, as <script integrity=...> takes it
    built_at: float  # when this edge first built (and stored) it


@dataclass(frozen=True, slots=True)
class CatalogueVersion:
    version: int
    content_hash: str
    loaded_at: float  # when ``edge catalogue load`` (or ``restore``) stored it


class Store(MatcherStateStore, EventStore, abc.ABC):
    """Durable state of the edge: keys and meta here; matcher state and delivery events in
    their own modules (``matcher_state.py``, ``events.py``), each an interface part."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and apply pending schema migrations."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Finish queued writes and disconnect."""

    # -- meta ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def get_meta(self, name: str) -> bytes | None: ...

    @abc.abstractmethod
    async def put_meta_if_absent(self, name: str, value: bytes) -> bytes:
        """Store ``value`` unless ``name`` is set; return what is stored now."""

    # -- keys ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def insert_key(self, record: KeyRecord) -> None: ...

    @abc.abstractmethod
    async def key_by_lookup(self, lookup: str) -> KeyRecord | None: ...

    @abc.abstractmethod
    async def key_by_id(self, key_id: str) -> KeyRecord | None: ...

    @abc.abstractmethod
    async def list_keys(self) -> list[KeyRecord]: ...

    @abc.abstractmethod
    @abc.abstractmethod
    async def keys_in_family(self, family: str) -> list[KeyRecord]:
        """Every key of one rotation family (``KeyRecord.family``)."""

    @abc.abstractmethod
    async def rotate_key(
        self,
        old_key_id: str,
        new: KeyRecord,
        secondary_expires_at: float,
        now: float,
        expire_key_ids: tuple[str, ...] = (),
    ) -> bool:
        """Atomically add ``new``, make the old key a secondary until the given instant and
        end ``expire_key_ids`` (the caller's choice) at ``now``.

        False (and nothing written) when the old key is not an active primary at ``now``.
        """

    @abc.abstractmethod
    async def revoke_key(self, key_id: str, at: float) -> bool:
        """Revoke a key; False when it does not exist or was already revoked."""

    @abc.abstractmethod
    async def end_session(self, session_id: str, expires_at: float, now: float) -> None:
        """Record a /reports session as ended until ``expires_at``; in the same transaction,
        forget the ended sessions that have expired by ``now``."""

    @abc.abstractmethod
    async def session_ended(self, session_id: str) -> bool:
        """Whether this /reports session was ended (and has not expired since)."""

    # -- the live catalogue -----------------------------------------------------------------

    @abc.abstractmethod
    async def put_catalogue(
        self, content_hash: str, body: bytes, at: float, *, keep_previous: int
    ) -> int:
        """Store a catalogue as the newest (live) version; its version number. In the same
        transaction, every version but the newest ``keep_previous`` before it is deleted."""

    @abc.abstractmethod
    async def live_catalogue(self) -> tuple[int, str] | None:
        """(version, content hash) of the live catalogue, or None when none was loaded."""

    @abc.abstractmethod
    async def catalogue_body(self, version: int) -> bytes | None:
        """The file of one catalogue version as it was loaded."""

    @abc.abstractmethod
    async def catalogue_versions(self) -> list[CatalogueVersion]:
        """Every stored catalogue version without its file, newest (the live one) first."""

    # -- browser tag versions ----------------------------------------------------------------

    @abc.abstractmethod
    async def put_tag_version(self, version: str, body: bytes, integrity: str, at: float) -> float:
        """Keep one built tag unless that version is stored already; when it was first
        stored (``at`` for a new one)."""

    @abc.abstractmethod
    async def tag_versions(self) -> list[TagVersionRecord]:
        """Every stored tag version without its bytes, oldest first."""

    @abc.abstractmethod
    async def tag_version_body(self, version: str) -> bytes | None:
        """The bytes of one stored tag version, or None."""

    # -- what several nodes share (a backend without nodes keeps these defaults) -----------

    async def take_rate(
        self, bucket: str, now: float, interval: float, tolerance: float
    ) -> tuple[bool, float] | None:
        """Spend one request of a shared GCRA bucket, atomically.

        The bucket's theoretical arrival time (TAT) moves to ``max(TAT, now) + interval``
        when ``max(TAT, now) - now <= tolerance``. Returns (True, the new TAT) when it moved,
        (False, the stored TAT) when it did not, or None when this backend has no shared
        buckets (the caller decides alone).
        """
        return None

    async def prune_rate_buckets(self, idle_before: float) -> int:
        """Delete shared buckets whose TAT is before ``idle_before``; how many went."""
        return 0

    async def announce(self, topic: str, payload: str = "") -> None:
        """Tell every node listening on this database that ``topic`` changed (best effort:
        a node that misses it catches up from its own refresh)."""

    def on_change(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(topic, payload)`` on the event loop for every announcement made
        by any node; ``("*", "")`` after the listener reconnects (anything may have changed).
        A backend without nodes never calls it."""
