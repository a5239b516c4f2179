"""Fixtures of the partner route tests: keys (also through the CLI), a scripted matcher,
and the check that every status a test here observes is documented in /openapi.json."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from matcher.catalogue import Catalogue, load_catalogue
from matcher.types import MatchRequest, MatchResult, ScoredAd

CATALOGUE = Path(__file__).parent / "data" / "catalogue.json"


@pytest.fixture(scope="session")
def test_catalogue() -> Catalogue:
    return load_catalogue(CATALOGUE)


def documented_statuses(doc: dict[str, Any], method: str, path: str) -> set[int] | None:
    """Statuses the document gives for an operation; None when it has no such operation."""
    op = doc["paths"].get(path, {}).get(method.lower())
    return None if op is None else {int(code) for code in op["responses"]}


@pytest.fixture
def make_client(make_client) -> Callable[..., TestClient]:
    """The root ``make_client``, recording every response; at teardown each one must be
    documented (status under its path and method), or be a 404/405 of an undocumented one."""
    seen: list[tuple[TestClient, str, str, int]] = []

    def make(**overrides) -> TestClient:
        client = make_client(**overrides)

        def record(response) -> None:
            request = response.request
            seen.append((client, request.method, request.url.path, response.status_code))

        client.event_hooks["response"].append(record)
        return client

    yield make
    docs: dict[int, dict[str, Any]] = {}
    undocumented = []
    for client, method, path, status in list(seen):
        if id(client) not in docs:
            docs[id(client)] = client.get("/openapi.json").json()
        statuses = documented_statuses(docs[id(client)], method, path)
        ok = status in (404, 405) if statuses is None else status in statuses
        if not ok:
            undocumented.append(f"{method} {path} -> {status}")
    assert not undocumented, f"statuses not in /openapi.json: {sorted(set(undocumented))}"


# -- a scripted matcher ---------------------------------------------------------------------------


@dataclass
class Script:
    """A matcher that answers what the test sets (``make_client(matcher=script)``); it goes
    through the real ``edge.matching.match``, so deadlines and failures are the edge's own."""

    catalogue: Catalogue
    outcome: str = "matched"
    ad_ids: tuple[str, ...] = ("ad-dog-food",)
    retry_after: int | None = None
    reason: str = ""
    explanation: dict[str, Any] | None = None
    error: Exception | None = None
    delay: float = 0.0
    requests: list[MatchRequest] = field(default_factory=list)

    @property
    def last(self) -> MatchRequest:
        return self.requests[-1]

    def close(self) -> None:
        pass

    async def match(self, request: MatchRequest, state, now, spend=None) -> MatchResult:
        self.requests.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        if self.outcome != "matched":
            return MatchResult(
                self.outcome,  # type: ignore[arg-type]
                retry_after_seconds=self.retry_after,
                reason=self.reason,
                explanation=self.explanation,
            )
        ads = tuple(
            ScoredAd(self.catalogue.placement(a), 0.9 - i / 10, 0.9 - i / 10)
            for i, a in enumerate(self.ad_ids)
        )
        return MatchResult("matched", ads, reason="matched", explanation=self.explanation)


@pytest.fixture
def script(test_catalogue) -> Script:
    return Script(test_catalogue)


def post_json(client: TestClient, path: str, body: Any, key: str | None, **headers) -> Any:
    if key is not None:
        headers["X-API-Key"] = key
    return client.post(path, json=body, headers=headers)


def cli_key(db, env: str, product: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "edge", "keys", "issue", "--env", env, "--product", product],
        env={**os.environ, "EDGE_DB": str(db)},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()[0].strip()
