"""Geo targeting: resolve the user's richest signal, expand it to every
containing granularity, and test an ad set's targets against it.

Precedence: lat+lon, then ZIP, then city (+state), then DMA, then state. A country alone and
a lone lat or lon are not signals; a country other than the US leaves lat+lon the only one.
A signal that cannot be resolved (unknown ZIP, a city in no state we know) is skipped for
the next one, never an error: geo is an optional hint.

Expansion uses the offline ``zipcodes`` gazetteer (ZIP -> city, county, state, lat/lon) and
a county -> DMA table (``data/dma_counties.csv``: the markets we test; DMA membership is
licensed data, so a full table can be supplied as a file with the same columns).

The gazetteer is held as columns (numpy arrays and one list of names per kind), not as a
Python object per ZIP. The ``zipcodes`` package keeps every record it ever listed as a
Python dict for the life of the process (~140 MiB), so the columns are built in a child
process (``write_columns``) and read back from an ``.npz`` file, cached beside
the ad vectors when there is a cache folder: a serving process never imports ``zipcodes``.
"""

from __future__ import annotations

import bisect
import csv
import functools
import math
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from matcher.catalogue import normalise_state
from matcher.types import GeoSignal, GeoTargets

EARTH_KM = 6371.0088
# A lat/lon farther than this from every US ZIP centroid is outside the gazetteer's US: it
# can still fall inside a radius target, but has no ZIP, city, county, DMA or state.
NEAREST_ZIP_MAX_KM = 40.0


# The columns a county-to-DMA table must have: the ones read. Others may be there too (the
# bundled table's dma_name, for people) and are ignored.
DMA_COLUMNS = ("state", "county", "dma")


class DmaTableError(ValueError):
    """A county-to-DMA table that cannot be used; the message says why (not which file)."""


def read_dma_table(path: Path | None) -> list[tuple[str, str, str]]:
    """(state, county, dma) of every row of a county-to-DMA CSV (the bundled one when None):
    a header naming at least ``state``, ``county`` and ``dma`` (in any order; other columns,
    such as the bundled table's ``dma_name``, are ignored), then one county per row; ``#``
    lines and blank lines are skipped. A file that is not such a table is a
    ``DmaTableError``: taken as no rows, it would quietly make every DMA target match
    nobody."""
    if path is None:
        data = resources.files("matcher.data").joinpath("dma_counties.csv").read_bytes()
    else:
        data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = "\x00"
    if "\x00" in text:
        raise DmaTableError("binary, not UTF-8 text: expected a CSV file")
    want = ",".join(DMA_COLUMNS)
    lines = [
        (n, next(csv.reader([ln])))
        for n, ln in enumerate(text.splitlines(), 1)
        if ln.strip() and not ln.startswith("#")
    ]
    if not lines:
        raise DmaTableError(f"no header: expected a CSV whose header has {want}")
    header = [h.strip() for h in lines[0][1]]
    lacking = [c for c in DMA_COLUMNS if c not in header]
    if lacking:
        raise DmaTableError(f"the header lacks {', '.join(lacking)}: expected columns {want}")
    at = {c: header.index(c) for c in DMA_COLUMNS}
    rows: list[tuple[str, str, str]] = []
    for n, fields in lines[1:]:
        values = {c: (fields[i].strip() if i < len(fields) else "") for c, i in at.items()}
        empty = [c for c in DMA_COLUMNS if not values[c]]
        if empty:
            raise DmaTableError(f"line {n}: no {' or '.join(empty)}")
        if not (len(values["dma"]) == 3 and values["dma"].isdigit()):
            # A catalogue targets DMAs by their three-digit codes: another value never matches.
            raise DmaTableError(f"line {n}: dma {values['dma']!r} is not a three-digit DMA code")
        rows.append((values["state"], values["county"], values["dma"]))
    if not rows:
        raise DmaTableError(f"no rows: expected one county per line after the header {want}")
    return rows


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


