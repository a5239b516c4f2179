"""Geo resolution: precedence, expansion to containing granularities, targets."""

from __future__ import annotations

import pytest

from matcher.geo import DmaTableError, Gazetteer, has_targets, read_dma_table, targets_match
from matcher.types import CityTarget, GeoSignal, GeoTargets, RadiusTarget


@pytest.fixture(scope="module")
def gaz(shared_matcher) -> Gazetteer:
    return shared_matcher.gazetteer


def test_zip_expands_to_city_county_dma_state(gaz):
    loc = gaz.resolve(GeoSignal(zipcode="94107"))
    assert loc.signal == "zipcode"
    assert ("san francisco", "US-CA") in loc.cities
    assert ("US-CA", "San Francisco County") in loc.counties
    assert loc.dmas == {"807"} and loc.states == {"US-CA"}


def test_precedence_latlon_zip_city_dma_state(gaz):
    full = GeoSignal(lat=30.27, lon=-97.74, zipcode="94107", city="Chicago", state="IL", dma="501")
    assert gaz.resolve(full).signal == "latlon"
    assert gaz.resolve(GeoSignal(zipcode="94107", city="Chicago", state="IL")).signal == "zipcode"
    assert gaz.resolve(GeoSignal(city="Chicago", state="IL", dma="501")).signal == "city"
    assert gaz.resolve(GeoSignal(dma="501", state="TX")).signal == "dma"
    assert gaz.resolve(GeoSignal(state="US-TX")).states == {"US-TX"}


@pytest.mark.parametrize(
    "signal",
    [
        GeoSignal(country="US"),
        GeoSignal(lat=37.7),
        GeoSignal(lon=-122.4),
        GeoSignal(zipcode="00000"),
        GeoSignal(state="ZZ"),
        GeoSignal(city="Springfield"),  # in many states: names no one place
        GeoSignal(dma="999"),
        GeoSignal(lat=float("nan"), lon=1.0),
        GeoSignal(lat=200.0, lon=1.0),
    ],
)
def test_unusable_signals_resolve_to_nothing(gaz, signal):
    assert gaz.resolve(signal) is None


@pytest.mark.parametrize("country", ["GB", "ca"])
def test_another_country_places_the_user_outside_the_us(gaz, country):
    # A British postcode area or a Canadian city is no US ZIP or city: the US signals are
    # not read, and a point still places the user.
    for signal in (
        GeoSignal(country=country, zipcode="94107"),
        GeoSignal(country=country, city="Seattle"),
        GeoSignal(country=country, dma="807", state="US-CA"),
    ):
        assert gaz.resolve(signal) is None, signal
    loc = gaz.resolve(GeoSignal(country=country, zipcode="94107", lat=51.5, lon=-0.12))
    assert loc is not None and loc.signal == "latlon" and not loc.states
    assert gaz.resolve(GeoSignal(country="US", zipcode="94107")).signal == "zipcode"


def test_city_alone_when_unambiguous(gaz):
    loc = gaz.resolve(GeoSignal(city="Seattle"))
    assert loc is not None and loc.states == {"US-WA"} and "819" in loc.dmas


def test_latlon_outside_the_us_keeps_only_the_point(gaz):
    loc = gaz.resolve(GeoSignal(lat=51.5, lon=-0.12))
    assert loc.signal == "latlon" and not loc.states and loc.lat == 51.5


def test_dma_expands_to_its_states(gaz):
    assert gaz.resolve(GeoSignal(dma="501")).states == {"US-NY", "US-NJ", "US-CT"}


def test_targets():
    loc_targets = GeoTargets(cities=(CityTarget("Austin", "US-TX"),))
    assert not has_targets(None) and not has_targets(GeoTargets(countries=("US",)))
    assert has_targets(loc_targets)
    assert targets_match(None, None) == (True, "untargeted (all of the US)")
    assert targets_match(loc_targets, None)[0] is False


def test_radius_and_city_targets_against_resolved_locations(gaz):
    loc = gaz.resolve(GeoSignal(city="Austin", state="TX"))
    assert targets_match(GeoTargets(cities=(CityTarget("austin", "US-TX"),)), loc)[0]
    assert targets_match(GeoTargets(dmas=("635",)), loc)[0]
    assert not targets_match(GeoTargets(states=("US-CA",)), loc)[0]
    near = GeoTargets(radius=(RadiusTarget(30.27, -97.74, 30.0),))
    far = GeoTargets(radius=(RadiusTarget(37.77, -122.42, 30.0),))
    assert targets_match(near, loc)[0] and not targets_match(far, loc)[0]
    # A state-level user is not known to be inside a city or a radius.
    state_only = gaz.resolve(GeoSignal(state="TX"))
    assert not targets_match(near, state_only)[0]


