"""Delivery events behind the store: impressions (billing-grade), hovers, failures, billing,
counters for ``edge report``, and the registered publishers.

``EventStore`` is the backend-neutral interface (part of ``Store``); ``SQLiteEventStore``
implements it on the SQLite backend's ``read``/``write`` primitives. Its tables come from
``migrations/0004_events.sql``.

An impression, its billing event and its counter bumps are written in one job, so one
commit (one savepoint of the group commit) makes all of them durable together or none. On
the writer's connection the bumps are deferred to the end of the transaction and applied
summed per counter (``flush_counts``, before the COMMIT): a burst of impressions of one ad
costs one upsert per counter instead of seven per impression. A job that fails drops its
own deferred bumps with its savepoint.
"""

from __future__ import annotations

import abc
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from edge.counters import CountBuffer, CountRow
from edge.store.primitives import SQLitePrimitives

ImpressionKind = Literal["url", "ugc", "ai-render", "ai-view", "legacy"]

# Report counter names (``edge report`` columns, in this order). Routes add the first three
# through ``ctx.counters``; the store bumps the rest when it records the event.
REPORT_COUNTERS = (
    "requests",
    "matches",
    "no_matches",
    "impressions",
    "viewable_impressions",
    "hovers",
    "failures",
    "billable_usd",
)
# Kinds that mean "the ad was rendered" and those that mean "the ad was viewable". The tag's
# url/ugc beacons and the legacy beacon fire only once the ad is viewable (50% for 1 s), so
# they are both; an AI ad has separate render and view beacons.
_RENDERED = frozenset({"url", "ugc", "legacy", "ai-render"})
_VIEWABLE = frozenset({"url", "ugc", "legacy", "ai-view"})


@dataclass(frozen=True, slots=True)
class Impression:
    kind: ImpressionKind
    dedupe_keys: tuple[str, ...]  # a replay shares any one key
    env: str
    ad_id: str
    campaign_id: str | None
    at: float
    publisher_id: str | None = None
    post_id: str | None = None
    slot_id: str | None = None
    cpm_usd: float | None = None
    # Set by the edge's invalid-traffic rules (edge.ivt): stored with the row, counted as
    # ``invalid_<reason>`` instead of an impression, never billed.
    invalid_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Hover:
    token_id: str  # once per impression token
    ad_id: str
    at: float
    hover_ms: int
    publisher_id: str | None = None
    slot_id: str | None = None


@dataclass(frozen=True, slots=True)
class PlacementFailure:
    publisher_id: str
    slot_id: str
    reason: str
    at: float
    ad_id: str | None = None
    message: str = ""
    page_url: str = ""


@dataclass(frozen=True, slots=True)
class Publisher:
    publisher_id: str
    origins: tuple[str, ...]
    created_at: float
    updated_at: float


_PUBLISHER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def valid_publisher_id(text: str) -> bool:
    return bool(_PUBLISHER_ID.fullmatch(text))


def normalise_origin(text: str) -> str:
    """``scheme://host[:port]`` as browsers send it in ``Origin``; ValueError otherwise.

    Lower-cased, the default port dropped, a trailing ``/`` tolerated; a path, query,
    fragment or credentials are refused (an origin has none).
    """
    raw = text.strip()
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise ValueError(f"not an origin: {text!r}") from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"an origin is http(s)://host[:port], got {text!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"an origin has no path, query or credentials, got {text!r}")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


