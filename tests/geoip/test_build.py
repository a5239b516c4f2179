"""The bundled database is reproducible; the tor-geoipdb converter reads tor's formats."""

import ipaddress

from geoip import BUNDLED_DB, GeoReader
from geoip.build import build_test_db, build_tor_country_db, main, parse_tor_ranges


def test_bundled_test_db_is_byte_identical_to_a_fresh_build(tmp_path):
    fresh = build_test_db(tmp_path / "t.mmdb")
    assert fresh.read_bytes() == BUNDLED_DB.read_bytes(), (
        "geoip/test-city.mmdb is stale: run .venv/bin/python -m geoip.build test"
    )


def test_parse_tor_ranges_both_families():
    v4 = list(parse_tor_ranges(["# comment", "", "16777216,16777471,au"], v6=False))
    assert v4 == [("1.0.0.0", "1.0.0.255", "AU")]
    v6 = list(parse_tor_ranges(["2001:480::,2001:480:ffff:ffff:ffff:ffff:ffff:ffff,US"], v6=True))
    assert v6[0][2] == "US"


def test_tor_country_db_from_small_range_files(tmp_path):
    def n(ip):
        return int(ipaddress.IPv4Address(ip))

    (tmp_path / "geoip").write_text(
        f"{n('8.8.8.0')},{n('8.8.9.255')},US\n{n('81.2.0.0')},{n('81.2.255.255')},GB\n"
        f"{n('9.0.0.0')},{n('9.0.0.255')},EU\n"
    )
    (tmp_path / "geoip6").write_text("2001:480::,2001:480:ffff:ffff:ffff:ffff:ffff:ffff,US\n")
    messages = []
    ranges = build_tor_country_db(tmp_path, tmp_path / "c.mmdb", progress=messages.append)
    assert ranges == {"US": 2, "GB": 1}  # EU is not a country and is skipped
    assert messages and messages[-1].startswith("done")
    reader = GeoReader(tmp_path / "c.mmdb")
    assert [reader.country(ip) for ip in ("8.8.9.1", "81.2.3.4", "9.0.0.1", "2001:480::5")] == [
        "US", "GB", None, "US",
    ]  # fmt: skip
    reader.close()
    assert (
        main(["tor", "--from", str(tmp_path), "--out", str(tmp_path / "u.mmdb"), "--us-only"]) == 0
    )
    us = GeoReader(tmp_path / "u.mmdb")
    assert us.country("8.8.8.8") == "US" and us.country("81.2.3.4") is None
    us.close()


def test_tor_build_reports_missing_files(tmp_path, capsys):
    assert main(["tor", "--from", str(tmp_path), "--out", str(tmp_path / "x.mmdb")]) == 1
    assert "geoip is missing" in capsys.readouterr().err
