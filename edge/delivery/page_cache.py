"""Recent page matches, so a page seen by many visitors costs the model once.

The tag asks for ads for the same page (or post) from every visitor. A match is keyed by
the catalogue served (its content hash), the publisher, the page URL, a hash of the text,
the post, the number of slots and the visitor's geo signal (geo-targeted ads differ by
place, so visitors from elsewhere get their own match), and kept for ``ttl_seconds``.
Visitors asking at the same moment share one match in flight instead of each starting
their own. Tokens are never cached: each visitor's answer gets fresh, single-use
impression tokens.

A catalogue swap clears the cache (``clear``); the version in the key also keeps out the
answer of a match that was running on the old catalogue and is stored after the swap.

A cached answer is served only while each of its ads passes the campaign gates a fresh
match applies (``servable``: the catalogue served now, the campaign active and in its
flight, the pacing gate open on what it has spent); otherwise it is dropped (``keep_only``)
and the page is matched afresh, so a campaign out of budget or past its flight's end leaves
the cache at the next visitor, not ``ttl_seconds`` later.

What is not re-checked holds until the entry expires (``ttl_seconds`` after the match): the
thread's gates (an ad disabled in the page's thread, or frequency-capped there, since the
match), and demand that became servable since (a daily cap reset at midnight, a pacing gate
reopened), which reaches a page cached without ads, or ranks into one cached with ads, only
then. An answer without ads has nothing to re-check and is served as it is; only a
catalogue swap clears it sooner.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from matcher import Matcher
from matcher.eligibility import static_gate
from matcher.pacing import Spend
from matcher.types import GeoSignal, MatchResult


def page_key(
    catalogue: str,
    publisher_id: str,
    page_url: str,
    content: str,
    post_id: str | None,
    max_ads: int,
    geo: GeoSignal | None,
) -> str:
    """The cache key: a hash of every input that changes the match."""
    digest = hashlib.blake2b(digest_size=16)
    parts = (catalogue, publisher_id, page_url, content, post_id or "", str(max_ads), repr(geo))
    for part in parts:
        raw = part.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw)
    return digest.hexdigest()


def servable(result: MatchResult, matcher: Matcher, spend: Spend, now: float) -> bool:
    """Whether every ad of ``result`` passes the campaign gates a fresh match by ``matcher``
    at ``now`` applies: each campaign is the one of the catalogue served (the same object:
    one from an earlier catalogue is refused, even with the same id), active, in its flight,
    and the pacing gate lets it serve on ``spend`` (budget, daily cap, even pacing). Not the
    thread's gates (disabled in the thread, frequency cap), nor whether a fresh match would
    now pick other ads; True for an answer without ads (see the module's note).
    Microseconds per ad, no I/O."""
    catalogue = matcher.catalogue
    for scored in result.ads:
        p = scored.placement
        campaign = p.campaign
        if (
            catalogue.campaign(campaign.id) is not campaign
            or static_gate(p, "ugc", now) is not None
            or matcher.pacer.gate(campaign, spend, now) is not None
        ):
            return False
    return True


class PageMatchCache:
    """A bounded LRU of match results with a time to live, plus the matches in flight."""

    def __init__(self, ttl_seconds: float, capacity: int, clock: Callable[[], float]) -> None:
        self.ttl = ttl_seconds
        self.capacity = capacity
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, MatchResult]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[MatchResult]] = {}
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def known(self, key: str) -> bool:
        """Cached and fresh, or being matched right now: no model time needed for it."""
        return key in self._inflight or self.get(key) is not None

    def get(self, key: str) -> MatchResult | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        stored_at, result = entry
        if self._clock() - stored_at >= self.ttl:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return result

    def keep_only(self, key: str, keep: Callable[[MatchResult], bool]) -> None:
        """Drop the cached answer for ``key`` unless ``keep`` says it still holds."""
        found = self.get(key)
        if found is not None and not keep(found):
            del self._entries[key]

    def clear(self) -> None:
        """Forget every answer (a catalogue swap); matches in flight finish as they are."""
        self._entries.clear()

    def put(self, key: str, result: MatchResult) -> None:
        if self.ttl <= 0 or self.capacity <= 0:
            return
        self._entries[key] = (self._clock(), result)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    async def get_or_match(
        self, key: str, match: Callable[[], Awaitable[MatchResult]]
    ) -> MatchResult:
        """The cached result, the one in flight for the same key, or a new match (cached
        when it succeeds; a failure is raised to every caller waiting on it, not cached)."""
        found = self.get(key)
        if found is not None:
            self.hits += 1
            return found
        pending = self._inflight.get(key)
        if pending is not None:
            self.hits += 1
            return await asyncio.shield(pending)
        self.misses += 1
        future: asyncio.Future[MatchResult] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await match()
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: no "never retrieved" warning
            raise
        except BaseException:  # cancelled: the waiters retry on their own
            future.cancel()
            raise
        else:
            self.put(key, result)
            future.set_result(result)
            return result
        finally:
            self._inflight.pop(key, None)
