"""Delivery events behind the store: impressions (billing-grade), hovers, failures, billing,
counters for ``edge report``, and the registered publishers.

``EventStore`` is the backend-neutral interface (part of ``Store``); ``SQLiteEventStore``
implements it on the SQLite backend's ``read``/``write`` primitives. Its tables come from
``migrations/0004_events.sql``.

A backend only stores: what an event bills and which counters it moves are decided by the
edge (``edge.ledger``) and handed in with the event. The backend's one rule is uniqueness:
an impression whose dedupe keys are all new is inserted with what it bills (a column of its
row) and its counter bumps in one transaction; one sharing any key is a replay and writes
nothing but its other keys. A click or conversion is likewise inserted if absent (by click
id, by click), with the charge and bumps it was handed. On SQLite that is one job of the
group commit (one savepoint). On the writer's connection the bumps are deferred to the end of the
transaction and applied summed per counter (``flush_counts``, before the COMMIT): a burst
of impressions of one ad costs one upsert per counter instead of seven per impression. A
job that fails drops its own deferred bumps with its savepoint. Bumps of day buckets
(``edge.counters.DayRow``, which the edge adds beside the totals it wants kept per UTC
day) take the same path into ``daily_counters``.
"""

from __future__ import annotations

import abc
import itertools
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, cast

import msgspec
import orjson

from edge.counters import CountBuffer, CountRow, DayRow, split_rows, times_rows
from edge.origins import normalise_origin
from edge.store.primitives import SQLitePrimitives
from matcher.types import PricingModel

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


class Impression(msgspec.Struct, frozen=True):
    """An impression as the edge judged it, handed to the store as it is: immutable, equal
    by value. A frozen msgspec Struct rather than a frozen dataclass, whose constructor
    sets each of the eleven fields through ``object.__setattr__`` (~5 against ~0.5 us on a
    loaded machine; one is made per beacon)."""

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
    # The rotation family of the partner's key whose serve it came from (its report row);
    # None for the tag's impressions. Moves counters only: not a column of its row.
    key_family: str | None = None


ClickKind = Literal["url", "ugc", "ai"]
PricingType = Literal["cpc", "cpm", "cpa"]


class ClickConflict(Exception):
    """The impression already has a valid click (another one committed first)."""


@dataclass(frozen=True, slots=True)
class Click:
    """A click as the edge judged it: valid (``invalid_reason`` None) or invalid, the
    pricing model it was judged under (``pricing``: its ad set's when the ad was served;
    None when unknown) and what it bills (``charge_usd``, CPC only; None: nothing)."""

    click_id: str  # a replay shares it (and the impression key): unique per impression
    impression_key: str  # the impression's dedupe key: 'tok:<token id>' or 'ai...' (AiBeacon)
    kind: ClickKind
    env: str
    ad_id: str
    campaign_id: str | None
    at: float
    publisher_id: str | None = None
    slot_id: str | None = None
    invalid_reason: str | None = None
    charge_usd: float | None = None
    pricing: PricingModel | None = None
    # The rotation family of the partner's key whose serve it came from (its report row,
    # and its conversion's); None for a click on the tag's ads.
    key_family: str | None = None


@dataclass(frozen=True, slots=True)
class StoredImpression:
    """What a click or a retry needs of a stored impression: its post, its ad, the reason
    it was stored as invalid traffic (None: valid), and whether it billed (a CPM charge)."""

    post_id: str | None
    ad_id: str
    invalid_reason: str | None
    billed: bool = False


@dataclass(frozen=True, slots=True)
class StoredClick:
    row: int
    click_id: str
    impression_key: str
    kind: str
    env: str
    ad_id: str
    campaign_id: str | None
    publisher_id: str | None
    invalid_reason: str | None
    at: float
    # The pricing model and bid its ad was served under; None in a row stored before
    # clicks kept them (or when the edge that judged the click did not know the ad).
    pricing_model: str | None = None
    bid_usd: float | None = None
    # The partner's key family (``Click.key_family``); None in a row stored before clicks
    # kept it, and for a click on the tag's ads.
    key_family: str | None = None

    @property
    def pricing(self) -> PricingModel | None:
        if self.pricing_model is None or self.bid_usd is None:
            return None
        return PricingModel(cast(PricingType, self.pricing_model), self.bid_usd)


