"""What an edge recorded for a page view, read over HTTP: works against any edge (the one the
kit starts, a staging or a production edge), with an Ad Manager key.

The tag makes one ``impression_id`` per rendered ad, sends it with the viewable beacon and
puts it in its ``viewable`` event, so the ids a page produced name that page view's
impressions. ``EdgeEvents.impressions(ids)`` asks ``GET /v1/ad-manager/impressions`` for
them. Standard library only: the kit needs no HTTP client package.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, Protocol

PATH = "/v1/ad-manager/impressions"
MAX_IDS = 50  # per call, as the edge accepts
MIN_INTERVAL = 0.2  # between calls: polling stays under an Ad Manager key's rate limit


class ImpressionSource(Protocol):
    """Anything that says what the edge recorded for the tag's impression ids."""

    def impressions(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """``{impression_id: record}`` for the ids the edge has recorded (others absent)."""
        ...


class EdgeEventsError(AssertionError):
    """The edge refused the read (wrong key, unknown route): the answer's error, verbatim."""


class EdgeEvents:
    """``EdgeEvents("https://edge.example.com", key).impressions([...])``."""

    def __init__(self, url: str, key: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.key = key
        self.timeout = timeout
        self._last_call = 0.0

    def __repr__(self) -> str:  # never the key
        return f"EdgeEvents({self.url!r})"

    def impressions(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), MAX_IDS):
            query = urllib.parse.urlencode(
                [("impression_id", i) for i in unique[start : start + MAX_IDS]]
            )
            body = self._get(f"{PATH}?{query}")
            for item in body["impressions"]:
                found[item["impression_id"]] = item
        return found

    def _get(self, path_and_query: str) -> dict[str, Any]:
        wait = self._last_call + MIN_INTERVAL - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._last_call = time.monotonic()
        request = urllib.request.Request(  # noqa: S310 (the edge's own http(s) URL)
            self.url + path_and_query, headers={"X-API-Key": self.key}
        )
        for _attempt in range(5):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                    data: dict[str, Any] = json.loads(answer.read())
                    return data
            except urllib.error.HTTPError as exc:
                text = exc.read().decode("utf-8", "replace")
                if exc.code in (429, 502, 503):  # the key's rate, or a passing hiccup
                    time.sleep(min(float(exc.headers.get("Retry-After") or 1), 5.0))
                    continue
                raise EdgeEventsError(f"{exc.code} from {self.url}{PATH}: {text}") from None
        raise EdgeEventsError(f"{self.url}{PATH} kept answering 429/5xx")
