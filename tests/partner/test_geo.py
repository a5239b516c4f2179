"""edge.partner.geo: the partner's geo fields and the end user's forwarded address."""

import orjson
import pytest

from edge.errors import BadRequest
from edge.partner.bodies import AiProcessRequest
from edge.partner.declare import Invalid, decode
from edge.partner.geo import GeoTarget, end_user_ip, geo_signal, location_signal


def parse_geo_target(data):
    """A geo_target as the routes read it: decoded against its declaration, then converted;
    a refusal names the field inside the object."""
    target = decode(GeoTarget, orjson.dumps(data), BadRequest)
    try:
        return geo_signal(target, "")
    except Invalid as exc:
        raise BadRequest(exc.message, field=exc.path.lstrip(".")) from None


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
    signal = parse_geo_target({"zipcode": "94107-1234", "state": "ca"})
    assert signal is not None
    assert (signal.zipcode, signal.state, signal.country) == ("94107", "US-CA", "US")


def test_a_country_alone_is_no_signal():
    assert parse_geo_target({"country": "US"}) is None
    assert geo_signal(None, "geo_target") is None


def test_a_lone_lat_is_no_signal():
    assert parse_geo_target({"lat": 37.7}) is None


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
        parse_geo_target(data)
    assert err.value.field == field


def test_location_is_a_state_or_nothing():
    state = location_signal("us-ny")
    assert state is not None and state.state == "US-NY"
    assert location_signal("US") is None
    with pytest.raises(BadRequest) as err:  # refused by its declaration, before any signal
        decode(AiProcessRequest, b'{"message_id": "m", "content": "c", "location": "New York"}',
               BadRequest)  # fmt: skip
    assert err.value.field == "location"
