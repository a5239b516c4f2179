"""The client cache: the same answers as working each one out, bounded, and forgetting what a
new signing key or geo reader makes stale."""

from __future__ import annotations

import ipaddress

import pytest
from starlette.testclient import TestClient

from edge.client_ip import client_ip, parse_address
from edge.clients import SCOPE_KEY, USER_AGENTS, ClientCache
from edge.ivt import Client, client_binding, client_key
from edge.middleware.geofence import Geofence
from edge.signing import Signer
from geoip import parse_ip, us_only

SIGNER = Signer(b"s" * 32)
PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("2001:db8::/32"))
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/126.0.0.0 Safari/537.36"

# (peer, X-Forwarded-For values): direct and proxied, IPv4, IPv6, mapped, a port, an
# untrusted peer's hops, all-trusted hops, malformed and missing addresses.
INPUTS = [
    ("203.0.113.9", ()),
    ("203.0.113.9", ("1.2.3.4",)),  # untrusted peer: its hops are not read
    ("10.0.0.1", ("1.2.3.4",)),
    ("10.0.0.1", ("9.9.9.9, 1.2.3.4",)),
    ("10.0.0.1", ("9.9.9.9", "1.2.3.4, 10.0.0.2")),
    ("10.0.0.1", ("10.0.0.3, 10.0.0.2",)),  # every hop trusted: the leftmost
    ("10.0.0.1", ()),
    ("::ffff:10.0.0.1", ("1.2.3.4",)),
    ("2001:db8::5", ("[2001:4860::1]:8080",)),
    ("2001:db8::5", ("2001:4860:0:0:aaaa::9",)),  # the same /64 as the one above
    ("10.0.0.1", ("::ffff:8.8.8.8",)),
    ("10.0.0.1", ("8.8.8.8:1234",)),
    ("10.0.0.1", ('"8.8.8.8"',)),
    ("10.0.0.1", ("01.2.3.4",)),  # a leading zero: no address
    ("10.0.0.1", ("1.2.3.4 ",)),
    ("10.0.0.1", ("unknown",)),
    ("10.0.0.1", ("1.2.3.4, _hidden",)),
    ("testclient", ("1.2.3.4",)),
    (" 203.0.113.9", ()),
    ("fe80::1%eth0", ()),
    (None, ("1.2.3.4",)),
]


@pytest.mark.parametrize(
    "text",
    [
        "1.2.3.4",
        "0.0.0.0",
        "255.255.255.255",
        "01.2.3.4",  # leading zeros: not an address (some C parsers read octal)
        "1.2.3.04",
        "0x1.2.3.4",
        "1.2.3",
        "1.2.3.4.5",
        "1..2.3",
        "256.1.1.1",
        "1.2.3.-4",
        " 1.2.3.4",
        "1.2.3.4 ",
        "1.2.3.4\x00",
        "1.2.3.4%eth0",
        "\u0661.2.3.4",  # an Arabic-Indic digit
        "::ffff:1.2.3.4",
        "2001:db8::1",
        "",
        "\udc80",
    ],
)
def test_an_address_is_parsed_as_the_geo_reader_parses_it(text):
    assert parse_address(text) == parse_ip(text)


def cache(size: int = 64, signer: Signer | None = SIGNER) -> ClientCache:
    return ClientCache(PROXIES, signer=lambda: signer, size=size)


@pytest.mark.parametrize(("peer", "xff"), INPUTS)
def test_an_entry_holds_what_each_rule_works_out_alone(peer, xff):
    clients = cache()
    expected = client_ip(peer, xff, PROXIES)
    text = None if expected is None else str(expected)
    for _ in range(2):  # worked out, then remembered
        entry = clients.lookup(peer, xff)
        assert entry.address == expected and entry.ip == text
        assert clients.key(entry) == client_key(SIGNER, Client(text, CHROME))
        assert clients.binding(entry, CHROME) == client_binding(SIGNER, Client(text, CHROME))
        assert clients.binding(entry, "x" * 600) == client_binding(SIGNER, Client(text, "x" * 600))


def test_an_ipv6_client_is_keyed_by_its_64():
    clients = cache()
    a = clients.lookup("2001:db8::5", ("2001:4860::1",))
    b = clients.lookup("2001:db8::5", ("2001:4860::aaaa:1",))
    c = clients.lookup("2001:db8::5", ("2001:4860:0:1::1",))
    assert a is not b and clients.key(a) == clients.key(b) != clients.key(c)


@pytest.mark.parametrize("allow_private", [True, False])
@pytest.mark.parametrize(("peer", "xff"), INPUTS)
def test_the_geofence_verdict_is_the_uncached_one(peer, xff, allow_private):
    geo = Countries({"1.2.3.4": "US", "8.8.8.8": "GB", "2001:4860::1": "US"})
    fence = Geofence(
        geo=lambda: geo, trusted_proxies=PROXIES, allow_private=allow_private, clients=cache()
    )
    expected = us_only(geo, client_ip(peer, xff, PROXIES), allow_private=allow_private)
    for _ in range(2):
        refusal = fence.check(scope(peer, xff))
        assert (refusal is None) == expected.allowed


def test_a_new_geo_reader_judges_a_known_client_again():
    readers = [Countries({"1.2.3.4": "US"})]
    clients = cache()
    fence = Geofence(geo=lambda: readers[-1], trusted_proxies=PROXIES, clients=clients)
    assert fence.check(scope("10.0.0.1", ("1.2.3.4",))) is None
    readers.append(Countries({"1.2.3.4": "CA"}))  # a reload: the address moved
    refusal = fence.check(scope("10.0.0.1", ("1.2.3.4",)))
    assert refusal is not None and refusal[:2] == (403, "geo_restricted")
    assert len(clients) == 2  # the same entries (the client and its proxy), judged again


