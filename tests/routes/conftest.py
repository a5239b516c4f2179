"""Fixtures of the partner route tests: keys (also through the CLI), a scripted matcher,
and the check that every status a test here observes is documented in /openapi.json."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from starlette.testclient import TestClient

from matcher.catalogue import Catalogue, load_catalogue
from matcher.pacing import Pacer
from matcher.types import MatchRequest, MatchResult, ScoredAd

CATALOGUE = Path(__file__).parent / "data" / "catalogue.json"


@pytest.fixture(scope="session")
def test_catalogue() -> Catalogue:
    return load_catalogue(CATALOGUE)


def operation(doc: dict[str, Any], method: str, path: str) -> dict[str, Any] | None:
    """The document's operation for a request path (templates like ``/x/{id}`` match)."""
    item = doc["paths"].get(path)
    if item is None:
        for template, candidate in doc["paths"].items():
            if "{" in template:
                pattern = re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(template))
                if re.fullmatch(pattern, path):
                    item = candidate
                    break
    return None if item is None else item.get(method.lower())


def documented_statuses(doc: dict[str, Any], method: str, path: str) -> set[int] | None:
    """Statuses the document gives for an operation; None when it has no such operation."""
    op = operation(doc, method, path)
    if op is None:
        return None
    return {int(code) for code in op["responses"] if code != "default"}


def body_schema(doc: dict[str, Any], method: str, path: str, status: int) -> dict | None:
    """The documented JSON schema of a response, resolvable on its own (with components)."""
    op = operation(doc, method, path)
    assert op is not None
    resp = op["responses"][str(status)]
    schema = resp.get("content", {}).get("application/json", {}).get("schema")
    return None if schema is None else {**schema, "components": doc["components"]}


def check_documented(doc: dict[str, Any], response) -> str | None:
    """Why ``response`` disagrees with the document, or None when it agrees."""
    method, path, status = response.request.method, response.request.url.path, response.status_code
    statuses = documented_statuses(doc, method, path)
    if statuses is None:  # not an operation of the document: only "no such route" answers
        return None if status in (404, 405) else f"{method} {path} -> {status} (no operation)"
    if status not in statuses:
        return f"{method} {path} -> {status} (status not documented)"
    schema = body_schema(doc, method, path, status)
    try:
        response.read()
    except Exception:  # the test streamed the body away (a raw download): status only
        schema = None
    if schema is not None:
        errors = [
            e.message for e in jsonschema_rs.validator_for(schema).iter_errors(response.json())
        ]
        if errors:
            return f"{method} {path} -> {status}: body does not fit its schema: {errors[:3]}"
    return None


@pytest.fixture
def make_client(make_client) -> Callable[..., TestClient]:
    """The root ``make_client``, recording every response; at teardown each one must be
    documented in that app's /openapi.json: its status under its path and method and its
    body valid against the documented schema (or a 404/405 of an undocumented operation)."""
    seen: list[tuple[TestClient, Any]] = []

    def make(**overrides) -> TestClient:
        client = make_client(**overrides)

        def record(response) -> None:
            # Read at teardown, not here: a test that streams the body reads it itself.
            seen.append((client, response))

        client.event_hooks["response"].append(record)
        return client

    yield make
    docs: dict[int, dict[str, Any]] = {}
    problems = []
    for client, response in list(seen):
        if id(client) not in docs:
            docs[id(client)] = client.get("/openapi.json").json()
        problem = check_documented(docs[id(client)], response)
        if problem:
            problems.append(problem)
    assert not problems, "responses that /openapi.json does not describe:\n" + "\n".join(
        sorted(set(problems))
    )


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
    _pacer: tuple[Catalogue, Pacer] | None = field(default=None, init=False, repr=False)

    @property
    def last(self) -> MatchRequest:
        return self.requests[-1]

    @property
    def pacer(self) -> Pacer:
        """The real matcher's pacing gates over this catalogue: the page-match cache checks
        a cached answer with them before serving it (edge.delivery.page_cache.servable).
        Built again when a test replaces ``catalogue``, as a swap builds a new matcher."""
        if self._pacer is None or self._pacer[0] is not self.catalogue:
            self._pacer = (self.catalogue, Pacer(self.catalogue.campaigns))
        return self._pacer[1]

    def close(self) -> None:
        pass

    async def match(
        self, request: MatchRequest, state, now, spend=None, *, deadline=None, lane="partner"
    ) -> MatchResult:
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
        unit = request.post_id or request.turn_id
        if ads and request.thread_id and unit:  # what it served, as the real matcher records
            await state.record_served(request.thread_id, unit, list(self.ad_ids), now)
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