@dataclass(frozen=True, slots=True)
class Conversion:
    click: StoredClick
    at: float
    value_usd: float | None = None  # what the advertiser reports it was worth (not billed)
    charge_usd: float | None = None  # CPA: what it bills; None: nothing


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


class EventStore(abc.ABC):
    """Impressions, engagement and failure events, billing, counters and publishers."""

    @abc.abstractmethod
    async def save_impression(
        self, imp: Impression, billing_usd: float | None, counts: Sequence[CountRow]
    ) -> bool:
        """Insert ``imp`` unless one of its dedupe keys is stored; True when inserted.

        When inserted: with ``billing_usd`` stored as what it bills (None: nothing; the
        ``billing_events`` rows are the billed impressions) and the counter bumps
        ``counts``, in the same transaction. When a replay: nothing but its other
        dedupe keys, tied to the stored impression (a later beacon sharing only those is a
        replay too). Returns after the commit.
        """

    @abc.abstractmethod
    async def save_hover(self, hover: Hover, counts: Sequence[CountRow]) -> bool:
        """Insert the hover unless its token has one; with ``counts`` when inserted."""

    @abc.abstractmethod
    async def save_failure(self, failure: PlacementFailure, counts: Sequence[CountRow]) -> None:
        """Insert a placement failure with its counter bumps."""

    @abc.abstractmethod
    async def spend_by_campaign(self) -> dict[str, float]:
        """Billed USD per campaign id, in total (the campaigns' ``billable_usd`` counters)."""

    @abc.abstractmethod
    async def spend_on_day(self, day: str) -> dict[str, float]:
        """Billed USD per campaign id on one UTC day (``YYYY-MM-DD``): the campaigns'
        ``billable_usd`` day buckets, which every billing commit bumps in its own
        transaction (``edge.ledger``)."""

    @abc.abstractmethod
    async def save_click(self, click: Click, counts: Sequence[CountRow]) -> bool:
        """Insert ``click`` unless a click with its ``click_id`` and its ``impression_key``
        is stored; True when inserted. The same click id on another impression is another
        click.

        When inserted: with a charge row of ``click.charge_usd`` (when not None) and the
        counter bumps ``counts``, in the same transaction; when a replay, nothing. The
        rules kept here are uniqueness: that one, and ``ClickConflict`` (nothing stored)
        when the click is valid and its impression has a valid click already. Returns after
        the commit.
        """

    @abc.abstractmethod
    async def clicks_by_id(self, click_id: str, env: str, limit: int) -> list[StoredClick]:
        """The stored clicks of ``env`` with this click id (one per impression at most),
        valid ones first, then in the order stored; at most ``limit``."""

    @abc.abstractmethod
    async def stored_impression(self, dedupe_key: str) -> StoredImpression | None:
        """The impression stored under this dedupe key, or None."""

    @abc.abstractmethod
    async def click_stored(self, click_id: str, impression_key: str) -> bool:
        """Whether a click with this ``click_id`` is stored for this impression."""

    @abc.abstractmethod
    async def valid_click_stored(self, impression_key: str) -> bool:
        """Whether this impression has a valid click stored."""

    @abc.abstractmethod
    async def valid_click_pricing(self, impression_key: str) -> str | None:
        """The pricing model (``cpc``, ``cpm``, ``cpa``) the valid click of this impression
        was judged under; None when it has none, or one stored before clicks kept theirs."""

    @abc.abstractmethod
    async def save_conversion(self, conversion: Conversion, counts: Sequence[CountRow]) -> bool:
        """Insert the conversion unless its click has one; True when inserted, then with a
        charge row of ``conversion.charge_usd`` (when not None) and the counter bumps
        ``counts`` in the same transaction. Returns after the commit."""

    @abc.abstractmethod
    async def click_count(self, valid: bool | None = None) -> int:
        """Clicks stored (valid ones, invalid ones, or all)."""

    @abc.abstractmethod
    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        """Add ``(scope, scope_id, counter, amount)`` rows to the durable counters, and
        ``(day, scope, scope_id, counter, amount)`` rows to the day buckets."""

    @abc.abstractmethod
    async def daily_counts(
        self, since: str, until: str, scopes: Sequence[str] | None = None
    ) -> list[DayRow]:
        """Day-bucket rows of the UTC days ``since`` to ``until`` (``YYYY-MM-DD``, both
        included), of the given scopes; ordered by day, scope, id and counter."""

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

    async def save_impression(
        self, imp: Impression, billing_usd: float | None, counts: Sequence[CountRow]
    ) -> bool:
        if not imp.dedupe_keys:
            raise ValueError("an impression needs at least one dedupe key")
        # A tuple passes as itself (``tuple`` of a tuple is that tuple): the ledger hands
        # impressions alike one shared tuple of bumps, and the writer adds each shared
        # tuple once per batch, times its count; a list is copied, as the caller may reuse it.
        return await self.write_soon(_save_impression, imp, billing_usd, tuple(counts))

    async def save_hover(self, hover: Hover, counts: Sequence[CountRow]) -> bool:
        return await self.write(_save_hover, hover, list(counts))

    async def save_failure(self, failure: PlacementFailure, counts: Sequence[CountRow]) -> None:
        await self.write(_save_failure, failure, list(counts))

    async def spend_by_campaign(self) -> dict[str, float]:
        return await self.read(_spend_by_campaign)

    async def spend_on_day(self, day: str) -> dict[str, float]:
        return await self.read(_spend_on_day, day)

    async def save_click(self, click: Click, counts: Sequence[CountRow]) -> bool:
        return await self.write(_save_click, click, list(counts))

    async def clicks_by_id(self, click_id: str, env: str, limit: int) -> list[StoredClick]:
        return await self.read(_clicks_by_id, click_id, env, limit)

    async def stored_impression(self, dedupe_key: str) -> StoredImpression | None:
        return await self.read(_stored_impression, dedupe_key)

    async def click_stored(self, click_id: str, impression_key: str) -> bool:
        return await self.read(_click_stored, click_id, impression_key)

    async def valid_click_stored(self, impression_key: str) -> bool:
        return await self.read(_valid_click_stored, impression_key)

    async def valid_click_pricing(self, impression_key: str) -> str | None:
        return await self.read(_valid_click_pricing, impression_key)

    async def save_conversion(self, conversion: Conversion, counts: Sequence[CountRow]) -> bool:
        return await self.write(_save_conversion, conversion, list(counts))

    async def click_count(self, valid: bool | None = None) -> int:
        return await self.read(_click_count, valid)

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        if rows:
            await self.write(_add_counts, list(rows))

    async def daily_counts(
        self, since: str, until: str, scopes: Sequence[str] | None = None
    ) -> list[DayRow]:
        return await self.read(
            _daily_counts, since, until, tuple(scopes) if scopes is not None else None
        )

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


