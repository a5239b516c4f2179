"""The geo database's answer for an address as a match signal, for /v1 and /dea alike."""

from __future__ import annotations

from geoip import GeoReader
from matcher.types import GeoSignal


def usable(signal: GeoSignal) -> GeoSignal | None:
    """The signal, or None when it holds nothing but a country (no usable signal)."""
    if any(
        v is not None for v in (signal.zipcode, signal.city, signal.state, signal.dma, signal.lat)
    ):
        return signal
    return None


def locate_ip(geo: GeoReader | None, ip: str | None) -> GeoSignal | None:
    """The geo database's answer for ``ip`` as a match signal (None when unknown)."""
    if geo is None or ip is None:
        return None
    loc = geo.locate(ip)
    if loc is None:
        return None
    return usable(
        GeoSignal(
            lat=loc.lat,
            lon=loc.lon,
            zipcode=loc.zipcode,
            city=loc.city,
            state=loc.state,
            dma=loc.dma,
            country=loc.country,
        )
    )
