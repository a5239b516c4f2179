"""Durable state behind one interface; SQLite by default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge.store.base import KeyRecord, Store, StoreUnavailable
from edge.store.events import (
    Click,
    ClickConflict,
    Conversion,
    Hover,
    Impression,
    PlacementFailure,
    Publisher,
    StoredClick,
)
from edge.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from edge.settings import Settings

__all__ = [
    "Click",
    "ClickConflict",
    "Conversion",
    "Hover",
    "Impression",
    "KeyRecord",
    "PlacementFailure",
    "Publisher",
    "SQLiteStore",
    "Store",
    "StoreUnavailable",
    "StoredClick",
    "open_store",
]


def open_store(settings: Settings) -> Store:
    """The store the settings name (not yet opened)."""
    return SQLiteStore(settings.db)
