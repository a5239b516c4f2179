"""The tag lane's share of the model, so a flood of /dea match requests cannot starve /v1.

Partner requests (/v1, the sandbox, the earlier routes) and the tag's match routes run on
separate model threads of the one matcher (its ``partner`` and ``tag`` lanes), so a /v1
request never queues behind page matches. The tag lane also takes at most
``EDGE_TAG_MATCH_SLOTS`` matches at a time (running or waiting for its thread); past that a
/dea match request that needs the model waits up to ``WAIT_SECONDS`` for a slot to free
(a reader opening several heavy pages at once), then is shed with 503 and ``Retry-After``
rather than queued for longer (one answered from the page cache needs no slot). /v1 is
never shed here: its own limits are per key.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from edge.errors import ServiceUnavailable

RETRY_AFTER_SECONDS = 1
# How long a match request waits for a free slot before it is shed, and how often it looks
# (only while the lane is full: a free lane costs one comparison).
WAIT_SECONDS = 1.0
_POLL_SECONDS = 0.05


class TagLaneFull(ServiceUnavailable):
    code = "overloaded"


class ModelAdmission:
    """Counts the tag lane's matches in flight against its slots."""

    def __init__(self, tag_slots: int) -> None:
        self.tag_slots = tag_slots
        self._tag_in_flight = 0
        self.shed = 0

    @property
    def tag_in_flight(self) -> int:
        return self._tag_in_flight

    async def wait_for_tag(self, seconds: float = WAIT_SECONDS) -> None:
        """Return once a slot is free (take it with ``tag_slot`` before the next await);
        503 when none frees within ``seconds``."""
        deadline = time.monotonic() + seconds
        while self._tag_in_flight >= self.tag_slots and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_SECONDS)
        self.check_tag()

    def check_tag(self) -> None:
        """503 now when the tag lane is full."""
        if self._tag_in_flight >= self.tag_slots:
            self.shed += 1
            raise TagLaneFull(
                "the ad server is busy matching pages; retry shortly",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )

    @contextlib.contextmanager
    def tag_slot(self) -> Iterator[None]:
        """Hold one of the tag lane's slots for one match (503 when none is free)."""
        self.check_tag()
        self._tag_in_flight += 1
        try:
            yield
        finally:
            self._tag_in_flight -= 1
