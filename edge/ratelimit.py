"""Per-key request rate limits (429 past them), one GCRA limiter per product.

GCRA (the generic cell rate algorithm) is a token bucket kept as one number per key, the
"theoretical arrival time" (TAT): each request pushes it ``period / requests`` seconds on,
and a request is refused while the TAT is more than a full burst ahead of now. It needs no
timer and no refill loop, and its answer carries the exact wait (``Retry-After``).

Answers carry the IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers):
``RateLimit-Policy: "ugc";q=50;w=1`` (quota per window) and ``RateLimit: "ugc";r=49;t=1``
(remaining, seconds until the bucket is full again).
https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/

On a store whose nodes share buckets (PostgreSQL), ``RateLimits.admit`` spends the shared
bucket (one round trip: a GCRA row per key family and product), so a key's limit holds
across every node. A shared check that takes longer than ``SHARED_TIMEOUT_SECONDS`` or
fails is decided by this process's own bucket instead: a slow or unreachable database
never holds a partner request up, and while it lasts each node allows the quota alone.
On SQLite, state is in memory per process. Keys whose bucket is full again are pruned, so
memory stays bounded by the keys active within one period.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edge.errors import TooManyRequests
from edge.settings import RateLimit, Settings

if TYPE_CHECKING:
    from edge.store import Store

log = logging.getLogger("edge.ratelimit")
SHARED_TIMEOUT_SECONDS = 0.25

_PRUNE_EVERY = 1024  # decisions between sweeps of full buckets
_EPS = 1e-6  # seconds; absorbs float rounding so a full burst is exactly ``requests``


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    remaining: int  # requests that would pass right now after this one
    reset_seconds: float  # until the bucket is full again
    retry_after_seconds: float  # until the next request passes (0 when allowed)


class GcraLimiter:
    """``requests`` per ``period_seconds`` per key, with a burst of ``requests``."""

    def __init__(self, name: str, limit: RateLimit, clock: Callable[[], float]) -> None:
        self.name = name
        self.limit = limit
        self._clock = clock
        self._origin = clock()  # times are kept relative to it: small floats, exact sums
        self._interval = limit.period_seconds / limit.requests  # one request's cost
        self._tolerance = limit.period_seconds - self._interval  # how far TAT may run ahead
        # Per key, its theoretical arrival time; the keys in the order of their last allowed
        # request, so the ones whose buckets are full again are at the front.
        self._tat: OrderedDict[str, float] = OrderedDict()
        self._since_prune = 0

    def __len__(self) -> int:
        return len(self._tat)

    @property
    def interval(self) -> float:
        """Seconds one request moves the bucket's TAT."""
        return self._interval

    @property
    def tolerance(self) -> float:
        """How far ahead of now the TAT may be for a request to pass."""
        return self._tolerance

    def check(self, key: str, cost: float = 1.0) -> Decision:
        """Spend ``cost`` requests of ``key``'s bucket if it holds that many (a cost above the
        burst is taken as the whole burst: a full bucket always pays for one call)."""
        now = self._clock() - self._origin
        self._since_prune += 1
        if self._since_prune >= _PRUNE_EVERY:
            self._prune(now)
        tat = max(self._tat.get(key, now), now)
        if tat - now > self.limit.period_seconds + _EPS:
            tat = now  # the clock stepped back: never lock a key out for the size of the step
        step = self._interval * min(max(cost, 1.0), float(self.limit.requests))
        if tat + step - now > self.limit.period_seconds + _EPS:
            wait = tat + step - now - self.limit.period_seconds
            return Decision(False, 0, tat - now, wait)
        new_tat = tat + step
        self._tat[key] = new_tat
        self._tat.move_to_end(key)
        ahead = new_tat - now
        remaining = int((self.limit.period_seconds - ahead + _EPS) / self._interval)
        return Decision(True, max(remaining, 0), ahead, 0.0)

    def _prune(self, now: float) -> None:
        """Forget the keys whose buckets are full again (their TAT is past), from the front of
        the log up to the first key whose TAT is still ahead: the work is the keys forgotten,
        not every key kept. A key's TAT is at most one period after its last allowed request,
        so a full bucket behind a fuller one waits at most a period for its turn; it still
        answers as its TAT says."""
        self._since_prune = 0
        tat = self._tat
        while tat:
            key = next(iter(tat))
            if tat[key] > now:
                break
            del tat[key]

    # -- header fields -------------------------------------------------------------------------

    def headers(self, decision: Decision) -> dict[str, str]:
        window = max(1, math.ceil(self.limit.period_seconds))
        out = {
            "RateLimit-Policy": f'"{self.name}";q={self.limit.requests};w={window}',
            "RateLimit": f'"{self.name}";r={decision.remaining};'
            f"t={max(0, math.ceil(decision.reset_seconds))}",
        }
        if not decision.allowed:
            out["Retry-After"] = str(max(1, math.ceil(decision.retry_after_seconds)))
        return out

    def enforce(self, key: str) -> dict[str, str]:
        """The RateLimit headers for an allowed request; TooManyRequests (429) otherwise."""
        return self.answer(self.check(key))

    def shared_decision(self, allowed: bool, tat: float, now: float) -> Decision:
        """The decision a shared bucket's answer means (times in the clock's seconds)."""
        ahead = max(tat - now, 0.0)
        if not allowed:
            return Decision(False, 0, ahead, max(ahead - self._tolerance, 0.0))
        remaining = int((self.limit.period_seconds - ahead + _EPS) / self._interval)
        return Decision(True, max(remaining, 0), ahead, 0.0)

    def answer(self, decision: Decision) -> dict[str, str]:
        headers = self.headers(decision)
        if not decision.allowed:
            raise TooManyRequests(
                f"rate limit of {self.limit} for this key exceeded; retry after "
                f"{headers['Retry-After']} s",
                headers=headers,
            )
        return headers


