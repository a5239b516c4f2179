"""Build MaxMind-format databases with mmdb-writer (a development dependency).

``python -m geoip.build test [--out PATH]``
    The small deterministic City database bundled as ``geoip/test-city.mmdb`` (used by the
    tests and by ``make run``). Byte-identical on every build: the build time in the
    metadata is pinned, and networks are inserted broad before narrow in a fixed order.

``python -m geoip.build tor --from DIR --out PATH [--us-only]``
    A real country database from Debian's ``tor-geoipdb`` package (the IPFire Location
    export, CC BY-SA 4.0): ``apt-get download tor-geoipdb && dpkg-deb -x tor-geoipdb_*.deb
    DIR``, then ``--from DIR/usr/share/tor``. Takes one to two minutes and prints progress.

For production use MaxMind's GeoLite2-City or GeoIP2-City (``--geoip-db PATH``); see
geoip/README.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from geoip.reader import BUNDLED_DB

# The pinned build time of the test database (2026-01-01T00:00:00Z).
TEST_BUILD_EPOCH = 1_767_225_600


def _city(country, sub, city, postal, lat, lon, metro=None, registered=None) -> dict[str, Any]:
    loc: dict[str, Any] = {"latitude": lat, "longitude": lon}
    if metro is not None:
        loc["metro_code"] = metro
    rec: dict[str, Any] = {
        "country": {"iso_code": country},
        "registered_country": {"iso_code": registered or country},
        "subdivisions": [{"iso_code": sub}],
        "city": {"names": {"en": city}},
        "postal": {"code": postal},
        "location": loc,
    }
    return rec


def _country(country: str, registered: str | None = None) -> dict[str, Any]:
    return {
        "country": {"iso_code": country},
        "registered_country": {"iso_code": registered or country},
    }


MILTON = _city("US", "WA", "Milton", "98354", 47.2513, -122.3149, 819)
MOUNTAIN_VIEW = _city("US", "CA", "Mountain View", "94043", 37.386, -122.0838, 807)
MINNEAPOLIS = _city("US", "MN", "Minneapolis", "55455", 44.9733, -93.2323, 613)
LONDON = _city("GB", "ENG", "London", "SW1A", 51.5142, -0.0931)
BOXFORD = _city("GB", "ENG", "Boxford", "OX1", 51.75, -1.25)

# (networks, record), broad before narrow: a later insert overwrites an earlier overlap.
# Addresses the project's tests rely on are listed in geoip/README.md.
TEST_NETWORKS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("3.0.0.0/8",), _country("US")),  # US, country only (no city fields)
    (("5.0.0.0/16",), _country("DE")),
    (("24.114.0.0/16",), _country("CA", registered="US")),  # registered US, located in Canada
    (("216.160.83.56/29", "2001:480:10::/48"), MILTON),
    (("81.2.69.160/27",), LONDON),
    (("2.125.160.216/29",), BOXFORD),
    (("8.8.8.0/24", "2001:4860::/32"), MOUNTAIN_VIEW),
    (("128.101.0.0/16",), MINNEAPOLIS),
    (("2a01:4f8::/32",), _city("DE", "SN", "Falkenstein", "08223", 50.4777, 12.3649)),
    (("45.84.0.0/22",), _city("US", "NY", "New York", "10001", 40.7506, -73.9972, 501)),
    (("63.116.0.0/16",), _city("US", "TX", "Austin", "78701", 30.2711, -97.7437, 635)),
)


def _writer(database_type: str, description: str):
    from mmdb_writer import MMDBWriter

    class _PinnedWriter(MMDBWriter):
        epoch: int | None = None

        def _build_meta(self) -> dict[str, Any]:
            meta = super()._build_meta()
            if self.epoch is not None:
                meta["build_epoch"] = self.epoch
            return meta

    return _PinnedWriter(
        ip_version=6,
        ipv4_compatible=True,
        database_type=database_type,
        languages=["en"],
        description={"en": description},
    )


def build_test_db(out: Path | str = BUNDLED_DB) -> Path:
    from netaddr import IPSet

    writer = _writer("GeoLite2-City", "contextual-edge deterministic test database")
    writer.epoch = TEST_BUILD_EPOCH
    for networks, record in TEST_NETWORKS:
        writer.insert_network(IPSet(list(networks)), record)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.to_db_file(str(out))
    return out


# -- tor-geoipdb (real IP-to-country data) -----------------------------------------------------


def parse_tor_ranges(lines: Iterable[str], *, v6: bool) -> Iterator[tuple[str, str, str]]:
    """(first, last, country) from tor's ``geoip`` (integers) or ``geoip6`` (addresses) text."""
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        lo, hi, cc = line.split(",")
        if not v6:
            lo, hi = str(ipaddress.IPv4Address(int(lo))), str(ipaddress.IPv4Address(int(hi)))
        yield lo, hi, cc.strip().upper()


def build_tor_country_db(
    source: Path,
    out: Path,
    *,
    us_only: bool = False,
    progress: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
) -> dict[str, int]:
    """A GeoLite2-Country-shaped database from tor's range files; ranges per country."""
    from netaddr import IPRange, IPSet

    started = time.monotonic()
    by_country: defaultdict[str, list[IPRange]] = defaultdict(list)
    for name, v6 in (("geoip", False), ("geoip6", True)):
        path = source / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing; pass --from DIR/usr/share/tor")
        with path.open(encoding="ascii", errors="replace") as fh:
            for n, (lo, hi, cc) in enumerate(parse_tor_ranges(fh, v6=v6), 1):
                # tor uses a few codes that are not ISO countries (EU, AP, ??): not places.
                if len(cc) != 2 or not cc.isalpha() or cc in ("EU", "AP"):
                    continue
                if us_only and cc != "US":
                    continue
                by_country[cc].append(IPRange(lo, hi))
                if n % 50_000 == 0:
                    progress(f"read {n:,} {name} ranges")
    writer = _writer("GeoLite2-Country", "country database built from tor-geoipdb (IPFire)")
    total = len(by_country)
    for i, cc in enumerate(sorted(by_country), 1):
        writer.insert_network(IPSet(by_country[cc]), _country(cc))
        if i % 10 == 0 or i == total:
            progress(f"inserted {i}/{total} countries ({time.monotonic() - started:.0f} s)")
    out.parent.mkdir(parents=True, exist_ok=True)
    progress(f"writing {out}")
    writer.to_db_file(str(out))
    progress(f"done in {time.monotonic() - started:.0f} s: {out.stat().st_size:,} bytes")
    return {cc: len(ranges) for cc, ranges in by_country.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m geoip.build", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    test = sub.add_parser("test", help="the bundled deterministic test database")
    test.add_argument("--out", type=Path, default=BUNDLED_DB)
    tor = sub.add_parser("tor", help="a real country database from Debian's tor-geoipdb")
    tor.add_argument("--from", dest="source", type=Path, default=Path("/usr/share/tor"))
    tor.add_argument("--out", type=Path, required=True)
    tor.add_argument("--us-only", action="store_true", help="only US ranges (smaller, faster)")
    args = parser.parse_args(argv)
    if args.what == "test":
        print(build_test_db(args.out))
        return 0
    try:
        build_tor_country_db(args.source, args.out, us_only=args.us_only)
    except (FileNotFoundError, ValueError) as exc:
        print(f"geoip.build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
