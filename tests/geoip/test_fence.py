"""The US-only decision: fail closed, private ranges only with the operator's flag."""

import pytest

from geoip import open_reader, us_only


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