_DAY_BUMP = (
    "INSERT INTO daily_counters (day, scope, scope_id, counter, amount) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (day, scope, scope_id, counter) DO UPDATE SET amount = amount + excluded.amount"
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
        _apply(conn, rows)


def _apply(conn: sqlite3.Connection, rows: Sequence[CountRow]) -> None:
    totals, days = split_rows(rows)
    if totals:
        conn.executemany(_BUMP, totals)
    if days:
        conn.executemany(_DAY_BUMP, days)


def flush_counts(conn: CountingConnection) -> None:
    """Apply the deferred bumps, summed per counter; the writer calls it before COMMIT."""
    rows = conn.deferred_counts.take()
    if rows:
        _apply(conn, rows)


def _save_impression(
    conn: sqlite3.Connection, imp: Impression, billing_usd: float | None, counts: Sequence[CountRow]
) -> bool:
    keys = list(dict.fromkeys(imp.dedupe_keys))
    marks = ",".join("?" * len(keys))
    seen = conn.execute(
        f"SELECT impression_id FROM impression_keys WHERE dedupe_key IN ({marks}) LIMIT 1", keys
    ).fetchone()
    if seen is not None:
        conn.executemany(
            "INSERT OR IGNORE INTO impression_keys (dedupe_key, impression_id) VALUES (?, ?)",
            [(k, seen[0]) for k in keys],
        )
        return False
    cur = conn.execute(
        "INSERT INTO impressions (kind, env, ad_id, campaign_id, publisher_id, post_id, "
        "slot_id, cpm_usd, at, invalid_reason, billed_usd) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            billing_usd,
        ),
    )
    impression_id = cur.lastrowid
    conn.executemany(
        "INSERT INTO impression_keys (dedupe_key, impression_id) VALUES (?, ?)",
        [(k, impression_id) for k in keys],
    )
    _bump(conn, counts)
    return True


