"""Durable state behind one interface; SQLite by default."""

from edge.store.base import KeyRecord, Store, StoreUnavailable
from edge.store.events import Hover, Impression, PlacementFailure, Publisher
from edge.store.sqlite import SQLiteStore

__all__ = [
    "Hover",
    "Impression",
    "KeyRecord",
    "PlacementFailure",
    "Publisher",
    "SQLiteStore",
    "Store",
    "StoreUnavailable",
    "open_store",
]


def open_store(settings) -> Store:
    """The store the settings name (not yet opened)."""
    return SQLiteStore(settings.db)