class EventStore(abc.ABC):
    """Impressions, engagement and failure events, billing, counters and publishers."""

    @abc.abstractmethod
    async def record_impression(self, imp: Impression) -> bool:
        """Count ``imp`` unless one of its dedupe keys was seen; True when counted.

        Returns after the commit. Writes a billing event (``cpm_usd / 1000``) only for
        production impressions with a CPM, and bumps the durable report counters in the
        same transaction.
        """

    @abc.abstractmethod
    async def record_hover(self, hover: Hover) -> bool:
        """Record a hover once per impression token; True when recorded now."""

    @abc.abstractmethod
    async def record_failure(self, failure: PlacementFailure) -> None: ...

    @abc.abstractmethod
    async def spend_by_campaign(self, since: float | None = None) -> dict[str, float]:
        """Billed USD per campaign id, in total or from ``since`` (epoch seconds) on."""

    @abc.abstractmethod
    async def add_counts(self, rows: list[tuple[str, str, str, float]]) -> None:
        """Add ``(scope, scope_id, counter, amount)`` rows to the durable counters."""

    @abc.abstractmethod
    async def counts(
        self, scopes: Sequence[str] | None = None
    ) -> list[tuple[str, str, str, float]]:
        """Every counter row (of the given scopes), ordered by scope, id and counter."""

    @abc.abstractmethod
    async def impression_count(self, kind: ImpressionKind | None = None) -> int:
        """Impressions stored (of one kind); what fault tests compare acknowledgements with."""

    @abc.abstractmethod
    async def impressions_by_tag_id(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The impression recorded for each of the tag's impression ids that has one:
        ``{id: {kind, ad_id, campaign_id, publisher_id, slot_id, post_id, invalid_reason,
        at}}`` (``invalid_reason`` None for a valid, counted impression)."""

    @abc.abstractmethod
    async def upsert_publisher(self, publisher_id: str, origins: list[str], at: float) -> None:
        """Register a publisher or add origins to it (never removes one)."""

    @abc.abstractmethod
    async def remove_publisher(self, publisher_id: str) -> bool: ...

    @abc.abstractmethod
    async def list_publishers(self) -> list[Publisher]: ...


class SQLiteEventStore(SQLitePrimitives, EventStore):
    """SQLite implementation; mixed into ``SQLiteStore`` (needs its ``read``/``write``)."""

    async def record_impression(self, imp: Impression) -> bool:
        if not imp.dedupe_keys:
            raise ValueError("an impression needs at least one dedupe key")
        return await self.write(_record_impression, imp)

    async def record_hover(self, hover: Hover) -> bool:
        return await self.write(_record_hover, hover)

    async def record_failure(self, failure: PlacementFailure) -> None:
        await self.write(_record_failure, failure)

    async def spend_by_campaign(self, since: float | None = None) -> dict[str, float]:
        if since is None:
            return await self.read(_spend_by_campaign)
        return await self.read(_spend_since, since)

    async def add_counts(self, rows: list[tuple[str, str, str, float]]) -> None:
        if rows:
            await self.write(_add_counts, list(rows))

    async def counts(
        self, scopes: Sequence[str] | None = None
    ) -> list[tuple[str, str, str, float]]:
        return await self.read(_counts, tuple(scopes) if scopes is not None else None)

    async def impression_count(self, kind: ImpressionKind | None = None) -> int:
        return await self.read(_impression_count, kind)

    async def impressions_by_tag_id(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        return await self.read(_impressions_by_tag_id, list(ids))

    async def upsert_publisher(self, publisher_id: str, origins: list[str], at: float) -> None:
        if not valid_publisher_id(publisher_id):
            raise ValueError(f"a publisher id is 1-64 of A-Z a-z 0-9 _ . -, got {publisher_id!r}")
        normalised = [normalise_origin(o) for o in origins]
        await self.write(_upsert_publisher, publisher_id, normalised, at)

    async def remove_publisher(self, publisher_id: str) -> bool:
        return await self.write(_remove_publisher, publisher_id)

    async def list_publishers(self) -> list[Publisher]:
        return await self.read(_list_publishers)


# -- SQL, run in the writer thread or a reader ----------------------------------------------

_BUMP = (
    "INSERT INTO counters (scope, scope_id, counter, amount) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (scope, scope_id, counter) DO UPDATE SET amount = amount + excluded.amount"
)


class CountingConnection(sqlite3.Connection):
    """The writer's connection: counter bumps wait in ``deferred_counts`` for the COMMIT."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deferred_counts = CountBuffer()


def _bump(conn: sqlite3.Connection, rows: Sequence[CountRow]) -> None:
    if isinstance(conn, CountingConnection):
        conn.deferred_counts.extend(rows)
    else:
        conn.executemany(_BUMP, rows)


def flush_counts(conn: CountingConnection) -> None:
    """Apply the deferred bumps, summed per counter; the writer calls it before COMMIT."""
    rows = conn.deferred_counts.take()
    if rows:
        conn.executemany(_BUMP, rows)


def _record_impression(conn: sqlite3.Connection, imp: Impression) -> bool:
    keys = list(dict.fromkeys(imp.dedupe_keys))
    marks = ",".join("?" * len(keys))
    seen = conn.execute(
        f"SELECT impression_id FROM impression_keys WHERE dedupe_key IN ({marks}) LIMIT 1", keys
    ).fetchone()
    if seen is not None:
        # A replay. Remember its other keys too, so a later beacon sharing only those is
        # also recognised (a retried token with a fresh impression id, and the reverse).
        conn.executemany(
            "INSERT OR IGNORE INTO impression_keys (dedupe_key, impression_id) VALUES (?, ?)",
            [(k, seen[0]) for k in keys],
        )
        return False
    cur = conn.execute(
        "INSERT INTO impressions (kind, env, ad_id, campaign_id, publisher_id, post_id, "
        "slot_id, cpm_usd, at, invalid_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            imp.kind,
            imp.env,
            imp.ad_id,
            imp.campaign_id,
            imp.publisher_id,
            imp.post_id,
            imp.slot_id,
            imp.cpm_usd,
            imp.at,
            imp.invalid_reason,
        ),
    )
    impression_id = cur.lastrowid
    conn.executemany(
        "INSERT INTO impression_keys (dedupe_key, impression_id) VALUES (?, ?)",
        [(k, impression_id) for k in keys],
    )
    bumps: list[tuple[str, str, str, float]] = []
    if imp.invalid_reason is not None:
        counter = f"invalid_{imp.invalid_reason}"
        bumps.append(("ad", imp.ad_id, counter, 1))
        if imp.publisher_id:
            bumps.append(("publisher", imp.publisher_id, counter, 1))
        if imp.campaign_id:
            bumps.append(("campaign", imp.campaign_id, counter, 1))
        _bump(conn, bumps)
        return True
    for counter, applies in (
        ("impressions", imp.kind in _RENDERED),
        ("viewable_impressions", imp.kind in _VIEWABLE),
    ):
        if applies:
            bumps.append(("ad", imp.ad_id, counter, 1))
            if imp.publisher_id:
                bumps.append(("publisher", imp.publisher_id, counter, 1))
    if imp.env == "production" and imp.cpm_usd is not None and imp.cpm_usd > 0:
        amount = imp.cpm_usd / 1000.0
        conn.execute(
            "INSERT INTO billing_events (impression_id, campaign_id, ad_id, publisher_id, "
            "amount_usd, at) VALUES (?, ?, ?, ?, ?, ?)",
            (impression_id, imp.campaign_id, imp.ad_id, imp.publisher_id, amount, imp.at),
        )
        bumps.append(("ad", imp.ad_id, "billable_usd", amount))
        if imp.publisher_id:
            bumps.append(("publisher", imp.publisher_id, "billable_usd", amount))
        if imp.campaign_id:
            bumps.append(("campaign", imp.campaign_id, "billable_usd", amount))
    _bump(conn, bumps)
    return True


