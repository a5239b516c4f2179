"""Per-client and per-publisher request limits of the tag's routes (429 past them).

- The match routes (``/dea/url/keywords``, ``/dea/url/placements``): ``EDGE_DEA_CLIENT_RATE``
  per client address, checked before the body is read, and ``EDGE_DEA_PUBLISHER_RATE`` per
  publisher id. A request's model work is charged too: the characters of the texts it sends
  to the model (not those answered from the page cache) against
  ``EDGE_DEA_CLIENT_TEXT_RATE`` per client address, so that one address cannot hold the tag
  lane's few slots with pages of long texts at a few requests a minute.
- Placement-failure reports: ``EDGE_FAILURE_CLIENT_RATE`` per client address.

Clients are keyed by a keyed hash of their address (``edge.ivt.client_key``, kept in the
edge's ``edge.clients.ClientCache``), never the raw address. GCRA buckets in memory, per
process, like the partner limits.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from edge.errors import TooManyRequests
from edge.ratelimit import Decision, GcraLimiter
from edge.settings import Settings


class TagLimits:
    def __init__(self, settings: Settings, clock: Callable[[], float]) -> None:
        self.match_client = GcraLimiter("dea-client", settings.dea_client_rate, clock)
        self.match_publisher = GcraLimiter("dea-publisher", settings.dea_publisher_rate, clock)
        self.match_text = GcraLimiter("dea-client-text", settings.dea_client_text_rate, clock)
        self.failure_client = GcraLimiter("failure-client", settings.failure_client_rate, clock)

    @staticmethod
    def enforce(limiter: GcraLimiter, key: str, who: str) -> None:
        """Spend one request of ``key``; 429 with ``Retry-After`` when its bucket is empty."""
        _refuse(limiter.check(key), f"too many requests from this {who} (at most {limiter.limit})")

    def charge_text(self, client_key: str, characters: int) -> None:
        """Spend ``characters`` of text to match from the client's text bucket (429 when it
        does not hold that many; a request never needs more than a full bucket)."""
        limiter = self.match_text
        _refuse(
            limiter.check(client_key, characters),
            "too much text to match from this client address (at most "
            f"{limiter.limit.requests} characters per {limiter.limit.period_seconds:g} s)",
        )


def _refuse(decision: Decision, why: str) -> None:
    if not decision.allowed:
        wait = max(1, math.ceil(decision.retry_after_seconds))
        raise TooManyRequests(f"{why}; retry after {wait} s", headers={"Retry-After": str(wait)})
