"""Which address the geofence judges: peer, or the rightmost untrusted X-Forwarded-For hop."""

import ipaddress

import pytest

from edge.client_ip import client_ip

NETS = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("2001:db8::/32"))


@pytest.mark.parametrize(
    ("peer", "xff", "expected"),
    [
        ("203.0.113.9", ["1.2.3.4"], "203.0.113.9"),  # untrusted peer: XFF ignored
        ("10.0.0.1", ["1.2.3.4"], "1.2.3.4"),
        ("10.0.0.1", ["9.9.9.9, 1.2.3.4"], "1.2.3.4"),
        ("10.0.0.1", ["1.2.3.4, 10.0.0.2"], "1.2.3.4"),
        ("10.0.0.1", ["9.9.9.9", "1.2.3.4, 10.0.0.2"], "1.2.3.4"),
        ("10.0.0.1", ["10.0.0.3, 10.0.0.2"], "10.0.0.3"),  # all trusted: the leftmost
        ("10.0.0.1", [], "10.0.0.1"),
        ("::ffff:10.0.0.1", ["1.2.3.4"], "1.2.3.4"),  # a mapped peer is still the proxy
        ("2001:db8::5", ["[2001:4860::1]:8080"], "2001:4860::1"),
        ("10.0.0.1", ["::ffff:8.8.8.8"], "8.8.8.8"),
        ("10.0.0.1", ["8.8.8.8:1234"], "8.8.8.8"),
        ("10.0.0.1", ['"8.8.8.8"'], "8.8.8.8"),
        ("10.0.0.1", ["unknown"], None),
        ("10.0.0.1", ["1.2.3.4, _hidden"], None),
        ("testclient", ["1.2.3.4"], None),
        (None, [], None),
    ],
)
def test_client_ip(peer, xff, expected):
    got = client_ip(peer, xff, NETS)
    assert (None if got is None else str(got)) == expected


def test_no_trusted_proxies_means_the_peer():
    assert str(client_ip("10.0.0.1", ["8.8.8.8"], ())) == "10.0.0.1"
