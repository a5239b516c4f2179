"""Strict validation of /dea bodies against the same JSON Schemas the OpenAPI document serves.

One source of truth: ``edge.delivery.schemas`` is both what ``/openapi.json`` publishes and
what this checks, so the document cannot drift from the behaviour. Only the keywords the
schemas use are implemented (type, properties, required, additionalProperties, items,
min/maxItems, min/maxLength, pattern, enum, minimum, maximum, uniqueItems); an unknown
keyword in a schema is a programming error caught by the tests. Every failure is a 400 in
the one error shape naming the field, e.g. ``placements[2].text``.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

from edge.errors import BadRequest

_KNOWN = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
     "minLength", "maxLength", "pattern", "enum", "minimum", "maximum", "uniqueItems",
     "description", "examples", "format"}
)  # fmt: skip


@lru_cache(maxsize=64)
def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text)


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "null":
        return value is None
    raise ValueError(f"unsupported schema type {kind!r}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def validate(value: Any, schema: dict[str, Any], where: str = "") -> None:
    """Raise BadRequest naming the first field of ``value`` that ``schema`` refuses."""
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"schema keywords not supported: {sorted(unknown)}")
    label = where or "the body"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_type_ok(value, k) for k in kinds):
            raise BadRequest(f"{label} must be {' or '.join(kinds)}", field=where or None)
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(str(o) for o in schema["enum"])
        raise BadRequest(f"{label} must be one of {options}", field=where or None)
    if isinstance(value, str):
        _check_string(value, schema, label, where)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise BadRequest(f"{label} must be at least {schema['minimum']}", field=where)
        if "maximum" in schema and value > schema["maximum"]:
            raise BadRequest(f"{label} must be at most {schema['maximum']}", field=where)
    elif isinstance(value, list):
        _check_array(value, schema, label, where)
    elif isinstance(value, dict):
        _check_object(value, schema, label, where)


def _check_string(value: str, schema: dict[str, Any], label: str, where: str) -> None:
    if len(value) < schema.get("minLength", 0):
        raise BadRequest(
            f"{label} must have at least {schema['minLength']} characters", field=where
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise BadRequest(f"{label} must have at most {schema['maxLength']} characters", field=where)
    if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
        raise BadRequest(f"{label} is not in the expected form", field=where)


def _check_array(value: list, schema: dict[str, Any], label: str, where: str) -> None:
    if len(value) < schema.get("minItems", 0):
        raise BadRequest(f"{label} must have at least {schema['minItems']} items", field=where)
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise BadRequest(f"{label} must have at most {schema['maxItems']} items", field=where)
    items = schema.get("items")
    for i, item in enumerate(value):
        if items is not None:
            validate(item, items, f"{where}[{i}]")
    if schema.get("uniqueItems"):
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                raise BadRequest(f"{label} repeats an item", field=f"{where}[{i}]")
            seen.append(item)


def _check_object(value: dict, schema: dict[str, Any], label: str, where: str) -> None:
    props = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        for key in value:
            if key not in props:
                raise BadRequest(f"unknown field {key!r}", field=_join(where, key))
    for key in schema.get("required", ()):
        if key not in value:
            raise BadRequest(f"{_join(where, key)} is required", field=_join(where, key))
    for key, sub in props.items():
        if key in value:
            validate(value[key], sub, _join(where, key))
