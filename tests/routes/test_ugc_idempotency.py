"""A retried UGC match (same key, post and body) within the window is answered once: the
same answer again, without a second match, request count or serve."""

from __future__ import annotations

import asyncio

import httpx2 as httpx
import pytest

from edge.partner.idempotency import REPLAY_HEADER, WINDOW_SECONDS, ReplayCache
from tests.conftest import US_CLIENT, issue_key
from tests.routes.conftest import post_json

PATH = "/v1/ugc/process"
POST = {"post_id": "p-7", "message": "my pup will not touch his kibble"}


@pytest.fixture
def prod(make_client, script):
    client = make_client(matcher=script)
    return client, issue_key(client, "ugc")


def counters(client, scope: str, scope_id: str) -> dict[str, float]:
    ctx = client.app.state.ctx
    client.portal.call(ctx.counters.flush, ctx.store)
    rows = client.portal.call(ctx.store.counts, [scope])
    return {name: amount for _s, sid, name, amount in rows if sid == scope_id}


def key_id(client, key: str) -> str:
    record = client.portal.call(client.app.state.ctx.keyring.find, key)
    assert record is not None
    return record.key_id


def test_a_retry_is_answered_once(prod, script):
    client, key = prod
    first = post_json(client, PATH, POST, key)
    again = post_json(client, PATH, POST, key)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()  # the same ads and the same impression tokens
    assert REPLAY_HEADER not in first.headers and again.headers[REPLAY_HEADER] == "true"
    assert len(script.requests) == 1  # matched once: one serve, one frequency count
    kid = key_id(client, key)
    assert counters(client, "key", kid)["requests"] == 1
    assert counters(client, "key", kid)["matches"] == 1
    assert counters(client, "ad", "ad-dog-food")["matches"] == 1


@pytest.mark.parametrize(
    "change",
    [
        {"message": "which trail shoes grip on wet rock?"},
        {"post_id": "p-8"},
        {"geo_target": {"zipcode": "94107"}},
    ],
    ids=["other-text", "other-post", "other-geo"],
)
def test_a_different_call_is_a_new_request(prod, script, change):
    client, key = prod
    post_json(client, PATH, POST, key)
    other = post_json(client, PATH, {**POST, **change}, key)
    assert other.status_code == 200 and REPLAY_HEADER not in other.headers
    assert len(script.requests) == 2


def test_another_key_is_a_new_request(prod, script):
    client, key = prod
    post_json(client, PATH, POST, key)
    other = post_json(client, PATH, POST, issue_key(client, "ugc"))
    assert REPLAY_HEADER not in other.headers and len(script.requests) == 2


def test_after_the_window_the_same_call_is_a_new_request(prod, script, clock):
    client, key = prod
    post_json(client, PATH, POST, key)
    clock.advance(WINDOW_SECONDS - 1)
    assert post_json(client, PATH, POST, key).headers.get(REPLAY_HEADER) == "true"
    clock.advance(2)
    assert REPLAY_HEADER not in post_json(client, PATH, POST, key).headers
    assert len(script.requests) == 2


def test_a_502_is_not_remembered(prod, script):
    client, key = prod
    script.error = RuntimeError("matcher down")
    failed = post_json(client, PATH, POST, key)
    assert failed.status_code == 502 and "Retry-After" in failed.headers
    script.error = None
    retry = post_json(client, PATH, POST, key)
    assert retry.status_code == 200 and REPLAY_HEADER not in retry.headers
    assert len(script.requests) == 2


def test_a_retry_during_the_first_call_waits_for_it(prod, script):
    # The partner timed out and retried while the first call was still being matched.
    client, key = prod
    script.delay = 0.3

    async def both() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=client.app, client=US_CLIENT)
        async with httpx.AsyncClient(transport=transport, base_url="http://edge") as http:
            send = [http.post(PATH, json=POST, headers={"X-API-Key": key}) for _ in range(2)]
            return list(await asyncio.gather(*send))

    first, second = client.portal.call(both)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert sorted(r.headers.get(REPLAY_HEADER, "") for r in (first, second)) == ["", "true"]
    assert len(script.requests) == 1


def test_sandbox_retries_are_answered_once(make_client, script):
    client = make_client(env="sandbox", matcher=script)
    key = issue_key(client, "ugc")
    body = {**POST, "explain": True}
    for path in ("/ugc/v1/process", "/v1/ugc/process"):
        first, again = post_json(client, path, body, key), post_json(client, path, body, key)
        assert again.json() == first.json() and again.headers.get(REPLAY_HEADER) == "true"
    assert len(script.requests) <= 1  # one match for both paths (none for a no-match post)


def test_the_memory_is_bounded() -> None:
    cache = ReplayCache(window=60, max_entries=3)

    async def fill() -> None:
        for i in range(10):
            await cache.answer(str(i), lambda: 0.0, _body(i))

    asyncio.run(fill())
    assert len(cache) == 3


def _body(i: int):
    async def compute() -> dict[str, int]:
        return {"i": i}

    return compute
