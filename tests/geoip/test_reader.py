"""The geo reader over the bundled test database (contract 4's addresses)."""

import ipaddress

import pytest

from geoip import BUNDLED_DB, GeoDatabaseError, GeoReader, Location, open_reader, parse_ip


@pytest.fixture(scope="module")
def geo():
    reader = open_reader()
    yield reader
    reader.close()


MILTON = Location("US", "US-WA", "Milton", "98354", 47.2513, -122.3149, "819")


@pytest.mark.parametrize(
    ("ip", "country", "state", "city", "zipcode", "dma"),
    [
        ("216.160.83.56", "US", "US-WA", "Milton", "98354", "819"),
        ("2001:480:10::1", "US", "US-WA", "Milton", "98354", "819"),
        ("81.2.69.160", "GB", "GB-ENG", "London", "SW1A", None),
        ("2.125.160.216", "GB", "GB-ENG", "Boxford", "OX1", None),
        ("8.8.8.8", "US", "US-CA", "Mountain View", "94043", "807"),
        ("2001:4860::8888", "US", "US-CA", "Mountain View", "94043", "807"),
        ("128.101.101.101", "US", "US-MN", "Minneapolis", "55455", "613"),
        ("2a01:4f8::1", "DE", "DE-SN", "Falkenstein", "08223", None),
    ],
)
def test_locate_known_addresses(geo, ip, country, state, city, zipcode, dma):
    loc = geo.locate(ip)
    assert (loc.country, loc.state, loc.city, loc.zipcode, loc.dma) == (
        country, state, city, zipcode, dma,
    )  # fmt: skip
    assert isinstance(loc.lat, float) and isinstance(loc.lon, float)
    assert geo.country(ip) == country


def test_ipv4_mapped_ipv6_is_looked_up_as_ipv4(geo):
    assert geo.locate("::ffff:216.160.83.56") == MILTON
    assert geo.locate(ipaddress.ip_address("::ffff:8.8.8.8")).city == "Mountain View"
    assert parse_ip("::ffff:1.2.3.4") == ipaddress.IPv4Address("1.2.3.4")


def test_country_only_range_has_no_city_fields(geo):
    assert geo.locate("3.4.5.6") == Location(country="US")


def test_country_is_where_the_address_is_not_where_it_is_registered(geo):
    assert geo.country("24.114.9.9") == "CA"  # registered_country is US in the record


@pytest.mark.parametrize("ip", ["1.1.1.1", "203.0.113.9", "::1", "junk", "", None, 42, "8.8.8"])
def test_unknown_or_malformed_is_none(geo, ip):
    assert geo.locate(ip) is None and geo.country(ip) is None


def test_reads_maxmind_country_databases(tmp_path):
    from geoip.build import _country, _writer

    w = _writer("GeoLite2-Country", "t")
    from netaddr import IPSet

    w.insert_network(IPSet(["10.0.0.0/8"]), _country("US"))
    w.to_db_file(str(tmp_path / "c.mmdb"))
    reader = GeoReader(tmp_path / "c.mmdb")
    assert reader.locate("10.1.2.3") == Location(country="US")
    assert "Country" in repr(reader)


def test_bad_files_are_refused_with_the_path(tmp_path):
    with pytest.raises(GeoDatabaseError, match="no geo database"):
        GeoReader(tmp_path / "missing.mmdb")
    junk = tmp_path / "junk.mmdb"
    junk.write_bytes(b"not a database" * 10)
    with pytest.raises(GeoDatabaseError, match=r"junk\.mmdb"):
        GeoReader(junk)


def test_bundled_db_is_the_default():
    reader = open_reader(None)
    assert reader.path == BUNDLED_DB and reader.database_type == "GeoLite2-City"
    reader.close()
