"""Matcher state behind the store: thread-scoped disables, per-thread frequency, no-match windows.

``MatcherStateStore`` is the backend-neutral interface (part of ``Store``);
``SQLiteMatcherState`` implements it on the SQLite backend's ``read``/``write`` primitives.
Its tables come from ``migrations/0003_matcher_state.sql``.
"""

from __future__ import annotations

import abc


class MatcherStateStore(abc.ABC):  # noqa: B024 (methods are added by the matcher work)
    """Suppressions, frequency and backoff state the matcher reads and writes."""


class SQLiteMatcherState(MatcherStateStore):
    """SQLite implementation; mixed into ``SQLiteStore`` (needs its ``read``/``write``)."""
