"""The two primitives the SQLite backend's domain methods are built on, typed once.

``SQLiteStore`` implements them; the interface parts it mixes in (``SQLiteEventStore``,
``SQLiteMatcherState``) call them, and this base tells the type checker what they return.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class SQLitePrimitives(abc.ABC):
    @abc.abstractmethod
    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on the writer thread; return once it is committed."""

    @abc.abstractmethod
    def write_soon(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """``write`` without a coroutine of its own: the write is queued now and what is
        returned settles after its commit (the hottest writes await it directly)."""

    @abc.abstractmethod
    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a read-only pooled connection."""
