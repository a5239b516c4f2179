"""IP geolocation for the edge: a MaxMind-format reader, the US-only decision, test database.

``open_reader(path)`` opens a City or Country database once (``ctx.geo``); ``path=None``
opens the bundled deterministic test database (``geoip/test-city.mmdb``, built by
``python -m geoip.build test``). ``us_only`` is the production geofence's decision.
"""

from geoip.fence import Verdict, is_private, us_only
from geoip.reader import BUNDLED_DB, GeoDatabaseError, GeoReader, Location, open_reader, parse_ip

__all__ = [
    "BUNDLED_DB",
    "GeoDatabaseError",
    "GeoReader",
    "Location",
    "Verdict",
    "is_private",
    "open_reader",
    "parse_ip",
    "us_only",
]