class ZipCodes:
    """The ZIP of each gazetteer row as a 5-digit string, from one int32 column."""

    def __init__(self, numbers: np.ndarray) -> None:
        self.numbers = numbers

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, row: int) -> str:
        return f"{int(self.numbers[row]):05d}"


def build_columns() -> dict[str, np.ndarray]:
    """The gazetteer's columns from the ``zipcodes`` package (run in a child process)."""
    import zipcodes

    numbers, lats, lons, city, state, county = [], [], [], [], [], []
    names: dict[str, int] = {}
    for z in zipcodes.list_all():
        try:
            lat, lon = float(z["lat"]), float(z["long"])
        except (TypeError, ValueError):
            continue
        code = z["zip_code"]
        if not (len(code) == 5 and code.isascii() and code.isdigit()):
            continue
        numbers.append(int(code))
        lats.append(lat)
        lons.append(lon)
        city.append(names.setdefault(z["city"], len(names)))
        state.append(names.setdefault(f"US-{z['state']}", len(names)))
        county.append(names.setdefault(z["county"], len(names)))
    return {
        "zip": np.array(numbers, dtype=np.int32),
        "lat": np.array(lats, dtype=np.float64),
        "lon": np.array(lons, dtype=np.float64),
        "city": np.array(city, dtype=np.int32),
        "state": np.array(state, dtype=np.int32),
        "county": np.array(county, dtype=np.int32),
        "names": np.array(list(names), dtype=np.str_),
    }


def _zipcodes_version() -> str:
    try:
        return metadata.version("zipcodes")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def load_columns(cache_dir: Path | None = None) -> dict[str, np.ndarray]:
    """The columns from ``cache_dir`` (built there by a child process when missing)."""
    folder = Path(cache_dir) if cache_dir is not None else None
    if folder is not None:
        path = folder / f"gazetteer-{_zipcodes_version()}.npz"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            _build_in_child(path)
        return _read_columns(path)
    with tempfile.TemporaryDirectory(prefix="gazetteer-") as tmp:
        path = Path(tmp) / "gazetteer.npz"
        _build_in_child(path)
        return _read_columns(path)


_CHILD = "import sys; from matcher.geo import write_columns; write_columns(sys.argv[1])"


