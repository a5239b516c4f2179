"""The OpenAPI 3.1 document of every route the edge exposes, assembled from route modules.

Each route module may define ``openapi(ctx) -> {"paths": {...}, "components": {...}}``
describing only its own routes; this module merges them with the shared parts (the error
shape, the key scheme). The document is built once at start-up and served as bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edge import __version__
from edge.context import Context

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "description": "Stable machine-readable code."},
                "message": {"type": "string", "description": "Human-readable explanation."},
                "field": {"type": "string", "description": "The field or header at fault."},
            },
        }
    },
}


# What each error status means, for every route family (the one table of them).
ERRORS = {
    400: "The body, query, token or signature failed validation; `field` names the culprit; "
    "nothing is counted",
    401: "Missing, malformed, unknown, revoked, expired, wrong-product or wrong-environment key",
    403: "Refused: the caller's address is not in the US (production geofence) or, on /dea, "
    "the publisher is not registered or the request's Origin is missing or not one of its "
    "registered origins",
    409: "The key was already rotated; rotate its replacement",
    413: "Body larger than EDGE_MAX_BODY_BYTES",
    415: "Content-Type is not application/json (the /dea routes also take text/plain)",
    422: "Body or query failed validation (not UTF-8, malformed JSON, missing or invalid "
    "field, unknown query parameter); `field` names the culprit",
    429: "Rate limit exceeded: of this key (partner routes) or, on /dea, of this client "
    "address or publisher; retry after Retry-After",
    502: "Matching (or the key store) failed or missed its deadline; retry with backoff",
    503: "The store could not commit (nothing was recorded) or, on the /dea match routes, the "
    "tag lane is busy; retry after Retry-After",
}
RETRY_AFTER = {
    "Retry-After": {"schema": {"type": "integer", "minimum": 1}, "description": "Seconds to wait"}
}


# Every operation also documents "default": any other status has the error shape too, so a
# generated client parses it instead of failing on an undeclared status.
DEFAULT_ERROR = {
    "description": "Any other error status, in the one error shape",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


# The header a partner firing a beacon from its server for a user names that user's browser
# in (the IAB header for beacons fired on a user's behalf): the invalid-traffic rules judge
# it instead of the partner server's own User-Agent.
DEVICE_USER_AGENT = {
    "name": "X-Device-User-Agent",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "The end user's browser User-Agent, when a partner fires this from its "
    "server on the user's behalf: the invalid-traffic rules judge it (a crawler's is stored "
    "invalid and never billed) instead of the caller's own User-Agent",
}


def error_for(status: int) -> dict[str, Any]:
    """The response object of an error status, from ``ERRORS`` (Retry-After where sent)."""
    resp = error_response(ERRORS[status])
    if status in (429, 502, 503):
        resp["headers"] = dict(RETRY_AFTER)
    return resp


def error_response(description: str) -> dict[str, Any]:
    """A response object whose body is the one error shape."""
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def json_body(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _merge(into: dict[str, Any], part: dict[str, Any], where: str) -> None:
    for key, value in part.items():
        if key in into and isinstance(into[key], dict) and isinstance(value, dict):
            _merge(into[key], value, f"{where}/{key}")
        elif key in into and into[key] != value:
            raise ValueError(f"two route modules define {where}/{key} differently")
        else:
            into[key] = value


def build_document(ctx: Context, fragments: Iterable[dict[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": f"Contextual ad edge ({ctx.settings.env})",
            "version": __version__,
            "description": "Partner API (/v1), delivery edge (/dea) and sandbox routes. "
            "Every error body is the Error schema.",
        },
        "servers": [{"url": ctx.settings.base_url}],
        "paths": {},
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {
                "ApiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-API-Key",
                    "description": "A key of the route's product (UGC, AI or Ad Manager) and "
                    "this environment, sent as is in X-API-Key (not as a bearer token)",
                }
            },
        },
    }
    for fragment in fragments:
        _merge(doc, fragment, "")
    for ops in doc["paths"].values():
        for method, op in ops.items():
            if method in _METHODS:
                op["responses"].setdefault("default", DEFAULT_ERROR)
    return doc