def _record_hover(conn: sqlite3.Connection, h: Hover) -> bool:
    cur = conn.execute(
        "INSERT OR IGNORE INTO hovers (token_id, ad_id, publisher_id, slot_id, hover_ms, at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (h.token_id, h.ad_id, h.publisher_id, h.slot_id, h.hover_ms, h.at),
    )
    if cur.rowcount != 1:
        return False
    bumps = [("ad", h.ad_id, "hovers", 1)]
    if h.publisher_id:
        bumps.append(("publisher", h.publisher_id, "hovers", 1))
    _bump(conn, bumps)
    return True


def _record_failure(conn: sqlite3.Connection, f: PlacementFailure) -> None:
    conn.execute(
        "INSERT INTO placement_failures (publisher_id, slot_id, ad_id, reason, message, "
        "page_url, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (f.publisher_id, f.slot_id, f.ad_id, f.reason, f.message, f.page_url, f.at),
    )
    bumps = [("publisher", f.publisher_id, "failures", 1)]
    if f.ad_id:
        bumps.append(("ad", f.ad_id, "failures", 1))
    _bump(conn, bumps)


def _spend_by_campaign(conn: sqlite3.Connection) -> dict[str, float]:
    rows = conn.execute(
        "SELECT scope_id, amount FROM counters WHERE scope = 'campaign' AND counter = ?",
        ("billable_usd",),
    )
    return {campaign_id: amount for campaign_id, amount in rows}


