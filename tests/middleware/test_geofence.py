"""The production geofence through HTTP: the address matrix."""

import ipaddress

import pytest
from starlette.testclient import TestClient

from tests.conftest import assert_error_shape
from tests.delivery.helpers import ORIGIN, register

US, US6, GB, DE6, UNKNOWN = (
    "216.160.83.56",
    "2001:480:10::1",
    "81.2.69.160",
    "2a01:4f8::1",
    "1.1.1.1",
)
PROXY = "10.0.0.5"
TRUSTED = (ipaddress.ip_network("10.0.0.0/8"),)


@pytest.fixture
def edge(make_client):
    """``edge(peer, **settings)``: a client of one started app whose requests come from
    ``peer`` (the app is started once per settings; extra clients share it)."""
    apps = {}

    def at(peer: str, **settings) -> TestClient:
        key = tuple(sorted(settings.items()))
        if key not in apps:
            apps[key] = make_client(**settings).app
        return TestClient(apps[key], client=(peer, 40000), raise_server_exceptions=False)

    return at


def fenced(client: TestClient, **headers) -> bool:
    """True when the geofence refused a /dea beacon (403), False when it reached the route."""
    r = client.post("/dea/url/impression", json={}, headers=headers)
    if r.status_code == 403:
        assert_error_shape(r, 403, "geo_restricted")
        return True
    assert r.status_code == 400, r.text  # the route's own validation answered
    return False


@pytest.mark.parametrize(
    ("peer", "refused"),
    [
        (US, False),
        (US6, False),
        ("::ffff:" + US, False),
        ("8.8.8.8", False),
        (GB, True),
        ("2.125.160.216", True),
        (DE6, True),
        ("::ffff:" + GB, True),
        ("24.114.0.9", True),  # registered to a US company, located in Canada
        (UNKNOWN, True),  # not in the database: fail closed
        ("127.0.0.1", True),  # private without EDGE_ALLOW_PRIVATE_IPS
        ("192.168.1.20", True),
        ("::1", True),
        ("testclient", True),  # not an IP at all
    ],
)
def test_address_matrix(edge, peer, refused):
    assert fenced(edge(peer)) is refused


@pytest.mark.parametrize("peer", ["127.0.0.1", "10.1.2.3", "::1", "fd12::1"])
def test_private_addresses_pass_with_the_flag(edge, peer):
    assert not fenced(edge(peer, allow_private_ips=True))
    assert fenced(edge(GB, allow_private_ips=True))  # the flag opens nothing else


def test_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored(edge):
    assert fenced(edge(GB), **{"X-Forwarded-For": US})
    assert not fenced(edge(US), **{"X-Forwarded-For": GB})


@pytest.mark.parametrize(
    ("xff", "refused"),
    [
        (US, False),
        (f"{GB}, {US}", False),  # the client's own claim on the left is not believed
        (f"{US}, {GB}", True),  # rightmost untrusted hop is GB
        (f"{US}, 10.0.0.7", False),  # a second trusted proxy is skipped
        (f"[{US6}]:443", False),
        (f"{US}:5555", False),
        ("junk", True),  # a hop that is not an address: unknown, refused
        (f"{US}, junk", True),
        ("", True),  # a trusted proxy that names no client: the proxy itself, private
    ],
)
def test_trusted_proxy_chain(edge, xff, refused):
    client = edge(PROXY, trusted_proxies=TRUSTED)
    headers = {"X-Forwarded-For": xff} if xff else {}
    assert fenced(client, **headers) is refused


def test_several_forwarded_for_headers_are_one_chain(edge):
    client = edge(PROXY, trusted_proxies=TRUSTED)
    r = client.post(
        "/dea/url/impression", json={}, headers=[("X-Forwarded-For", US), ("X-Forwarded-For", GB)]
    )
    assert_error_shape(r, 403, "geo_restricted")


def test_sandbox_never_fences(edge):
    for peer in (GB, UNKNOWN, "127.0.0.1", "testclient"):
        assert not fenced(edge(peer, env="sandbox"))


@pytest.mark.parametrize(
    "path", ["/v1/ugc/health", "/v1/ai/health", "/dea/health", "/openapi.json", "/dea/tag.js"]
)
def test_health_document_and_tag_script_stay_open(edge, path):
    assert edge(GB).get(path).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/ugc/process"), ("POST", "/v1/ai/process"), ("GET", "/v1/ad-manager/campaigns"),
     ("GET", "/dea/ugc/impression"), ("GET", "/dea/ai/impressions/view"),
     ("POST", "/dea/url/keywords"), ("GET", "/no/such/path")],
)  # fmt: skip
def test_api_calls_and_beacons_are_fenced(edge, method, path):
    assert_error_shape(edge(GB).request(method, path), 403, "geo_restricted")
    assert edge(US).request(method, path).status_code != 403


def test_legacy_paths_are_fenced(edge):
    r = edge(GB, legacy_api=True).post("/ugc/process", json={})
    assert_error_shape(r, 403, "geo_restricted")


def test_refusal_is_readable_by_a_registered_page_and_preflight_is_not_fenced(make_client):
    started = make_client()
    register(started)
    client = TestClient(started.app, client=(GB, 40000), raise_server_exceptions=False)
    r = client.options(
        "/dea/url/impression",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
    )
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == ORIGIN
    refused = client.post("/dea/url/impression", json={}, headers={"Origin": ORIGIN})
    assert_error_shape(refused, 403, "geo_restricted")
    # The tag can read why (CORS grant on the refusal), and nothing caches it.
    assert refused.headers["access-control-allow-origin"] == ORIGIN
    assert refused.headers["cache-control"] == "no-store"
    assert refused.headers["x-content-type-options"] == "nosniff"


def test_decision_cache_is_a_bounded_lru_per_reader():
    from edge.clients import DecisionCache
    from geoip.fence import Verdict

    cache, geo, other = DecisionCache(2), object(), object()
    yes, no = (Verdict(True, "us", "US"), US), (Verdict(False, "not_us", "GB"), GB)
    cache.put(geo, (US, ()), yes)
    cache.put(geo, (GB, ()), no)
    assert cache.get(geo, (US, ())) == yes  # now the most recent
    cache.put(geo, (UNKNOWN, ()), no)  # evicts the least recent: GB
    assert cache.get(geo, (GB, ())) is None
    assert cache.get(geo, (US, ())) == yes and len(cache) == 2
    assert cache.get(other, (US, ())) is None and len(cache) == 0  # a new reader: forgotten
    with pytest.raises(ValueError):
        DecisionCache(0)


def test_cached_decisions_follow_the_forwarded_for_chain(edge):
    # Same peer, different X-Forwarded-For: separate cache entries, separate verdicts.
    c = edge(PROXY, trusted_proxies=TRUSTED)
    for _ in range(2):
        for hop, status in ((US, 400), (GB, 403)):  # 400: let through, then an empty body
            r = c.post("/dea/url/impression", json={}, headers={"X-Forwarded-For": hop})
            assert r.status_code == status
