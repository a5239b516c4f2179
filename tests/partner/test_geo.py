"""edge.partner.geo: the partner's geo fields and the end user's forwarded address."""

import pytest

from edge.errors import BadRequest
from edge.partner.fields import Fields
from edge.partner.geo import end_user_ip, parse_geo_target, parse_location


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("203.0.113.7", "203.0.113.7"),
        (" 203.0.113.7 , 10.0.0.1", "203.0.113.7"),  # the leftmost hop is the end user
        ("::ffff:203.0.113.7", "203.0.113.7"),  # IPv4-mapped: looked up as IPv4
        ("2001:db8::1", "2001:db8::1"),
        ("not-an-ip, 203.0.113.7", None),  # an optional signal: junk is ignored, not a 400
        ("", None),
        (None, None),
    ],
)
def test_end_user_ip(header, expected):
    assert end_user_ip(header) == expected


def test_geo_target_normalises_zip_and_state():
    signal = parse_geo_target(Fields({"zipcode": "94107-1234", "state": "ca"}, BadRequest))
    assert signal is not None
    assert (signal.zipcode, signal.state, signal.country) == ("94107", "US-CA", "US")


def test_a_country_alone_is_no_signal():
    assert parse_geo_target(Fields({"country": "US"}, BadRequest)) is None
    assert parse_geo_target(None) is None


def test_a_lone_lat_is_no_signal():
    assert parse_geo_target(Fields({"lat": 37.7}, BadRequest)) is None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"zipcode": "9410"}, "zipcode"),
        ({"state": "US-CA", "country": "CA"}, "state"),
        ({"dma": "80"}, "dma"),
        ({"lat": 91, "lon": 0}, "lat"),
        ({"planet": "earth"}, "planet"),
    ],
)
def test_malformed_geo_target_names_the_field(data, field):
    with pytest.raises(BadRequest) as err:
        parse_geo_target(Fields(data, BadRequest))
    assert err.value.field == field


def test_location_is_a_state_or_nothing():
    state = parse_location(Fields({"location": "us-ny"}, BadRequest), "location")
    assert state is not None and state.state == "US-NY"
    assert parse_location(Fields({"location": "US"}, BadRequest), "location") is None
    with pytest.raises(BadRequest):
        parse_location(Fields({"location": "New York"}, BadRequest), "location")