def _spend_since(conn: sqlite3.Connection, since: float) -> dict[str, float]:
    rows = conn.execute(
        "SELECT campaign_id, sum(amount_usd) FROM billing_events "
        "WHERE at >= ? AND campaign_id IS NOT NULL GROUP BY campaign_id",
        (since,),
    )
    return {campaign_id: amount for campaign_id, amount in rows}


def _add_counts(conn: sqlite3.Connection, rows: list[tuple[str, str, str, float]]) -> None:
    conn.executemany(_BUMP, rows)


def _counts(
    conn: sqlite3.Connection, scopes: tuple[str, ...] | None
) -> list[tuple[str, str, str, float]]:
    sql = "SELECT scope, scope_id, counter, amount FROM counters"
    args: tuple[str, ...] = ()
    if scopes is not None:
        if not scopes:
            return []
        sql += f" WHERE scope IN ({','.join('?' * len(scopes))})"
        args = scopes
    return [tuple(r) for r in conn.execute(sql + " ORDER BY scope, scope_id, counter", args)]


def _impression_count(conn: sqlite3.Connection, kind: str | None) -> int:
    if kind is None:
        return int(conn.execute("SELECT count(*) FROM impressions").fetchone()[0])
    sql = "SELECT count(*) FROM impressions WHERE kind = ?"
    return int(conn.execute(sql, (kind,)).fetchone()[0])


_TAG_ID = "iid:"  # the dedupe key the tag's impression id is stored under


def _impressions_by_tag_id(conn: sqlite3.Connection, ids: list[str]) -> dict[str, dict[str, Any]]:
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        "SELECT k.dedupe_key, i.kind, i.ad_id, i.campaign_id, i.publisher_id, i.slot_id,"
        " i.post_id, i.invalid_reason, i.at"
        " FROM impression_keys k JOIN impressions i ON i.id = k.impression_id"
        f" WHERE k.dedupe_key IN ({marks})",
        [_TAG_ID + i for i in ids],
    )
    names = (
        "kind", "ad_id", "campaign_id", "publisher_id", "slot_id", "post_id", "invalid_reason",
        "at",
    )  # fmt: skip
    return {key[len(_TAG_ID) :]: dict(zip(names, rest, strict=True)) for key, *rest in rows}


def _upsert_publisher(
    conn: sqlite3.Connection, publisher_id: str, origins: list[str], at: float
) -> None:
    row = conn.execute(
        "SELECT origins FROM publishers WHERE publisher_id = ?", (publisher_id,)
    ).fetchone()
    if row is None:
        merged = list(dict.fromkeys(origins))
        conn.execute(
            "INSERT INTO publishers (publisher_id, origins, created_at, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (publisher_id, orjson.dumps(merged).decode(), at, at),
        )
        return
    merged = list(dict.fromkeys([*orjson.loads(row[0]), *origins]))
    conn.execute(
        "UPDATE publishers SET origins = ?, updated_at = ? WHERE publisher_id = ?",
        (orjson.dumps(merged).decode(), at, publisher_id),
    )


def _remove_publisher(conn: sqlite3.Connection, publisher_id: str) -> bool:
    cur = conn.execute("DELETE FROM publishers WHERE publisher_id = ?", (publisher_id,))
    return cur.rowcount == 1


def _list_publishers(conn: sqlite3.Connection) -> list[Publisher]:
    rows = conn.execute(
        "SELECT publisher_id, origins, created_at, updated_at FROM publishers ORDER BY publisher_id"
    )
    return [Publisher(pid, tuple(orjson.loads(o)), c, u) for pid, o, c, u in rows]
