"""Shared fixtures: settings on a temporary database, an app client, a controllable clock."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator

import pytest
from starlette.testclient import TestClient

from edge.app import create_app
from edge.context import Context
from edge.settings import Settings

US_CLIENT = ("216.160.83.56", 50000)  # US in the bundled test geo database


class FakeClock:
    """A clock tests move by hand: ``clock.advance(seconds)``."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(db=tmp_path / "edge.db", cache_dir=tmp_path / "cache")


@pytest.fixture(scope="session")
def shared_matcher(tmp_path_factory):
    """One loaded matcher (bundled sandbox catalogue) for the whole session: the model and
    the catalogue's vectors load once, not per test. Its model runs on every core: the
    vectors are bit-identical to one thread's (the int8 graph's sums do not depend on how
    the work is split), and the brand-safety figures, thousands of texts, take a third less
    time."""
    from matcher import Matcher

    m = Matcher.load(
        cache_dir=tmp_path_factory.mktemp("matcher-cache"), threads=os.cpu_count() or 1
    )
    yield m
    m.close()


@pytest.fixture
def make_client(tmp_path, clock, shared_matcher) -> Iterator[Callable[..., TestClient]]:
    """``make_client(env="sandbox", legacy_api=True, ...)``: a started app on a fresh db.

    Every app gets the session's ``shared_matcher`` unless ``matcher=`` names another."""
    clients: list[TestClient] = []

    def make(**overrides) -> TestClient:
        overrides.setdefault("db", tmp_path / "edge.db")
        overrides.setdefault("cache_dir", tmp_path / "cache")
        matcher = overrides.pop("matcher", shared_matcher)
        settings = dataclasses.replace(Settings(), **overrides)
        ctx = Context.build(settings, clock=clock, matcher=matcher)
        client = TestClient(
            create_app(settings, context=ctx), client=US_CLIENT, raise_server_exceptions=False
        )
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


# The partner scope the tests' hand-built AI beacon URLs carry (the edge's is a keyed hash of
# the key family, edge.threads.partner_scope; any signed scope is one partner's).
AI_SCOPE = "partner-0001"


def issue_key(client: TestClient, product: str, env: str | None = None) -> str:
    """Issue a key through the running app's keyring (the CLI's code path)."""
    ctx: Context = client.app.state.ctx
    key, _ = client.portal.call(ctx.keyring.issue, env or ctx.settings.env, product, "test")
    return key


def other_tail(text: str, n: int = 2) -> str:
    """``text`` with its last ``n`` characters replaced by "A"s, or by "B" and "A"s where it
    already ends in them: always a different string, so a forgery test never sends the
    genuine token (a signature ends in "AA" about one run in 256). The last character stays
    "A", which canonical base64 allows there."""
    tail = "A" * n
    return text[:-n] + (tail if text[-n:] != tail else "B" + tail[1:])


def assert_error_shape(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) <= {"code", "message", "field"} and {"code", "message"} <= set(err), err
    assert isinstance(err["code"], str) and err["code"]
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code, err
    return err


@pytest.fixture(scope="session")
def postgres():
    """One throwaway PostgreSQL 15 server for the whole session (fsync off); each test that
    needs one takes a fresh database from it (``postgres.new_database()``)."""
    from tests.pgserver import PostgresServer

    server = PostgresServer()
    yield server
    server.close()
