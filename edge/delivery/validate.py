"""Strict validation of /dea bodies against the same JSON Schemas the OpenAPI document serves.

One source of truth: ``edge.delivery.schemas`` is both what ``/openapi.json`` publishes and
what this checks, so the document cannot drift from the behaviour. Only the keywords the
schemas use are implemented (type, properties, required, additionalProperties, items,
min/maxItems, min/maxLength, pattern, enum, minimum, maximum, uniqueItems); an unknown
keyword in a schema is a programming error caught by the tests. Every failure is a 400 in
the one error shape naming the field, e.g. ``placements[2].text``.

Each schema is compiled once into nested closures (keyed by the schema object, which the
module-level schemas outlive), so a request pays for the checks, not for reading the schema.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from edge.errors import BadRequest

_KNOWN = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
     "minLength", "maxLength", "pattern", "enum", "minimum", "maximum", "uniqueItems",
     "description", "examples", "format"}
)  # fmt: skip


@lru_cache(maxsize=64)
def json_schema_pattern(text: str) -> re.Pattern[str]:
    r"""A JSON Schema (ECMA-262) pattern as Python reads it: an unanchored search, where a
    final ``$`` is the end of the text. Python's ``$`` also matches before a trailing
    newline, which would let "abc\n" pass a pattern meant for "abc" (another id), so it
    becomes ``\Z``."""
    if text.endswith("$") and not text.endswith("\\$"):
        text = text[:-1] + "\\Z"
    if re.search(r"(?<!\\)\$", text):
        raise ValueError(f"pattern {text!r}: '$' is supported only at the end")
    return re.compile(text)


Checker = Callable[[Any, str], None]


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_boolean(value: Any) -> bool:
    return isinstance(value, bool)


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _is_array(value: Any) -> bool:
    return isinstance(value, list)


def _is_null(value: Any) -> bool:
    return value is None


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": _is_string,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": _is_boolean,
    "object": _is_object,
    "array": _is_array,
    "null": _is_null,
}

# id(schema) -> (schema, checker): the schema is held so its id cannot be reused.
_MAX_COMPILED = 256
_COMPILED: dict[int, tuple[dict[str, Any], Checker]] = {}


def validate(value: Any, schema: dict[str, Any], where: str = "") -> None:
    """Raise BadRequest naming the first field of ``value`` that ``schema`` refuses."""
    entry = _COMPILED.get(id(schema))
    if entry is None or entry[0] is not schema:
        entry = (schema, compile_schema(schema))
        if len(_COMPILED) >= _MAX_COMPILED:  # only ad-hoc schemas (tests) get this far
            _COMPILED.clear()
        _COMPILED[id(schema)] = entry
    entry[1](value, where)


def compile_schema(schema: dict[str, Any]) -> Checker:
    """A checker ``(value, where)`` that raises what ``validate`` would for ``schema``."""
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"schema keywords not supported: {sorted(unknown)}")
    kinds = schema.get("type")
    type_tests: tuple[Callable[[Any], bool], ...] | None = None
    type_text = ""
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        unsupported = [k for k in kinds if k not in _TYPE_TESTS]
        if unsupported:
            raise ValueError(f"unsupported schema type {unsupported[0]!r}")
        type_tests = tuple(_TYPE_TESTS[k] for k in kinds)
        type_text = " or ".join(kinds)
    has_enum = "enum" in schema
    enum: Any = schema.get("enum")
    enum_text = ", ".join(str(o) for o in enum) if has_enum else ""
    check_string = _string_checker(schema)
    check_number = _number_checker(schema)
    check_array = _array_checker(schema)
    check_object = _object_checker(schema)

    def check(value: Any, where: str) -> None:
        label = where or "the body"
        if type_tests is not None and not any(test(value) for test in type_tests):
            raise BadRequest(f"{label} must be {type_text}", field=where or None)
        if has_enum and value not in enum:
            raise BadRequest(f"{label} must be one of {enum_text}", field=where or None)
        if isinstance(value, str):
            if check_string is not None:
                check_string(value, label, where)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            if check_number is not None:
                check_number(value, label, where)
        elif isinstance(value, list):
            check_array(value, label, where)
        elif isinstance(value, dict):
            check_object(value, label, where)

    return check


def _string_checker(schema: dict[str, Any]) -> Callable[[str, str, str], None] | None:
    if not {"minLength", "maxLength", "pattern"} & set(schema):
        return None
    min_length = schema.get("minLength", 0)
    max_length = schema.get("maxLength")
    pattern = json_schema_pattern(schema["pattern"]) if "pattern" in schema else None
    form = schema.get("pattern")  # the rule a refused value is told, as the schema states it

    def check(value: str, label: str, where: str) -> None:
        if len(value) < min_length:
            raise BadRequest(f"{label} must have at least {min_length} characters", field=where)
        if max_length is not None and len(value) > max_length:
            raise BadRequest(f"{label} must have at most {max_length} characters", field=where)
        if pattern is not None and not pattern.search(value):
            raise BadRequest(f"{label} must match {form}", field=where)

    return check


def _number_checker(schema: dict[str, Any]) -> Callable[[float, str, str], None] | None:
    if "minimum" not in schema and "maximum" not in schema:
        return None
    minimum: Any = schema.get("minimum")
    maximum: Any = schema.get("maximum")
    has_min, has_max = "minimum" in schema, "maximum" in schema

    def check(value: float, label: str, where: str) -> None:
        if has_min and value < minimum:
            raise BadRequest(f"{label} must be at least {minimum}", field=where)
        if has_max and value > maximum:
            raise BadRequest(f"{label} must be at most {maximum}", field=where)

    return check


def _array_checker(schema: dict[str, Any]) -> Callable[[list[Any], str, str], None]:
    min_items = schema.get("minItems", 0)
    max_items = schema.get("maxItems")
    items = compile_schema(schema["items"]) if schema.get("items") is not None else None
    unique = bool(schema.get("uniqueItems"))

    def check(value: list[Any], label: str, where: str) -> None:
        if len(value) < min_items:
            raise BadRequest(f"{label} must have at least {min_items} items", field=where)
        if max_items is not None and len(value) > max_items:
            raise BadRequest(f"{label} must have at most {max_items} items", field=where)
        if items is not None:
            for i, item in enumerate(value):
                items(item, f"{where}[{i}]")
        if unique:
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    raise BadRequest(f"{label} repeats an item", field=f"{where}[{i}]")
                seen.append(item)

    return check


def _object_checker(schema: dict[str, Any]) -> Callable[[dict[str, Any], str, str], None]:
    props = schema.get("properties", {})
    closed = schema.get("additionalProperties") is False
    required = tuple(schema.get("required", ()))
    children = tuple((key, compile_schema(sub)) for key, sub in props.items())

    def check(value: dict[str, Any], label: str, where: str) -> None:
        if closed:
            for key in value:
                if key not in props:
                    raise BadRequest(f"unknown field {key!r}", field=_join(where, key))
        for key in required:
            if key not in value:
                raise BadRequest(f"{_join(where, key)} is required", field=_join(where, key))
        for key, child in children:
            if key in value:
                child(value[key], f"{where}.{key}" if where else key)

    return check


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
