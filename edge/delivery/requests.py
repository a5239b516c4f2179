"""Reading /dea requests: bounded JSON (or text/plain JSON, what sendBeacon sends) checked
against its schema, strict query strings, and the store's failures as a retryable 503."""

from __future__ import annotations

import contextlib
import operator
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, cast

import msgspec
from starlette.requests import Request

from edge.context import Context
from edge.delivery.schemas import struct_of
from edge.delivery.validate import validate
from edge.errors import BadRequest, ServiceUnavailable
from edge.http import no_query, parse_json, read_json
from edge.store import StoreUnavailable

STORE_RETRY_AFTER = "1"


async def json_body(ctx: Context, request: Request, schema: dict[str, Any]) -> dict[str, Any]:
    """The body of a /dea POST; such a route takes no query parameters."""
    no_query(request.scope)
    body = await read_json(request, max_bytes=ctx.settings.max_body_bytes, allow_text_plain=True)
    validate(body, schema)  # every /dea body schema is an object
    return cast(dict[str, Any], body)


class BodyFields:
    """The named fields of a body that must satisfy ``schema``, read in one C pass (an
    optional field the body leaves out reads None).

    The bytes are decoded into a msgspec ``Struct`` derived from the schema
    (``schemas.struct_of``), which accepts exactly the bodies the schema accepts. A body it
    refuses is read again the general way (``parse_json``, then ``validate``), so the
    answer names the same field with the same message as every other /dea body; the
    fields are those of whichever reading accepted the body."""

    def __init__(self, schema: dict[str, Any], fields: tuple[str, ...]) -> None:
        self.schema = schema
        self._decoder = msgspec.json.Decoder(struct_of("Body", schema))
        self._from_struct: Callable[[Any], tuple[Any, ...]] = _getter(operator.attrgetter, fields)
        required = set(schema.get("required", ()))
        if required.issuperset(fields):
            self._from_dict: Callable[[Any], tuple[Any, ...]] = _getter(operator.itemgetter, fields)
        else:  # an optional field absent from the body reads None
            self._from_dict = lambda body: tuple(body.get(f) for f in fields)
        # An optional field the body leaves out is UNSET in the Struct: read as None.
        self._optional = not required.issuperset(fields)

    def __call__(self, raw: bytes) -> tuple[Any, ...]:
        try:
            values = self._from_struct(self._decoder.decode(raw))
            if self._optional and msgspec.UNSET in values:
                return tuple([None if v is msgspec.UNSET else v for v in values])
            return values
        # DecodeError (ValidationError is one), or UnicodeDecodeError for bytes that are
        # not UTF-8: msgspec raises that one as it is.
        except (msgspec.DecodeError, ValueError):
            body = parse_json(raw)
            validate(body, self.schema)
            return self._from_dict(body)


def _getter(make: Any, fields: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A getter of ``fields`` as a tuple, even of one field."""
    if len(fields) == 1:
        one = make(fields[0])
        return lambda value: (one(value),)
    return cast(Callable[[Any], tuple[Any, ...]], make(*fields))


def strict_query(
    request: Request, allowed: Iterable[str], required: Iterable[str] = ()
) -> dict[str, str]:
    """The query as a dict; an unknown or repeated parameter is a 400 naming it."""
    allowed = set(allowed)
    out: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key not in allowed:
            raise BadRequest(f"unknown query parameter {key!r}", field=key)
        if key in out:
            raise BadRequest(f"query parameter {key!r} is repeated", field=key)
        out[key] = value
    for key in required:
        if key not in out:
            raise BadRequest(f"query parameter {key!r} is required", field=key)
    return out


@contextlib.asynccontextmanager
async def store_errors() -> AsyncIterator[None]:
    """A store that cannot commit is a 503 with Retry-After: the beacon is retried, not lost."""
    try:
        yield
    except StoreUnavailable:
        raise store_unavailable() from None


def store_unavailable() -> ServiceUnavailable:
    """The answer to ``StoreUnavailable`` (``store_errors`` without a context manager, for
    the hottest beacons)."""
    return ServiceUnavailable(
        "the event could not be stored; retry shortly",
        headers={"Retry-After": STORE_RETRY_AFTER},
    )
