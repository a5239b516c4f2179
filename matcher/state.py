"""Suppression and backoff state, behind a small protocol the caller supplies.

The matcher decides; the state only remembers. The edge adapts its store to ``MatchState``
(``edge/matching.py``); unit tests use ``MemoryState``. Three kinds of memory:

- thread-scoped disables ``(thread, ad)``: the ad is never shown in that thread again;
- per-thread frequency: on how many units (posts, AI turns) of a thread each ad was served
  lately (the cap); serving the same unit again (a refresh) does not count twice;
- a no-match window per post: after a miss the post is not matched again until it ends.

Backoff schedule (``next_window``): while the post is young (under ``YOUNG_POST_SECONDS``
old; a ``created_at`` in the future is age 0) or the demand changed since the last miss,
windows are minutes (5, 10, 20, capped at 30); otherwise hours, doubling with each miss
(1, 2, 4 ... capped at 24). Unsafe content starts on the hours schedule at once: news stays
news, and more demand will not make it safe.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

YOUNG_POST_SECONDS = 3600
MINUTES_BASE, MINUTES_CAP = 300, 1800
HOURS_BASE, HOURS_CAP = 3600, 86400
FREQUENCY_CAP = 3  # the same ad at most this often in one thread ...
FREQUENCY_WINDOW_SECONDS = 86400  # ... within this long


@dataclass(frozen=True, slots=True)
class Backoff:
    """The no-match window of one post."""

    misses: int  # consecutive misses so far
    until: float  # epoch seconds the window ends
    demand: str  # the demand version at the last miss ("did demand change since?")
    reason: str = "no_relevant_demand"


@dataclass(frozen=True, slots=True)
class ThreadState:
    disabled: frozenset[str] = frozenset()
    served: dict[str, int] = field(default_factory=dict)  # ad id -> units served in window
    unit_ads: frozenset[str] = frozenset()  # ads this very unit was already served
    backoff: Backoff | None = None


class MatchState(Protocol):
    """What the matcher reads before a match and writes after it (async: a store is I/O)."""

    async def load(
        self, thread_id: str | None, post_id: str | None, unit_id: str | None, now: float
    ) -> ThreadState: ...

    async def record_served(
        self, thread_id: str, unit_id: str, ad_ids: list[str], now: float
    ) -> None: ...

    async def record_miss(self, post_id: str, backoff: Backoff, now: float) -> None: ...

    async def clear_backoff(self, post_id: str) -> None: ...

    async def disable(
        self, pairs: list[tuple[str, str, dict[str, Any] | None]], now: float
    ) -> None: ...


def next_window(
    previous: Backoff | None,
    *,
    now: float,
    created_at: float | None,
    demand: str,
    reason: str,
) -> Backoff:
    """The window after one more miss of a post (the module docstring has the schedule)."""
    misses = (previous.misses if previous else 0) + 1
    # A post from the future (a partner's clock ahead of ours) is brand new: age 0.
    young = created_at is not None and max(0.0, now - created_at) < YOUNG_POST_SECONDS
    changed = previous is not None and previous.demand != demand
    if reason == "unsafe":
        seconds = min(HOURS_CAP, HOURS_BASE * 2 ** max(0, misses - 1))
    elif young or changed or misses == 1:
        # Still looking: the first miss, a new post, or fresh demand is worth a retry soon.
        seconds = min(MINUTES_CAP, MINUTES_BASE * 2 ** max(0, misses - 1))
    else:
        seconds = min(HOURS_CAP, HOURS_BASE * 2 ** max(0, misses - 2))
    return Backoff(misses=misses, until=now + seconds, demand=demand, reason=reason)


class MemoryState:
    """In-process ``MatchState`` for unit tests and the bench (nothing is persisted)."""

    def __init__(self) -> None:
        self.disabled: defaultdict[str, set[str]] = defaultdict(set)
        self.serves: defaultdict[str, dict[tuple[str, str], float]] = defaultdict(dict)
        self.backoffs: dict[str, Backoff] = {}

    async def load(
        self, thread_id: str | None, post_id: str | None, unit_id: str | None, now: float
    ) -> ThreadState:
        served: dict[str, int] = {}
        unit_ads = set()
        if thread_id is not None:
            for (ad_id, unit), at in self.serves.get(thread_id, {}).items():
                if now - at < FREQUENCY_WINDOW_SECONDS:
                    served[ad_id] = served.get(ad_id, 0) + 1
                if unit == unit_id:
                    unit_ads.add(ad_id)
        return ThreadState(
            disabled=frozenset(self.disabled.get(thread_id, ())) if thread_id else frozenset(),
            served=served,
            unit_ads=frozenset(unit_ads),
            backoff=self.backoffs.get(post_id) if post_id else None,
        )

    async def record_served(
        self, thread_id: str, unit_id: str, ad_ids: list[str], now: float
    ) -> None:
        for ad_id in ad_ids:
            self.serves[thread_id].setdefault((ad_id, unit_id), now)

    async def record_miss(self, post_id: str, backoff: Backoff, now: float) -> None:
        self.backoffs[post_id] = backoff

    async def clear_backoff(self, post_id: str) -> None:
        self.backoffs.pop(post_id, None)

    async def disable(
        self, pairs: list[tuple[str, str, dict[str, Any] | None]], now: float
    ) -> None:
        for thread_id, ad_id, _meta in pairs:
            self.disabled[thread_id].add(ad_id)
