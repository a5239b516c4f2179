"""The end user's location for a match: ``geo_target`` (UGC), ``location`` (AI, legacy
``meta.location``) or, failing those, the end user's IP in ``X-Forwarded-For``.

The geo fields are declared once here (``GeoTarget``, ``LOCATION``): their patterns are what
the OpenAPI document publishes and what decoding checks. Values are taken as sent, never
trimmed: " 94107" is refused like any other malformed ZIP. Malformed values are refused with
the field named (a partner wants to know its geo code is wrong); well-formed values that
carry no usable signal are ignored: a country alone, or a lat without a lon. Which of
several signals wins (lat+lon, then ZIP, city, DMA, state) and falling back to the next
when the richest is unknown to the gazetteer is the matcher's geo resolution; the edge
passes every usable signal on.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from edge.geo import usable
from edge.partner.declare import Invalid, text
from geoip import parse_ip
from matcher.types import GeoSignal

# Whole-value patterns, ASCII only ([0-9], not \d, which takes any script's digits), and
# how a refusal describes each. ``\Z`` is the end of the text (published as ``$``).
# Decoding has checked them, so the conversions below only take the parts apart.
ZIP = r"^[0-9]{5}(-[0-9]{4})?\Z"
STATE = r"^([A-Za-z]{2}-)?[A-Za-z0-9]{1,3}\Z"
COUNTRY = r"^[A-Za-z]{2}\Z"
DMA = r"^[0-9]{3}\Z"
LOCATION_PATTERN = r"^[A-Za-z]{2}(-[A-Za-z0-9]{1,3})?\Z"
ZIP_FORM = "a US ZIP code: 5 digits, or ZIP+4 (94107-1234)"
STATE_FORM = "ISO 3166-2 (US-CA) or a bare code (CA)"
COUNTRY_FORM = "a two-letter ISO 3166-1 code such as US"
DMA_FORM = "a three-digit Nielsen DMA code such as 807"
LOCATION_FORM = "an ISO 3166 country or subdivision code such as US-CA"

LOCATION = Annotated[
    str,
    text(
        6,
        pattern=LOCATION_PATTERN,
        form=LOCATION_FORM,
        description="US-CA: that state; a country alone (US) is no signal",
        examples=["US-CA"],
    ),
]


class GeoTarget(msgspec.Struct, forbid_unknown_fields=True):
    """Any one signal is enough; precedence lat+lon, zipcode, city, dma, state; a country
    alone and a lone lat or lon are ignored (then X-Forwarded-For is used); a null field is
    the same as an absent one. Values are taken as sent (not trimmed)."""

    zipcode: (
        Annotated[
            str,
            text(10, pattern=ZIP, form=ZIP_FORM),
        ]
        | None
    ) = None
    state: (
        Annotated[
            str,
            text(
                6,
                pattern=STATE,
                form=STATE_FORM,
                description="ISO 3166-2 (US-CA) or a bare code (CA), any case; its country "
                "must be geo_target.country when both are sent",
                examples=["US-CA", "CA"],
            ),
        ]
        | None
    ) = None
    city: Annotated[str, text(100, description="Paired with state to disambiguate")] | None = None
    dma: Annotated[str, text(3, pattern=DMA, form=DMA_FORM)] | None = None
    lat: Annotated[float, Meta(ge=-90, le=90)] | None = None
    lon: Annotated[float, Meta(ge=-180, le=180)] | None = None
    country: (
        Annotated[
            str,
            text(
                2,
                pattern=COUNTRY,
                form=COUNTRY_FORM,
                description="Defaults to US when omitted. Another country places the user "
                "outside the US: its zipcode, city and dma are then not read (lat+lon still is)",
            ),
        ]
        | None
    ) = None


def geo_signal(target: GeoTarget | None, path: str) -> GeoSignal | None:
    """The usable signal of a decoded ``geo_target``, or None when there is none."""
    if target is None:
        return None
    country = target.country.upper() if target.country is not None else None
    state = target.state
    if state is not None:
        prefix, _, code = state.rpartition("-")
        prefix = (prefix or country or "US").upper()
        if country is not None and prefix != country:
            raise Invalid(f"{path}.state", f"is in {prefix}, but {path}.country is {country}")
        state, country = f"{prefix}-{code.upper()}", prefix
    lat, lon = target.lat, target.lon
    if lat is None or lon is None:  # a lone lat or lon is no signal
        lat = lon = None
    return usable(
        GeoSignal(
            lat=lat,
            lon=lon,
            zipcode=target.zipcode[:5] if target.zipcode is not None else None,  # ZIP+4: ZIP
            city=target.city.strip() if target.city else None,
            state=state,
            dma=target.dma,
            country=country or "US",  # an omitted country means US
        )
    )


def location_signal(value: str | None) -> GeoSignal | None:
    """``US-CA`` -> that state; a bare country (``US``) is no signal."""
    if value is None:
        return None
    country, _, code = value.upper().partition("-")
    return usable(GeoSignal(state=f"{country}-{code}" if code else None, country=country))


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