def test_the_geofence_and_the_routes_share_one_entry_per_request():
    clients = cache()
    geo = Countries({"1.2.3.4": "US"})
    fence = Geofence(geo=lambda: geo, trusted_proxies=PROXIES, clients=clients)
    request = scope("10.0.0.1", ("1.2.3.4",))
    assert fence.check(request) is None
    entry = request[SCOPE_KEY]
    assert request["state"]["client_ip"] == "1.2.3.4"
    assert clients.of_scope(request) is entry
    assert clients.of_scope(scope("10.0.0.1", ("1.2.3.4",))) is entry  # the next request
    # A state shared by two requests (a server that does not copy it) leaks no entry.
    shared: dict[str, object] = {}
    first, second = scope("10.0.0.1", ("1.2.3.4",)), scope("10.0.0.1", ("8.8.8.8",))
    first["state"] = second["state"] = shared
    assert clients.of_scope(first).ip == "1.2.3.4" and clients.of_scope(second).ip == "8.8.8.8"


def test_a_fence_refuses_a_cache_of_other_proxies():
    with pytest.raises(ValueError, match="other proxies"):
        Geofence(geo=lambda: None, trusted_proxies=(), clients=cache())


def test_the_cache_is_a_bounded_lru():
    clients = cache(size=3)
    first = clients.lookup("203.0.113.1", ())
    clients.lookup("203.0.113.2", ())
    clients.lookup("203.0.113.3", ())
    assert clients.lookup("203.0.113.1", ()) is first  # now the most recent
    clients.lookup("203.0.113.4", ())  # evicts the least recent: .2
    assert len(clients) == 3
    assert clients.lookup("203.0.113.1", ()) is first
    for i in range(100):
        clients.lookup("10.0.0.1", (f"198.51.100.{i}",))
    assert len(clients) == 3


def test_hops_an_untrusted_peer_writes_take_no_room():
    clients = cache()
    own = clients.lookup("203.0.113.1", ())
    for i in range(50):
        assert clients.lookup("203.0.113.1", (f"198.51.100.{i}",)) is own
    assert len(clients) == 1


def test_an_entry_keeps_a_bounded_number_of_user_agents():
    clients = cache()
    entry = clients.lookup("203.0.113.1", ())
    for i in range(3 * USER_AGENTS):
        agent = f"agent {i}"
        assert clients.binding(entry, agent) == client_binding(SIGNER, Client(entry.ip, agent))
        assert 1 <= len(entry.bindings) <= USER_AGENTS
    long = "y" * 5000  # kept as the part the binding covers
    clients.binding(entry, long)
    assert all(len(agent) <= 512 for agent in entry.bindings)


def test_a_new_signing_key_forgets_every_hash():
    signers = [SIGNER]
    clients = ClientCache(PROXIES, signer=lambda: signers[-1])
    entry = clients.lookup("10.0.0.1", ("1.2.3.4",))
    old = clients.key(entry), clients.binding(entry, CHROME)
    proxy_key = clients.key(clients.lookup("10.0.0.1", ()))
    signers.append(Signer(b"r" * 32))
    proxy = clients.lookup("10.0.0.1", ())
    assert clients.key(proxy) == client_key(signers[-1], Client("10.0.0.1", "")) != proxy_key
    fresh = clients.lookup("10.0.0.1", ("1.2.3.4",))
    assert fresh is not entry and len(clients) == 2  # the client and its proxy, anew
    new_client = Client("1.2.3.4", CHROME)
    assert clients.key(fresh) == client_key(signers[-1], new_client) != old[0]
    assert clients.binding(fresh, CHROME) == client_binding(signers[-1], new_client) != old[1]


def test_no_hash_before_the_signer_is_loaded():
    clients = cache(signer=None)
    entry = clients.lookup("203.0.113.1", ())
    assert entry.ip == "203.0.113.1"  # the geofence needs no key
    with pytest.raises(RuntimeError):
        clients.key(entry)


def test_hashes_hold_no_address():
    clients = cache()
    entry = clients.lookup("10.0.0.1", ("198.51.100.23",))
    for value in (clients.key(entry), clients.binding(entry, CHROME)):
        assert "198.51.100.23" not in value and "198" not in value.split(".")


def test_a_started_edge_fences_and_judges_with_its_one_cache(make_client):
    client = make_client()
    ctx = client.app.state.ctx
    before = len(ctx.clients)
    peer = TestClient(client.app, client=("216.160.83.56", 40000), raise_server_exceptions=False)
    assert peer.post("/dea/url/impression", json={}).status_code == 400  # fenced, let through
    assert len(ctx.clients) == before + 1
    assert ctx.clients.lookup("216.160.83.56", ()).fenced is not None


class Countries:
    """A geo reader's ``country`` from a table."""

    def __init__(self, table: dict[str, str]) -> None:
        self.table = table

    def country(self, ip: object) -> str | None:
        return self.table.get(str(ip))


def scope(peer: str | None, xff: tuple[str, ...]) -> dict[str, object]:
    headers = [(b"x-forwarded-for", value.encode("latin-1")) for value in xff]
    return {
        "type": "http",
        "path": "/dea/url/impression",
        "client": None if peer is None else (peer, 40000),
        "headers": headers,
    }