def _build_in_child(path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".gazetteer-", suffix=".npz", dir=path.parent)
    os.close(fd)
    try:
        subprocess.run(  # noqa: S603 - this interpreter, this module, a path we made
            [sys.executable, "-c", _CHILD, tmp], check=True, timeout=120
        )
        os.replace(tmp, path)  # whole or absent: a concurrent start never reads half
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _read_columns(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


class Gazetteer:
    """US ZIPs, cities, counties and DMAs as columns (~3 MiB; see the module's note)."""

    def __init__(self, dma_table: Path | None = None, cache_dir: Path | None = None) -> None:
        cols = load_columns(cache_dir)
        self._names: list[str] = cols["names"].tolist()
        self._codes = ZipCodes(cols["zip"])
        self._city_of, self._state_of, self._county_of = cols["city"], cols["state"], cols["county"]
        self._lat, self._lon = cols["lat"], cols["lon"]
        self._zip_order = np.argsort(cols["zip"], kind="stable")
        self._zip_sorted = cols["zip"][self._zip_order]
        # "lower city|US-XX" keys, sorted, with each key's rows: a city's ZIPs by bisection.
        names = self._names
        keys = [
            f"{names[c].lower()}|{names[s]}"
            for c, s in zip(self._city_of.tolist(), self._state_of.tolist(), strict=True)
        ]
        by_key = sorted(range(len(keys)), key=keys.__getitem__)
        self._city_rows = np.array(by_key, dtype=np.int32)
        self._city_keys = [keys[i] for i in by_key]
        self._rad = np.radians(np.array([self._lat, self._lon], dtype=np.float64)).T.copy()
        # 1-degree cells: a cell is wider than NEAREST_ZIP_MAX_KM south of ~64 N, so the
        # nearest ZIP within reach is in the point's cell or one of its 8 neighbours (far
        # northern Alaska may miss a ZIP 36-40 km away; the point then stays a bare lat/lon).
        cells: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
        for i, (lat, lon) in enumerate(zip(self._lat.tolist(), self._lon.tolist(), strict=True)):
            cells[(math.floor(lat), math.floor(lon))].append(i)
        self._cells = {k: np.array(v, dtype=np.intp) for k, v in cells.items()}
        self.county_dma: dict[tuple[str, str], str] = {}
        self.dma_counties: defaultdict[str, set[tuple[str, str]]] = defaultdict(set)
        self._load_dmas(dma_table)

    def _row(self, zipcode: str) -> int | None:
        if not (len(zipcode) == 5 and zipcode.isascii() and zipcode.isdigit()):
            return None
        n = int(zipcode)
        i = int(np.searchsorted(self._zip_sorted, n, side="right")) - 1  # the last, as a dict
        if i < 0 or self._zip_sorted[i] != n:
            return None
        return int(self._zip_order[i])

    def _record(self, row: int) -> tuple[str, str, str, float, float]:
        """(city, US-XX, county, lat, lon) of one row."""
        names = self._names
        return (
            names[self._city_of[row]],
            names[self._state_of[row]],
            names[self._county_of[row]],
            float(self._lat[row]),
            float(self._lon[row]),
        )

    def _city_span(self, key: str) -> list[int]:
        a = bisect.bisect_left(self._city_keys, key)
        b = bisect.bisect_right(self._city_keys, key)
        rows: list[int] = self._city_rows[a:b].tolist()
        return rows

    def _load_dmas(self, path: Path | None) -> None:
        for state, county, dma in read_dma_table(path):
            key = (f"US-{state.upper()}", county)
            self.county_dma[key] = dma
            self.dma_counties[dma].add(key)

    # -- expansion --------------------------------------------------------------------------

    def _from_zips(
        self, signal: str, zips: list[str], lat: float | None = None, lon: float | None = None
    ) -> Location:
        rows = [self._row(z) for z in zips]
        recs = [self._record(r) for r in rows if r is not None]
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
        """The richest usable signal, expanded; None when there is no usable signal. A
        country other than the US places the user outside it: its ZIP, city, DMA and state
        are not read as US ones (a ZIP of another country's postal code is no US ZIP), and
        lat+lon alone may place the user."""
        if geo is None:
            return None
        steps: tuple[Callable[[GeoSignal], Location | None], ...] = (
            self._latlon,
            self._zipcode,
            self._cityname,
            self._dma,
            self._state,
        )
        if geo.country is not None and geo.country.upper() != "US":
            steps = steps[:1]
        for step in steps:
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
        if self._row(z) is not None:
            return self._from_zips("zipcode", [z])
        return None

    def _cityname(self, geo: GeoSignal) -> Location | None:
        if not geo.city or not geo.city.strip():
            return None
        name = geo.city.strip().lower()
        state = normalise_state(geo.state) if geo.state else None
        if state is None:
            prefix = f"{name}|"
            a = bisect.bisect_left(self._city_keys, prefix)
            b = bisect.bisect_left(self._city_keys, f"{name}|\U0010ffff")
            states = {k[len(prefix) :] for k in self._city_keys[a:b]}
            if len(states) != 1:  # "Springfield" alone names no one place
                return None
            (state,) = states
        zips = [self._codes[r] for r in self._city_span(f"{name}|{state}")]
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
    """(matches, why): any target containing the user matches."""
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


def write_columns(path: str) -> None:
    """What the child process runs: the columns into an ``.npz`` file at ``path``."""
    cols = build_columns()  # numbers and strings only: it loads without pickle
    np.savez(
        path,
        zip=cols["zip"],
        lat=cols["lat"],
        lon=cols["lon"],
        city=cols["city"],
        state=cols["state"],
        county=cols["county"],
        names=cols["names"],
    )