def test_dma_table_can_be_loaded_from_a_file(tmp_path):
    table = tmp_path / "dma.csv"
    table.write_text("# custom\nstate,county,dma,dma_name\nTX,Travis County,999,Test Market\n")
    gaz = Gazetteer(dma_table=table)
    assert gaz.resolve(GeoSignal(zipcode="78701")).dmas == {"999"}
    assert gaz.resolve(GeoSignal(zipcode="94107")).dmas == frozenset()


def test_a_dma_table_needs_only_the_columns_it_reads(tmp_path):
    # dma_name (in the bundled table) is never read: a state,county,dma table serves, in any
    # column order, with other columns beside it.
    table = tmp_path / "dma.csv"
    table.write_text("state,county,dma\nTX,Travis County,999\n")
    assert read_dma_table(table) == [("TX", "Travis County", "999")]
    assert Gazetteer(dma_table=table).resolve(GeoSignal(zipcode="78701")).dmas == {"999"}
    table.write_text("dma,region,county,state\n999,South,Travis County,TX\n")
    assert read_dma_table(table) == [("TX", "Travis County", "999")]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"garbage,stuff\nno,commas,here,at,all,x\n", "the header lacks state, county, dma"),
        (b"state,county,dma_name\nTX,Travis County,Test Market\n", "the header lacks dma:"),
        (b"", "no header"),
        (b"# only a comment\n\n", "no header"),
        (b"state,county,dma,dma_name\n", "no rows"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8 text"),
        (b"state,county,dma,dma_name\nTX,Travis\x00 County,999,T\n", "not UTF-8 text"),
        (b"state,county,dma,dma_name\nTX,Travis County\n", "line 2: no dma"),
        (b"state,county,dma\nCA,San Francisco,abc\n", "line 2: dma 'abc' is not a three-digit"),
    ],
    ids=[
        "no-header",
        "no-dma",
        "empty",
        "comments-only",
        "header-only",
        "binary",
        "nul",
        "short-row",
        "not-a-dma-code",
    ],
)
def test_an_unusable_dma_table_is_refused_with_the_reason(tmp_path, content, reason):
    table = tmp_path / "dma.csv"
    table.write_bytes(content)
    with pytest.raises(DmaTableError, match=reason):
        read_dma_table(table)


def test_grid_nearest_zip_agrees_with_a_full_scan(gaz):
    import math

    import numpy as np

    def full_scan(lat, lon):
        p = np.radians([lat, lon])
        d = gaz._rad - p
        a = (
            np.sin(d[:, 0] / 2) ** 2
            + np.cos(p[0]) * np.cos(gaz._rad[:, 0]) * np.sin(d[:, 1] / 2) ** 2
        )
        i = int(np.argmin(a))
        km = 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(float(a[i]))))
        return gaz._codes[i] if km <= 40 else None

    rng = np.random.default_rng(7)
    for lat, lon in zip(rng.uniform(24, 49, 300), rng.uniform(-125, -66, 300), strict=True):
        got = gaz.nearest_zip(float(lat), float(lon))
        assert (got[0] if got else None) == full_scan(lat, lon)


def test_columns_agree_with_zipcodes_and_are_built_in_a_child(tmp_path):
    import subprocess
    import sys

    import zipcodes

    gaz = Gazetteer(cache_dir=tmp_path)
    assert list(tmp_path.glob("gazetteer-*.npz"))  # cached for the next start
    for code in ("94107", "78701", "00501", "99501", "10001"):
        (want,) = zipcodes.matching(code)
        city, state, county, lat, lon = gaz._record(gaz._row(code))
        assert (city, state, county) == (want["city"], f"US-{want['state']}", want["county"])
        assert (lat, lon) == (float(want["lat"]), float(want["long"]))
    assert gaz._row("9410") is None and gaz._row("٩٤١٠٧") is None  # five ASCII digits only
    # The serving process never imports the package that keeps every record as a dict.
    probe = (
        "import sys; from matcher.geo import Gazetteer; "
        f"Gazetteer(cache_dir={str(tmp_path)!r}); print('zipcodes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
