"""The end user's location for a match: ``geo_target`` (UGC), ``location`` (AI, legacy
``meta.location``) or, failing those, the end user's IP in ``X-Forwarded-For``.

Malformed values are refused with the field named (a partner wants to know its geo code is
wrong); well-formed values that carry no usable signal are ignored:
a country alone, or a lat without a lon. Which of several signals wins (lat+lon, then ZIP,
city, DMA, state) and falling back to the next when the richest is unknown to the
gazetteer is the matcher's geo resolution; the edge passes every usable signal on.
"""

from __future__ import annotations

import re

from edge.geo import usable
from edge.partner.fields import Fields
from geoip import parse_ip
from matcher.types import GeoSignal

_ZIP = re.compile(r"([0-9]{5})(?:-[0-9]{4})?")  # ASCII digits: \d takes any script's
_COUNTRY = re.compile(r"[A-Za-z]{2}")
_SUBDIVISION = re.compile(r"(?:([A-Za-z]{2})-)?([A-Za-z0-9]{1,3})")
_LOCATION = re.compile(r"([A-Za-z]{2})(?:-([A-Za-z0-9]{1,3}))?")
_DMA = re.compile(r"[0-9]{3}")
GEO_TARGET_FIELDS = ("zipcode", "state", "city", "dma", "lat", "lon", "country")


def parse_geo_target(f: Fields | None) -> GeoSignal | None:
    """The usable signal of a ``geo_target`` object, or None when there is none."""
    if f is None:
        return None
    f.only(GEO_TARGET_FIELDS)
    country = f.text("country", max_len=2)
    if country is not None:
        if not _COUNTRY.fullmatch(country):
            raise f.fail("country", "must be a two-letter ISO 3166-1 code such as US")
        country = country.upper()
    zipcode = f.text("zipcode", max_len=10)
    if zipcode is not None:
        m = _ZIP.fullmatch(zipcode.strip())
        if m is None:
            raise f.fail("zipcode", "must be a US ZIP code: 5 digits, or ZIP+4 (94107-1234)")
        zipcode = m.group(1)
    state = f.text("state", max_len=6)
    if state is not None:
        m = _SUBDIVISION.fullmatch(state.strip())
        if m is None:
            raise f.fail("state", "must be ISO 3166-2 (US-CA) or a bare code (CA)")
        prefix = (m.group(1) or country or "US").upper()
        if country is not None and prefix != country:
            raise f.fail("state", f"is in {prefix}, but geo_target.country is {country}")
        state, country = f"{prefix}-{m.group(2).upper()}", prefix
    country = country or "US"  # an omitted country means US
    dma = f.text("dma", max_len=3)
    if dma is not None and not _DMA.fullmatch(dma):
        raise f.fail("dma", "must be a three-digit Nielsen DMA code such as 807")
    city = f.text("city", max_len=100)
    lat = f.number("lat", lo=-90, hi=90)
    lon = f.number("lon", lo=-180, hi=180)
    if lat is None or lon is None:  # a lone lat or lon is no signal
        lat = lon = None
    return usable(
        GeoSignal(
            lat=lat,
            lon=lon,
            zipcode=zipcode,
            city=city.strip() if city else None,
            state=state,
            dma=dma,
            country=country,
        )
    )


def parse_location(f: Fields, key: str) -> GeoSignal | None:
    """``US-CA`` -> that state; a bare country (``US``) is no signal; else refused."""
    text = f.text(key, max_len=6)
    if text is None:
        return None
    m = _LOCATION.fullmatch(text.strip())
    if m is None:
        raise f.fail(key, "must be an ISO 3166 country or subdivision code such as US-CA")
    country = m.group(1).upper()
    state = f"{country}-{m.group(2).upper()}" if m.group(2) else None
    return usable(GeoSignal(state=state, country=country))


def end_user_ip(header: str | None) -> str | None:
    """The end user's address a partner put in ``X-Forwarded-For``, or None.

    The leftmost entry is the originating client when the partner forwards a chain. A value
    that is not an IP address is ignored (it is an optional signal, never a 400). This is
    not the geofence's client address: that is the partner's own peer.
    """
    if not header:
        return None
    ip = parse_ip(header.split(",", 1)[0])
    return None if ip is None else str(ip)
