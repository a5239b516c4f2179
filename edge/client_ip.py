"""The client address: what the production geofence judges and the /dea routes locate.

It is the TCP peer, unless the peer is a proxy listed in ``EDGE_TRUSTED_PROXIES``: then it
is the rightmost ``X-Forwarded-For`` hop that is not a trusted proxy, because every hop to
the left of that one was written by the client and can be anything. A hop that is not an
IP address makes the answer unknown (refused), never "skip it": skipping would let a
client hide behind junk. The ``Forwarded`` header (RFC 7239) is not read; proxies in front
of the edge are expected to set ``X-Forwarded-For``.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from starlette.types import Scope

from edge.settings import IPNetwork
from geoip import parse_ip

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_address(text: str) -> IPAddress | None:
    """``geoip.parse_ip`` of ``text``, with a fast way for the usual plain dotted IPv4
    text: the C parser takes exactly the dotted quads ``ipaddress`` takes (four decimal
    parts up to 255, no leading zeros) and refuses everything else, which the full parse
    then reads as before."""
    try:
        return ipaddress.IPv4Address(socket.inet_pton(socket.AF_INET, text))
    except (OSError, ValueError):
        return parse_ip(text)


def _hop(text: str) -> IPAddress | None:
    text = text.strip().strip('"')
    if text.startswith("["):  # "[2001:db8::1]:443"
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # "203.0.113.7:5678"
        text = text.split(":", 1)[0]
    return parse_address(text)


def trusted(ip: IPAddress, proxies: tuple[IPNetwork, ...]) -> bool:
    """Whether ``ip`` is one of the proxies whose X-Forwarded-For hops are read."""
    version = ip.version
    return any(net.version == version and ip in net for net in proxies)


def client_ip(
    peer: str | None, forwarded_for: Iterable[str], proxies: tuple[IPNetwork, ...]
) -> IPAddress | None:
    """The client's address, or None when it cannot be known."""
    ip = parse_address(peer) if peer is not None else None
    if ip is None or not trusted(ip, proxies):
        return ip
    return forwarded_client(ip, forwarded_for, proxies)


def forwarded_client(
    proxy: IPAddress, forwarded_for: Iterable[str], proxies: tuple[IPNetwork, ...]
) -> IPAddress | None:
    """The client behind ``proxy``, a trusted proxy that is the peer: the rightmost
    X-Forwarded-For hop that is not a trusted proxy, or None when a hop is no address."""
    ip = proxy
    hops = [h for value in forwarded_for for h in value.split(",") if h.strip()]
    for text in reversed(hops):
        hop = _hop(text)
        if hop is None:
            return None
        ip = hop
        if not trusted(hop, proxies):
            return hop
    # Every hop is a trusted proxy (or there were none): the leftmost one is the client.
    return ip


def scope_inputs(scope: Scope) -> tuple[str | None, tuple[str, ...]]:
    """What ``from_scope`` decides on: the peer and every X-Forwarded-For value, in order."""
    client = scope.get("client")
    peer = client[0] if client else None
    xff = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-forwarded-for"]
    return peer, tuple(xff)


def from_scope(scope: Scope, proxies: tuple[IPNetwork, ...]) -> IPAddress | None:
    peer, xff = scope_inputs(scope)
    return client_ip(peer, xff, proxies)


def request_client_ip(scope: Scope, proxies: tuple[IPNetwork, ...]) -> str | None:
    """The client address as text: the geofence's (left in the scope's state) when it ran,
    else resolved here the same way."""
    ip: str | None = scope.get("state", {}).get("client_ip")
    if ip is None:
        found = from_scope(scope, proxies)
        ip = None if found is None else str(found)
    return ip
