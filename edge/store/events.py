"""Delivery events behind the store: impressions (billing-grade), hovers, failures, billing,
counters for ``edge report``, and the registered publishers.

``EventStore`` is the backend-neutral interface (part of ``Store``); ``SQLiteEventStore``
implements it on the SQLite backend's ``read``/``write`` primitives. Its tables come from
``migrations/0004_events.sql``.
"""

from __future__ import annotations

import abc


class EventStore(abc.ABC):  # noqa: B024 (methods are added by the delivery work)
    """Impressions, engagement and failure events, billing, counters and publishers."""


class SQLiteEventStore(EventStore):
    """SQLite implementation; mixed into ``SQLiteStore`` (needs its ``read``/``write``)."""
