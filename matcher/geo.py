"""Geo targeting (SPEC 4.2 geo rules): resolve the user's richest signal, expand it to every
containing granularity, and test an ad set's targets against it.

Precedence: lat+lon, then ZIP, then city (+state), then DMA, then state. A country alone and
a lone lat or lon are not signals. A signal that cannot be resolved (unknown ZIP, a city in
no state we know) is skipped for the next one, never an error: geo is an optional hint.

Expansion uses the offline ``zipcodes`` gazetteer (ZIP -> city, county, state, lat/lon) and
a county -> DMA table (``data/dma_counties.csv``: the markets we test; DMA membership is
licensed data, so a full table can be supplied as a file with the same columns).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from matcher.catalogue import normalise_state
from matcher.types import GeoSignal, GeoTargets

EARTH_KM = 6371.0088
# A lat/lon farther than this from every US ZIP centroid is outside the gazetteer's US: it
# can still fall inside a radius target, but has no ZIP, city, county, DMA or state.
NEAREST_ZIP_MAX_KM = 40.0


@dataclass(frozen=True, slots=True)
class Location:
    """Where the user is, at every granularity we could derive. Empty sets mean unknown."""

    signal: str  # which input decided it: latlon, zipcode, city, dma, state
    lat: float | None = None
    lon: float | None = None
    zipcodes: frozenset[str] = field(default_factory=frozenset)
    cities: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (lower name, US-XX)
    counties: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (US-XX, name)
    dmas: frozenset[str] = field(default_factory=frozenset)
    states: frozenset[str] = field(default_factory=frozenset)

    def as_dict(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "lat": self.lat,
            "lon": self.lon,
            "zipcodes": sorted(self.zipcodes),
            "cities": sorted(f"{c}, {s}" for c, s in self.cities),
            "counties": sorted(f"{n}, {s}" for s, n in self.counties),
            "dmas": sorted(self.dmas),
            "states": sorted(self.states),
        }


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_KM * math.asin(min(1.0, math.sqrt(a)))


class Gazetteer:
    """US ZIPs, cities, counties and DMAs, indexed once at load (~0.5 s, ~20 MB)."""

    def __init__(self, dma_table: Path | None = None) -> None:
        import zipcodes

        self._zip: dict[str, tuple[str, str, str, float, float]] = {}
        self._city: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        self._city_states: defaultdict[str, set[str]] = defaultdict(set)
        codes, lats, lons = [], [], []
        for z in zipcodes.list_all():
            state = f"US-{z['state']}"
            try:
                lat, lon = float(z["lat"]), float(z["long"])
            except (TypeError, ValueError):
                continue
            self._zip[z["zip_code"]] = (z["city"], state, z["county"], lat, lon)
            self._city[(z["city"].lower(), state)].append(z["zip_code"])
            self._city_states[z["city"].lower()].add(state)
            codes.append(z["zip_code"])
            lats.append(lat)
            lons.append(lon)
        self._codes = codes
        self._rad = np.radians(np.array([lats, lons], dtype=np.float64)).T.copy()
        # 1-degree cells: a cell is wider than NEAREST_ZIP_MAX_KM south of ~64 N, so the
        # nearest ZIP within reach is in the point's cell or one of its 8 neighbours (far
        # northern Alaska may miss a ZIP 36-40 km away; the point then stays a bare lat/lon).
        cells: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
        for i, (lat, lon) in enumerate(zip(lats, lons, strict=True)):
            cells[(math.floor(lat), math.floor(lon))].append(i)
        self._cells = {k: np.array(v, dtype=np.intp) for k, v in cells.items()}
        self.county_dma: dict[tuple[str, str], str] = {}
        self.dma_counties: defaultdict[str, set[tuple[str, str]]] = defaultdict(set)
        self._load_dmas(dma_table)

    def _load_dmas(self, path: Path | None) -> None:
        if path is None:
            text = resources.files("matcher.data").joinpath("dma_counties.csv").read_text("utf-8")
        else:
            text = Path(path).read_text("utf-8")
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        for row in csv.DictReader(io.StringIO("\n".join(lines))):
            key = (f"US-{row['state'].strip().upper()}", row["county"].strip())
            self.county_dma[key] = row["dma"].strip()
            self.dma_counties[row["dma"].strip()].add(key)

    # -- expansion --------------------------------------------------------------------------

    def _from_zips(
        self, signal: str, zips: list[str], lat: float | None = None, lon: float | None = None
    ) -> Location:
        recs = [self._zip[z] for z in zips if z in self._zip]
        counties = {(state, county) for _, state, county, _, _ in recs}
        if lat is None and recs:  # an area's centroid, for radius targets
            lat = sum(r[3] for r in recs) / len(recs)
            lon = sum(r[4] for r in recs) / len(recs)
        return Location(
            signal=signal,
            lat=lat,
            lon=lon,
            zipcodes=frozenset(zips),
            cities=frozenset((city.lower(), state) for city, state, *_ in recs),
            counties=frozenset(counties),
            dmas=frozenset(self.county_dma[c] for c in counties if c in self.county_dma),
            states=frozenset(state for _, state, *_ in recs),
        )

    def nearest_zip(self, lat: float, lon: float) -> tuple[str, float] | None:
        """The nearest ZIP centroid and its distance, if one is within NEAREST_ZIP_MAX_KM."""
        cy, cx = math.floor(lat), math.floor(lon)
        near = [
            self._cells[key]
            for key in ((cy + dy, cx + dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1))
            if key in self._cells
        ]
        if not near:
            return None
        rows = np.concatenate(near)
        p = np.radians([lat, lon])
        pts = self._rad[rows]
        d = pts - p
        a = np.sin(d[:, 0] / 2) ** 2 + np.cos(p[0]) * np.cos(pts[:, 0]) * np.sin(d[:, 1] / 2) ** 2
        j = int(np.argmin(a))
        km = 2 * EARTH_KM * math.asin(min(1.0, math.sqrt(float(a[j]))))
        return (self._codes[rows[j]], km) if km <= NEAREST_ZIP_MAX_KM else None

    def resolve(self, geo: GeoSignal | None) -> Location | None:
        """The richest usable signal, expanded; None when there is no usable signal."""
        if geo is None:
            return None
        for step in (self._latlon, self._zipcode, self._cityname, self._dma, self._state):
            loc = step(geo)
            if loc is not None:
                return loc
        return None

    def _latlon(self, geo: GeoSignal) -> Location | None:
        lat, lon = geo.lat, geo.lon
        if not _is_num(lat) or not _is_num(lon) or not (-90 <= lat <= 90 and -180 <= lon <= 180):
            return None  # a lone lat or lon is not a signal
        near = self.nearest_zip(lat, lon)
        if near is None:
            return Location(signal="latlon", lat=lat, lon=lon)
        loc = self._from_zips("latlon", [near[0]], lat, lon)
        return loc

    def _zipcode(self, geo: GeoSignal) -> Location | None:
        z = (geo.zipcode or "").strip()[:5]
        if z in self._zip:
            return self._from_zips("zipcode", [z])
        return None

    def _cityname(self, geo: GeoSignal) -> Location | None:
        if not geo.city or not geo.city.strip():
            return None
        name = geo.city.strip().lower()
        state = normalise_state(geo.state) if geo.state else None
        if state is None:
            states = self._city_states.get(name, set())
            if len(states) != 1:  # "Springfield" alone names no one place
                return None
            (state,) = states
        zips = self._city.get((name, state))
        return self._from_zips("city", zips) if zips else None

    def _dma(self, geo: GeoSignal) -> Location | None:
        code = (geo.dma or "").strip()
        counties = self.dma_counties.get(code)
        if not counties:
            return None
        return Location(
            signal="dma",
            counties=frozenset(counties),
            dmas=frozenset([code]),
            states=frozenset(s for s, _ in counties),
        )

    def _state(self, geo: GeoSignal) -> Location | None:
        state = normalise_state(geo.state) if geo.state else None
        return Location(signal="state", states=frozenset([state])) if state else None


def _is_num(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def has_targets(geo: GeoTargets | None) -> bool:
    """False when the ad set targets all of the US (no geo, or only ``countries: [US]``)."""
    if geo is None:
        return False
    return bool(geo.states or geo.dmas or geo.cities or geo.zipcodes or geo.radius) or (
        bool(geo.countries) and "US" not in geo.countries
    )


def targets_match(geo: GeoTargets | None, loc: Location | None) -> tuple[bool, str]:
    """(matches, why): any target containing the user matches (SPEC 4.2 rule 1)."""
    if not has_targets(geo):
        return True, "untargeted (all of the US)"
    assert geo is not None
    if loc is None:
        return False, "targeted ad set and no usable user location"
    if hit := loc.states.intersection(geo.states):
        return True, f"state {min(hit)}"
    if hit := loc.dmas.intersection(geo.dmas):
        return True, f"dma {min(hit)}"
    for c in geo.cities:
        if (c.city.lower(), c.state) in loc.cities:
            return True, f"city {c.city}, {c.state}"
    if hit := loc.zipcodes.intersection(geo.zipcodes):
        return True, f"zipcode {min(hit)}"
    if loc.lat is not None and loc.lon is not None:
        for r in geo.radius:
            km = haversine_km(loc.lat, loc.lon, r.lat, r.lon)
            if km <= r.km:
                return True, f"within {r.km:g} km of {r.lat},{r.lon} ({km:.1f} km)"
    if "US" in geo.countries and loc.states:
        return True, "country US"
    return False, f"user location ({loc.signal}) is in none of the targets"
