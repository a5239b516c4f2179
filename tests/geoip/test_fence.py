"""The US-only decision: fail closed, private ranges only with the operator's flag."""

import ipaddress
import random

import pytest

from geoip import open_reader, us_only
from geoip.fence import _SPECIAL_V4_FIRST_OCTETS, is_private


@pytest.fixture(scope="module")
def geo():
    reader = open_reader()
    yield reader
    reader.close()


@pytest.mark.parametrize(
    ("ip", "allowed", "reason"),
    [
        ("216.160.83.56", True, "us"),
        ("2001:480:10::1", True, "us"),
        ("::ffff:8.8.8.8", True, "us"),
        ("3.3.3.3", True, "us"),  # country-only record
        ("81.2.69.160", False, "not_us"),
        ("2a01:4f8::1", False, "not_us"),
        ("24.114.0.1", False, "not_us"),  # registered US, located in Canada
        ("1.1.1.1", False, "unknown"),
        ("127.0.0.1", False, "unknown"),
        ("10.1.2.3", False, "unknown"),
        ("::1", False, "unknown"),
        ("testclient", False, "not_an_ip"),
        (None, False, "not_an_ip"),
    ],
)
def test_us_only_without_private(geo, ip, allowed, reason):
    verdict = us_only(geo, ip, allow_private=False)
    assert (verdict.allowed, verdict.reason) == (allowed, reason)


@pytest.mark.parametrize("ip", ["127.0.0.1", "10.0.0.7", "192.168.1.1", "172.16.0.1", "::1",
                                "fd00::1", "100.64.0.1", "::ffff:127.0.0.1"])  # fmt: skip
def test_private_ranges_pass_only_with_the_flag(geo, ip):
    assert us_only(geo, ip, allow_private=True).allowed
    assert not us_only(geo, ip, allow_private=False).allowed


def test_flag_does_not_open_non_us_addresses(geo):
    assert not us_only(geo, "81.2.69.160", allow_private=True).allowed


def _private_as_ipaddress_says(ip):
    """What ``is_private`` answers, worked out by ``ipaddress`` alone."""
    cgnat = ipaddress.ip_network("100.64.0.0/10")
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip in cgnat


def test_is_private_answers_as_ipaddress_under_every_first_octet():
    # Each /8's edges, the edges of its halves and quarters, and random addresses: the
    # first octets the check skips hold no loopback, private, link-local or CGNAT address.
    rng = random.Random(7)
    for first in range(256):
        base = first << 24
        offsets = [0, 1, 0x3FFFFF, 0x400000, 0x7FFFFF, 0x800000, 0xBFFFFF, 0xFFFFFE, 0xFFFFFF]
        offsets += [rng.randrange(1 << 24) for _ in range(64)]
        for offset in offsets:
            ip = ipaddress.IPv4Address(base + offset)
            assert is_private(ip) == _private_as_ipaddress_says(ip), ip


def test_every_block_ipaddress_calls_private_is_under_a_first_octet_the_check_reads():
    constants = getattr(ipaddress.IPv4Address, "_constants", None)
    networks = getattr(constants, "_private_networks", None)
    if networks is None:
        pytest.skip("this Python's ipaddress keeps its private blocks elsewhere")
    others = ("127.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10")  # loopback, link-local, CGNAT
    for net in [*networks, *map(ipaddress.ip_network, others)]:
        first, last = int(net.network_address) >> 24, int(net.broadcast_address) >> 24
        for octet in range(first, last + 1):
            assert octet in _SPECIAL_V4_FIRST_OCTETS, net