# The impression row with an explicit id, as _save_impressions inserts a run of them.
_INSERT_IMPRESSION = (
    "INSERT INTO impressions (id, kind, env, ad_id, campaign_id, publisher_id, post_id, "
    "slot_id, cpm_usd, at, invalid_reason, billed_usd) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_KEYS_PER_QUERY = 500  # bound parameters of one IN (...) lookup


def _save_impressions(
    conn: sqlite3.Connection,
    jobs: Sequence[tuple[Impression, float | None, Sequence[CountRow]]],
) -> list[bool]:
    """``_save_impression`` for a run of impressions in one go, with the same outcome as
    running them one after the other: a dedupe-key lookup for all of them, then one
    ``executemany`` per table. If it raises, the writer undoes it and runs the jobs one by
    one (each failure then stays its job's own)."""
    key_lists = _key_lists(jobs)
    wanted = list(dict.fromkeys(k for keys in key_lists for k in keys))
    known: dict[str, int] = {}
    for i in range(0, len(wanted), _KEYS_PER_QUERY):
        chunk = wanted[i : i + _KEYS_PER_QUERY]
        known.update(
            conn.execute(
                "SELECT dedupe_key, impression_id FROM impression_keys "
                f"WHERE dedupe_key IN ({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
        )
    return _insert_impressions(conn, jobs, key_lists, known)


def _save_new_impressions(
    conn: sqlite3.Connection,
    jobs: Sequence[tuple[Impression, float | None, Sequence[CountRow]]],
) -> list[bool]:
    """``_save_impressions`` without the lookup, for the usual run where no key is stored
    yet: replays inside the run are still found here, and a key that is stored already
    makes the keys' insert raise (their primary key), so the writer undoes the run and
    takes ``_save_impressions`` instead. The insert walks to the same index pages the
    lookup would have, so the lookup's walk is saved."""
    key_lists = _key_lists(jobs)
    return _insert_impressions(conn, jobs, key_lists, {})


def _key_lists(
    jobs: Sequence[tuple[Impression, float | None, Sequence[CountRow]]],
) -> list[list[str]]:
    key_lists = [list(dict.fromkeys(imp.dedupe_keys)) for imp, _, _ in jobs]
    if not all(key_lists):
        raise ValueError("an impression needs at least one dedupe key")
    return key_lists


def _insert_impressions(
    conn: sqlite3.Connection,
    jobs: Sequence[tuple[Impression, float | None, Sequence[CountRow]]],
    key_lists: list[list[str]],
    known: dict[str, int],
) -> list[bool]:
    """Insert the run's impressions, given the stored impression id of each key ``known``
    (updated here as the run teaches it keys)."""
    # Under the write lock (BEGIN IMMEDIATE) nobody else inserts: the ids SQLite would give.
    next_id: int = conn.execute("SELECT coalesce(max(id), 0) FROM impressions").fetchone()[0]
    rows: list[tuple[Any, ...]] = []
    key_rows: list[tuple[str, int]] = []
    # The counted impressions' bumps, by the list of bumps each was handed and how many
    # were handed that list: impressions alike share one (``ledger.impression_counts_of_day``),
    # so a run adds each distinct list once, times its count, instead of every row of each.
    counted: dict[int, list[Any]] = {}
    results: list[bool] = []
    for (imp, billing_usd, counts), keys in zip(jobs, key_lists, strict=True):
        seen = None
        for k in keys:
            seen = known.get(k)
            if seen is not None:
                break
        if seen is not None:  # a replay: it only teaches the store its other keys
            for k in keys:
                if k not in known:
                    known[k] = seen
                    key_rows.append((k, seen))
            results.append(False)
            continue
        next_id += 1
        rows.append((next_id, imp.kind, imp.env, imp.ad_id, imp.campaign_id,
                     imp.publisher_id, imp.post_id, imp.slot_id, imp.cpm_usd, imp.at,
                     imp.invalid_reason, billing_usd))  # fmt: skip
        for k in keys:
            known[k] = next_id
            key_rows.append((k, next_id))
        same = counted.get(id(counts))
        if same is None:
            counted[id(counts)] = [counts, 1]
        else:
            same[1] += 1
        results.append(True)
    conn.executemany(_INSERT_IMPRESSION, rows)
    conn.executemany("INSERT INTO impression_keys (dedupe_key, impression_id) VALUES (?, ?)",
                     key_rows)  # fmt: skip
    _bump(conn, [row for counts, times in counted.values() for row in times_rows(counts, times)])
    return results


# Write jobs with forms that take a run of the same job's arguments at once (the writer of
# ``edge.store.sqlite`` uses them for consecutive jobs of that function): tried in order,
# each from a clean transaction, until one succeeds; then the jobs run one by one.
class _Run(Protocol):
    @property
    def fn(self) -> Callable[..., Any]: ...


J = TypeVar("J", bound=_Run)


def runs_of(batch: list[J]) -> list[list[J]]:
    """A writer's batch cut into runs of consecutive jobs of the same function, in order:
    a run of one function with a batched form (``BATCHED``) is written at once."""
    return [list(run) for _, run in itertools.groupby(batch, key=lambda job: job.fn)]


BATCHED: dict[Callable[..., Any], tuple[Callable[..., list[Any]], ...]] = {
    _save_impression: (_save_new_impressions, _save_impressions),
}


def pricing_columns(c: Click) -> tuple[str | None, float | None]:
    """The click's ``pricing_model`` and ``bid_usd`` columns (NULL without pricing)."""
    if c.pricing is None:
        return None, None
    return c.pricing.type, c.pricing.bid_amount


def _save_click(conn: sqlite3.Connection, c: Click, counts: list[CountRow]) -> bool:
    try:
        cur = conn.execute(
            "INSERT INTO clicks (click_id, impression_key, kind, env, ad_id, campaign_id, "
            "publisher_id, slot_id, invalid_reason, at, pricing_model, bid_usd, key_family) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (click_id, impression_key) DO NOTHING",
            (c.click_id, c.impression_key, c.kind, c.env, c.ad_id, c.campaign_id,
             c.publisher_id, c.slot_id, c.invalid_reason, c.at, *pricing_columns(c),
             c.key_family),
        )  # fmt: skip
    except sqlite3.IntegrityError:  # a second valid click of one impression
        raise ClickConflict(c.impression_key) from None
    if cur.rowcount != 1:
        return False  # a replay: this click id of this impression is stored
    if c.charge_usd is not None:
        conn.execute(
            "INSERT INTO charges (pricing, click_row, campaign_id, ad_id, publisher_id, "
            "amount_usd, at) VALUES ('cpc', ?, ?, ?, ?, ?, ?)",
            (cur.lastrowid, c.campaign_id, c.ad_id, c.publisher_id, c.charge_usd, c.at),
        )
    _bump(conn, counts)
    return True


def _clicks_by_id(
    conn: sqlite3.Connection, click_id: str, env: str, limit: int
) -> list[StoredClick]:
    rows = conn.execute(
        "SELECT id, click_id, impression_key, kind, env, ad_id, campaign_id, publisher_id, "
        "invalid_reason, at, pricing_model, bid_usd, key_family FROM clicks "
        "WHERE click_id = ? AND env = ? "
        "ORDER BY invalid_reason IS NOT NULL, id LIMIT ?",
        (click_id, env, limit),
    ).fetchall()
    return [StoredClick(*row) for row in rows]


def _stored_impression(conn: sqlite3.Connection, key: str) -> StoredImpression | None:
    row = conn.execute(
        "SELECT i.post_id, i.ad_id, i.invalid_reason, i.billed_usd IS NOT NULL "
        "FROM impression_keys k JOIN impressions i "
        "ON i.id = k.impression_id WHERE k.dedupe_key = ?",
        (key,),
    ).fetchone()
    return None if row is None else StoredImpression(row[0], row[1], row[2], bool(row[3]))


def _click_stored(conn: sqlite3.Connection, click_id: str, impression_key: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM clicks WHERE click_id = ? AND impression_key = ?",
        (click_id, impression_key),
    )
    return found.fetchone() is not None


def _valid_click_pricing(conn: sqlite3.Connection, impression_key: str) -> str | None:
    row = conn.execute(
        "SELECT pricing_model FROM clicks WHERE impression_key = ? AND invalid_reason IS NULL",
        (impression_key,),
    ).fetchone()
    return None if row is None else row[0]


def _valid_click_stored(conn: sqlite3.Connection, impression_key: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM clicks WHERE impression_key = ? AND invalid_reason IS NULL",
        (impression_key,),
    )
    return found.fetchone() is not None


def _save_conversion(conn: sqlite3.Connection, v: Conversion, counts: list[CountRow]) -> bool:
    cur = conn.execute(
        "INSERT INTO conversions (click_row, ad_id, campaign_id, value_usd, at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (click_row) DO NOTHING",
        (v.click.row, v.click.ad_id, v.click.campaign_id, v.value_usd, v.at),
    )
    if cur.rowcount != 1:
        return False  # this click has converted already
    c = v.click
    if v.charge_usd is not None:
        conn.execute(
            "INSERT INTO charges (pricing, click_row, conversion_row, campaign_id, ad_id, "
            "publisher_id, amount_usd, at) VALUES ('cpa', ?, ?, ?, ?, ?, ?, ?)",
            (c.row, cur.lastrowid, c.campaign_id, c.ad_id, c.publisher_id, v.charge_usd, v.at),
        )
    _bump(conn, counts)
    return True


def _click_count(conn: sqlite3.Connection, valid: bool | None) -> int:
    sql = "SELECT count(*) FROM clicks"
    if valid is not None:
        sql += " WHERE invalid_reason IS NULL" if valid else " WHERE invalid_reason IS NOT NULL"
    count: int = conn.execute(sql).fetchone()[0]
    return count


def _save_hover(conn: sqlite3.Connection, h: Hover, counts: list[CountRow]) -> bool:
    cur = conn.execute(
        "INSERT OR IGNORE INTO hovers (token_id, ad_id, publisher_id, slot_id, hover_ms, at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (h.token_id, h.ad_id, h.publisher_id, h.slot_id, h.hover_ms, h.at),
    )
    if cur.rowcount != 1:
        return False
    _bump(conn, counts)
    return True


def _save_failure(conn: sqlite3.Connection, f: PlacementFailure, counts: list[CountRow]) -> None:
    conn.execute(
        "INSERT INTO placement_failures (publisher_id, slot_id, ad_id, reason, message, "
        "page_url, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (f.publisher_id, f.slot_id, f.ad_id, f.reason, f.message, f.page_url, f.at),
    )
    _bump(conn, counts)


def _spend_by_campaign(conn: sqlite3.Connection) -> dict[str, float]:
    rows = conn.execute(
        "SELECT scope_id, amount FROM counters WHERE scope = 'campaign' AND counter = ?",
        ("billable_usd",),
    )
    return {campaign_id: amount for campaign_id, amount in rows}


def _spend_on_day(conn: sqlite3.Connection, day: str) -> dict[str, float]:
    rows = conn.execute(
        "SELECT scope_id, amount FROM daily_counters"
        " WHERE day = ? AND scope = 'campaign' AND counter = ?",
        (day, "billable_usd"),
    )
    return {campaign_id: amount for campaign_id, amount in rows}


def _add_counts(conn: sqlite3.Connection, rows: list[CountRow]) -> None:
    _bump(conn, rows)


def _daily_counts(
    conn: sqlite3.Connection, since: str, until: str, scopes: tuple[str, ...] | None
) -> list[DayRow]:
    sql = (
        "SELECT day, scope, scope_id, counter, amount FROM daily_counters WHERE day BETWEEN ? AND ?"
    )
    args: tuple[str, ...] = (since, until)
    if scopes is not None:
        if not scopes:
            return []
        sql += f" AND scope IN ({','.join('?' * len(scopes))})"
        args += scopes
    rows = conn.execute(sql + " ORDER BY day, scope, scope_id, counter", args)
    return [(d, s, i, c, float(a)) for d, s, i, c, a in rows]


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


TAG_ID_PREFIX = "iid:"  # the dedupe key the tag's impression id is stored under
_TAG_ID = TAG_ID_PREFIX


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
