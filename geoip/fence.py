"""The US-only decision of the production geofence.

Fail closed: an address the database does not place, or that is not an address at all, is
refused like a non-US one. Loopback and private ranges pass only when the operator allows
them (``EDGE_ALLOW_PRIVATE_IPS``: demo and tests on one machine); they are never in a geo
database, so without the flag they are refused as unknown.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal, Protocol

from geoip.reader import parse_ip

ALLOWED_COUNTRY = "US"
Reason = Literal["us", "private", "not_us", "unknown", "not_an_ip"]


class CountryLookup(Protocol):
    def country(self, ip: object) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: Reason
    country: str | None = None


# The first octets of every IPv4 block that is loopback, link-local, carrier-grade NAT or
# private as ``ipaddress`` lists it (RFC 1918, "this network", documentation, benchmarking,
# reserved and broadcast blocks). An address under any other first octet is none of them,
# which ``is_private`` then answers without walking ``ipaddress``'s lists (~3 us, paid by
# each new client's geofence verdict).
_SPECIAL_V4_FIRST_OCTETS = frozenset((0, 10, 100, 127, 169, 172, 192, 198, 203, *range(240, 256)))


def is_private(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, RFC 1918 / ULA, link-local and carrier-grade NAT: never a located client."""
    if ip.version == 4 and int(ip) >> 24 not in _SPECIAL_V4_FIRST_OCTETS:
        return False
    if ip.is_loopback or ip.is_private or ip.is_link_local:
        return True
    return isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT


_CGNAT = ipaddress.ip_network("100.64.0.0/10")


# The verdicts that name no other country, made once (a verdict is frozen).
_NOT_AN_IP = Verdict(False, "not_an_ip")
_PRIVATE = Verdict(True, "private")
_UNKNOWN = Verdict(False, "unknown")
_US = Verdict(True, "us", ALLOWED_COUNTRY)


def us_only(geo: CountryLookup, client: object, *, allow_private: bool) -> Verdict:
    ip = parse_ip(client)
    if ip is None:
        return _NOT_AN_IP
    if is_private(ip):
        return _PRIVATE if allow_private else _UNKNOWN
    country = geo.country(ip)
    if country is None:
        return _UNKNOWN
    if country == ALLOWED_COUNTRY:
        return _US
    return Verdict(False, "not_us", country)
