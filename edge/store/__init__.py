"""Durable state behind one interface; SQLite by default, PostgreSQL for several nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge.store.base import (
    CatalogueVersion,
    KeyRecord,
    Store,
    StoreUnavailable,
    TagVersionRecord,
)
from edge.store.events import (
    Click,
    ClickConflict,
    Conversion,
    Hover,
    Impression,
    PlacementFailure,
    Publisher,
    StoredClick,
    StoredImpression,
)
from edge.store.migrations import NewerSchema
from edge.store.postgres import PostgresStore
from edge.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from edge.settings import Settings

__all__ = [
    "CatalogueVersion",
    "Click",
    "ClickConflict",
    "Conversion",
    "Hover",
    "Impression",
    "KeyRecord",
    "NewerSchema",
    "PlacementFailure",
    "PostgresStore",
    "Publisher",
    "SQLiteStore",
    "Store",
    "StoreUnavailable",
    "StoredClick",
    "StoredImpression",
    "TagVersionRecord",
    "open_store",
]


def open_store(settings: Settings) -> Store:
    """The store the settings name (not yet opened): a ``postgresql://`` URL is PostgreSQL,
    anything else a SQLite file."""
    if isinstance(settings.db, str):
        return PostgresStore(settings.db)
    return SQLiteStore(settings.db)
