"""Two edge nodes on one PostgreSQL database: a beacon counts once whichever node gets it,
one key's rate limit holds across both, a revocation reaches the other node within 1 s."""

from __future__ import annotations

import asyncio
import http.client
import secrets
import subprocess
import sys
import time
import uuid

import orjson
import pytest

from edge.beacons import issue_impression_token
from edge.keys import Keyring
from edge.qa import EdgeProcess
from edge.signing import Signer
from edge.store import PostgresStore

pytestmark = pytest.mark.slow


def request(port: int, method: str, path: str, body: bytes | None = None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body, headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def impression(signer: Signer) -> bytes:
    token, _ = issue_impression_token(
        signer, surface="url", env="production", ad_id="n-ad", campaign_id="n-cmp",
        now=time.time(), cpm_usd=3.0, publisher_id="n-pub", slot_id="s",
    )  # fmt: skip
    return orjson.dumps(
        {"impression_token": token, "impression_id": str(uuid.uuid4()), "v": "multinode"}
    )


def post_impression(port: int, body: bytes):
    return request(port, "POST", "/dea/url/impression", body, {"Content-Type": "application/json"})


def issue(url: str, product: str) -> str:
    async def go() -> str:
        store = PostgresStore(url)
        await store.open()
        try:
            key, _ = await Keyring(store, time.time, 5).issue("production", product, "multinode")
            return key
        finally:
            await store.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def two_nodes(postgres):
    """Two nodes for the module (each test uses its own keys and ids)."""
    url = postgres.new_database()
    key = secrets.token_urlsafe(32)
    settings = {
        "EDGE_SIGNING_KEY": key,
        "EDGE_LOG_LEVEL": "warning",
        "EDGE_RATE_LIMIT_AD_MANAGER": "10/60s",
        "EDGE_KEY_CACHE_SECONDS": "30",  # only the announcement can make a revocation quick
    }
    with EdgeProcess(db=url, settings=settings) as a, EdgeProcess(db=url, settings=settings) as b:
        yield url, Signer(key.encode()), a, b


def test_a_beacon_replayed_on_the_other_node_counts_nothing(two_nodes):
    _url, signer, a, b = two_nodes
    bodies = [impression(signer) for _ in range(20)]
    first = [post_impression(a.port, body) for body in bodies]
    again = [post_impression(b.port, body) for body in bodies]
    assert [s for s, _, _ in first] == [200] * 20
    assert all(orjson.loads(r)["counted"] is True for _, _, r in first)
    assert [s for s, _, _ in again] == [200] * 20
    assert all(orjson.loads(r)["counted"] is False for _, _, r in again)


def test_one_keys_rate_limit_holds_across_both_nodes(two_nodes):
    url, _signer, a, b = two_nodes
    key = issue(url, "ad-manager")
    statuses = []
    for i in range(16):  # 10 per minute for the key, alternately on each node
        node = a if i % 2 == 0 else b
        status, headers, _ = request(
            node.port, "GET", "/v1/ad-manager/campaigns", headers={"X-API-Key": key}
        )
        statuses.append(status)
        if status == 429:
            assert int(headers["retry-after"]) >= 1
    assert statuses.count(200) == 10, statuses
    assert statuses.count(429) == 6, statuses


def test_a_revocation_on_one_node_is_refused_by_the_other_within_a_second(two_nodes):
    url, _signer, _a, b = two_nodes
    key = issue(url, "ad-manager")
    headers = {"X-API-Key": key}
    assert request(b.port, "GET", "/v1/ad-manager/campaigns", headers=headers)[0] == 200
    # Revoked from elsewhere: the operator's command on the same database.
    subprocess.run(
        [sys.executable, "-m", "edge", "keys", "revoke", key, "--db", url],
        check=True,
        capture_output=True,
    )
    revoked_at = time.monotonic()
    while True:
        status = request(b.port, "GET", "/v1/ad-manager/campaigns", headers=headers)[0]
        if status == 401:
            break
        assert status == 200
        assert time.monotonic() - revoked_at < 1.0, "node b still accepts the revoked key"
        time.sleep(0.15)  # stays under the key's 10 requests a minute


def test_a_new_publisher_origin_reaches_the_other_node_within_a_second(two_nodes):
    url, _signer, _a, b = two_nodes
    origin = "https://fresh.example"
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST"}

    def allowed() -> bool:
        _status, headers, _ = request(b.port, "OPTIONS", "/dea/url/impression", headers=preflight)
        return headers.get("access-control-allow-origin") == origin

    assert not allowed()
    subprocess.run(
        [sys.executable, "-m", "edge", "publishers", "add", "fresh", "--origin", origin,
         "--db", url],
        check=True,
        capture_output=True,
    )  # fmt: skip
    added_at = time.monotonic()
    while not allowed():
        # The registry's own refresh is every 3 s; only the announcement is this quick.
        assert time.monotonic() - added_at < 1.0, "node b does not know the new origin yet"
        time.sleep(0.05)


def test_a_catalogue_loaded_once_is_served_by_both_nodes(two_nodes, tmp_path):
    from tests.test_live_catalogue import bundled, with_new_campaign

    url, _signer, a, b = two_nodes
    keys = {a.port: issue(url, "ad-manager"), b.port: issue(url, "ad-manager")}

    def has_new(node) -> bool:  # a key per node: the polls stay under 10 a minute each
        status, _, body = request(
            node.port,
            "GET",
            "/v1/ad-manager/campaigns?limit=200",
            headers={"X-API-Key": keys[node.port]},
        )
        assert status == 200
        return any(c["id"] == "cmp-hot-reload" for c in orjson.loads(body)["campaigns"])

    assert not has_new(a) and not has_new(b)
    path = tmp_path / "catalogue.json"
    path.write_bytes(orjson.dumps(with_new_campaign(bundled())))
    subprocess.run(
        [sys.executable, "-m", "edge", "catalogue", "load", str(path), "--db", url],
        check=True,
        capture_output=True,
    )
    loaded_at = time.monotonic()
    while not (has_new(a) and has_new(b)):
        # Announced: each node embeds the new ads (a few) and swaps; the poll is 3 s.
        assert time.monotonic() - loaded_at < 2.5, "a node still serves the old catalogue"
        time.sleep(0.4)


def test_a_self_harm_turns_hold_reaches_the_other_node_at_once(two_nodes):
    # The partner sends the next turn to the other node the moment it has the answer.
    url, _signer, a, b = two_nodes
    key = issue(url, "ai")
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    for n in range(5):
        crisis = {
            "message_id": "m-1", "conversation_id": f"hold-{n}", "location": "US-CA",
            "prompt": "I don't want to live anymore.",
            "content": "I'm really sorry you're feeling this way. You can call or text 988.",
        }  # fmt: skip
        nxt = {
            "message_id": "m-2", "conversation_id": f"hold-{n}", "location": "US-CA",
            "prompt": "ok. what's a good cheap mattress for back pain?",
            "content": "A medium-firm foam mattress supports the lower back.",
        }  # fmt: skip
        for node, body in ((a, crisis), (b, nxt)):
            status, _, raw = request(
                node.port, "POST", "/v1/ai/process", orjson.dumps(body), headers
            )
            assert status == 200, raw
            assert orjson.loads(raw)["no_ad_reason"] == "unsafe", (n, raw)