class RateLimits:
    """One limiter per product, built from the settings once per process."""

    def __init__(
        self,
        limits: dict[str, RateLimit],
        clock: Callable[[], float],
        store: Store | None = None,
    ) -> None:
        self._limiters = {name: GcraLimiter(name, lim, clock) for name, lim in limits.items()}
        self._clock = clock
        self._store = store
        self._shared = store is not None  # until the store says it has no shared buckets
        self._warned_at = 0.0

    def __getitem__(self, product: str) -> GcraLimiter:
        return self._limiters[product]

    async def admit(self, product: str, key: str) -> dict[str, str]:
        """Spend one request of ``key``'s bucket for ``product``: the RateLimit headers, or
        TooManyRequests (429). Shared across nodes when the store shares buckets."""
        limiter = self._limiters[product]
        if self._shared and self._store is not None:
            now = self._clock()
            try:
                shared = await asyncio.wait_for(
                    self._store.take_rate(
                        f"{product}:{key}", now, limiter.interval, limiter.tolerance + _EPS
                    ),
                    SHARED_TIMEOUT_SECONDS,
                )
            except Exception as exc:  # slow or down: decide here, never hold the request
                self._warn(exc)
            else:
                if shared is None:
                    self._shared = False  # this backend has none: stop asking
                else:
                    return limiter.answer(limiter.shared_decision(shared[0], shared[1], now))
        return limiter.enforce(key)

    def _warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at > 10:
            self._warned_at = now
            log.warning("shared rate limits unavailable (%r); each node limits alone", exc)

    @classmethod
    def from_settings(
        cls, settings: Settings, clock: Callable[[], float], store: Store | None = None
    ) -> RateLimits:
        return cls(
            {
                "ugc": settings.rate_limit_ugc,
                "ai": settings.rate_limit_ai,
                "ad-manager": settings.rate_limit_ad_manager,
            },
            clock,
            store,
        )
