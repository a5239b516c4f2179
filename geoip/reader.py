"""The MaxMind-format reader the edge opens once at start-up (``ctx.geo``).

Lookups are in-memory (libmaxminddb's C extension over an mmap), a few microseconds each,
so the geofence calls them on the event loop without a thread hop. Any database with the
GeoIP2/GeoLite2 record shape works (MaxMind's GeoLite2/GeoIP2 City or Country, DB-IP's lite
databases, ours): a City database gives a full ``Location``, a Country one only ``country``.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import maxminddb

log = logging.getLogger("geoip")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
BUNDLED_DB = Path(__file__).with_name("test-city.mmdb")


class GeoDatabaseError(Exception):
    """The file is missing, not a MaxMind database, or of a type we cannot read."""


@dataclass(frozen=True, slots=True)
class Location:
    """Where an address is, as far as the database knows; any field may be None."""

    country: str | None = None  # ISO 3166-1 alpha-2, "US"
    state: str | None = None  # ISO 3166-2, "US-CA"
    city: str | None = None
    zipcode: str | None = None
    lat: float | None = None
    lon: float | None = None
    dma: str | None = None  # Nielsen DMA code as text, "807"


def parse_ip(value: object) -> IPAddress | None:
    """An address object, IPv4-mapped IPv6 (``::ffff:a.b.c.d``) turned into IPv4; else None."""
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        ip = value
    elif isinstance(value, str):
        try:
            # A zone id (fe80::1%eth0) never names a routable client; drop it.
            ip = ipaddress.ip_address(value.strip().split("%", 1)[0])
        except ValueError:
            return None
    else:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class GeoReader:
    """``country(ip)`` and ``locate(ip)`` over one open database file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise GeoDatabaseError(f"no geo database at {self.path}")
        try:
            # MODE_MMAP_EXT: the libmaxminddb C extension; it fails loudly if missing rather
            # than falling back to the pure-Python reader. Records are read as plain dicts
            # (the geoip2 record shape) without geoip2's model objects: ~8x faster here.
            self._db = maxminddb.open_database(str(self.path), maxminddb.MODE_MMAP_EXT)
        except (maxminddb.InvalidDatabaseError, ValueError, OSError) as exc:
            raise GeoDatabaseError(
                f"{self.path} is not a readable MaxMind database: {exc}"
            ) from exc
        meta = self._db.metadata()
        self.database_type: str = meta.database_type
        self.build_epoch: int = meta.build_epoch
        # Only GeoIP2/GeoLite2-shaped location databases carry country/city records.
        if "City" not in self.database_type and "Country" not in self.database_type:
            self._db.close()
            raise GeoDatabaseError(
                f"{self.path} is a {self.database_type!r} database; a City or Country one is needed"
            )

    def __repr__(self) -> str:
        return f"GeoReader({str(self.path)!r}, {self.database_type!r})"

    def close(self) -> None:
        self._db.close()

    def _record(self, ip: object) -> dict[str, Any] | None:
        addr = parse_ip(ip)
        if addr is None:
            return None
        try:
            rec = self._db.get(addr)
        except ValueError:  # an IPv6 address in an IPv4-only database
            return None
        return rec if isinstance(rec, dict) else None

    def country(self, ip: object) -> str | None:
        """ISO country code where the address is (``country``; never ``registered_country``,
        which names where the block is registered and differs for travellers and VPNs)."""
        rec = self._record(ip)
        return _get(rec, "country", "iso_code") if rec is not None else None

    def locate(self, ip: object) -> Location | None:
        """What the database knows of the address, or None when it does not know it."""
        rec = self._record(ip)
        if rec is None:
            return None
        country = _get(rec, "country", "iso_code")
        subs = rec.get("subdivisions")
        # The last subdivision is the most specific (ISO 3166-2 code without the country).
        sub = _get(subs[-1], "iso_code") if isinstance(subs, list) and subs else None
        metro = _get(rec, "location", "metro_code")
        loc = Location(
            country=country,
            state=f"{country}-{sub}" if country and sub else None,
            city=_get(rec, "city", "names", "en"),
            zipcode=_get(rec, "postal", "code"),
            lat=_number(_get(rec, "location", "latitude")),
            lon=_number(_get(rec, "location", "longitude")),
            dma=str(metro) if isinstance(metro, int) else None,
        )
        return None if loc == Location() else loc


def _get(rec: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(rec, dict):
            return None
        rec = rec.get(key)
    return rec


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def open_reader(path: Path | str | None = None) -> GeoReader:
    """The reader for ``path``, or for the bundled deterministic test database when None."""
    reader = GeoReader(path if path is not None else BUNDLED_DB)
    log.info("geo database %s (%s)", reader.path, reader.database_type)
    return reader
