"""ASGI middleware of the edge, one plain class per module; ``edge.app.build_middleware``
lists the stack once."""

from edge.middleware.cors import CORSMiddleware
from edge.middleware.geofence import GeofenceMiddleware
from edge.middleware.headers import SecurityHeadersMiddleware

__all__ = ["CORSMiddleware", "GeofenceMiddleware", "SecurityHeadersMiddleware"]
