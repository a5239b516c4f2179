r"""One declaration per request body: a msgspec ``Struct`` is both the check and the schema.

``decode(Body, raw, BadRequest)`` turns the request bytes into a typed ``Body`` in one C
pass (types, lengths, ranges, patterns, unknown and missing fields); the OpenAPI document
publishes ``msgspec.json.schema_components`` of the same classes, so what is documented is
what is checked. Rules are written as patterns wherever a pattern can say them (not blank,
no control characters in ids, the geo codes). A whole-value pattern ends in ``\\Z`` (Python's
``$`` also matches before a final newline); the published schema writes it ``$``, which is
the same rule in JSON Schema's (ECMA-262) reading. What msgspec cannot check while decoding
is attached to the declaration (``Meta(extra=...)``) and run once after it:
``max_depth``, free-form JSON the store keeps as given (depth, 64-bit integers).

A refusal is the edge's error (400, or 422 on ``/v1/ai/process``) in the house style, with
``field`` the JSON path a partner would write (``geo_target.lat``, ``[2].ad_id``): msgspec's
message is read back into that style, using the declaration for the limits it names.

msgspec recurses once per level of nesting, within Python's recursion limit less the stack
already in use, so a deep body raises ``RecursionError``. Such a body is read by
``parse_json`` instead: it holds every route to one nesting limit (orjson's, refused as
"depth limit exceeded"), and what it accepts is converted into the declaration, so the
answer never depends on how deep the stack was.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
import orjson
from msgspec import Meta
from msgspec import inspect as mi

from edge.errors import EdgeError
from edge.http import json_refusal, not_utf8, parse_json
from edge.partner.fields import control_character

T = TypeVar("T")

# "Not blank", as a pattern: searched (unanchored) by msgspec and by JSON Schema alike, it
# asks for one character that is not white space, so "", " " and "\n" all fail it.
NON_BLANK = r"\S"


def _control_class() -> str:
    """The characters ``control_character`` refuses, as the inside of a regex class.

    Written as the characters themselves, not escapes, so Python, ECMA-262 (with the
    ``u`` flag) and Rust read the class alike; surrogates are left out, since no JSON text
    decodes to one (msgspec refuses a lone ``\\ud800``)."""
    parts: list[str] = []
    start: int | None = None
    for cp in range(0x110001):
        bad = (
            cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF and control_character(chr(cp)) is not None
        )
        if bad and start is None:
            start = cp
        elif not bad and start is not None:
            end = cp - 1
            parts.append(chr(start) if start == end else f"{chr(start)}-{chr(end)}")
            start = None
    return "".join(parts)


_CONTROL = _control_class()
# An id: not blank, and no control, format or line-separator character.
IDENT = f"^[^{_CONTROL}]*[^{_CONTROL}\\s][^{_CONTROL}]*\\Z"


def text(
    max_length: int,
    *,
    blank: bool = False,
    ident: bool = False,
    pattern: str | None = None,
    form: str | None = None,
    description: str | None = None,
    examples: list[str] | None = None,
) -> Meta:
    """The ``Meta`` of a string field: at most ``max_length`` code points; not blank unless
    ``blank``; ``ident``: an id (no control characters); ``pattern`` + ``form``: the shape
    and how an error describes it ("must be ...")."""
    extra: dict[str, Any] = {}
    if ident:
        extra["ident"] = True
        pattern = IDENT
    if form is not None:
        extra["form"] = form
    schema_extra: dict[str, Any] = {}
    if examples:
        schema_extra["examples"] = examples
    if ident:
        note = "Not blank; no control, format or line-separator characters."
        description = f"{description} {note}" if description else note
    return Meta(
        min_length=None if blank else 1,
        max_length=max_length,
        pattern=pattern if pattern is not None else (None if blank else NON_BLANK),
        description=description,
        extra=extra or None,
        extra_json_schema=schema_extra or None,
    )


class Invalid(Exception):
    """A post-decode rule failed at ``path`` (the JSON path, "" for the body itself)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def schema_components(*types: Any, ref_template: str) -> tuple[list[Any], dict[str, Any]]:
    """The JSON Schema of declared types: a schema per type and the named components they
    use, with each pattern's final ``\\Z`` written as JSON Schema's ``$``."""
    schemas, components = msgspec.json.schema_components(types, ref_template=ref_template)
    return _published(list(schemas)), _published(dict(components))


def _published(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _published(v) for k, v in node.items()}
        pattern = out.get("pattern")
        if isinstance(pattern, str) and pattern.endswith("\\Z"):
            out["pattern"] = pattern[:-2] + "$"
        return out
    if isinstance(node, list):
        return [_published(v) for v in node]
    return node


def decode(cls: type[T], raw: bytes, error: type[EdgeError]) -> T:
    """``raw`` decoded into ``cls`` and checked against its whole declaration, or ``error``."""
    if not raw:
        raise error("the body is empty; a JSON document is required", field="body")
    compiled = _compiled(cls)
    try:
        value: T = compiled.decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise _unreadable(raw, error) or _translate(cls, raw, str(exc), error) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise json_refusal(raw, error, str(exc)) from None
    except RecursionError:
        value = _converted(cls, raw, error)
    if compiled.skips and not raw.isascii():
        refusal = not_utf8(raw, error)  # skipped values were never read, so never checked
        if refusal is not None:
            raise refusal
    try:
        compiled.post(value, "")
    except Invalid as exc:
        field = exc.path or "body"
        raise error(f"{field} {exc.message}", field=field) from None
    return value


def _unreadable(raw: bytes, error: type[EdgeError]) -> EdgeError | None:
    """The refusal of a body that is not UTF-8 or not JSON, else None. msgspec stops at
    the first fault, which may come before such bytes; the body is refused as that, in
    every route's words (``json_refusal``), before any field of it is named."""
    try:
        msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        return json_refusal(raw, error, str(exc))
    except RecursionError:
        try:
            parse_json(raw, error)
        except EdgeError as exc:
            return exc
    return None


def _converted(cls: type[T], raw: bytes, error: type[EdgeError]) -> T:
    """``raw``, nested deeper than msgspec can recurse, read by ``parse_json`` (the nesting
    limit every route shares) and converted into ``cls``: the values a free-form field
    takes as given are passed through, not walked, so nothing recurses."""
    untyped = parse_json(raw, error)
    try:
        value: T = msgspec.convert(untyped, cls)
    except msgspec.ValidationError as exc:
        raise _translate(cls, raw, str(exc), error) from None
    return value


@dataclass(frozen=True, slots=True)
class _Compiled:
    decoder: msgspec.json.Decoder[Any]
    info: mi.Type  # the declaration as msgspec reads it, for error messages
    post: Check  # the rules left after decoding, compiled once into one walk
    skips: bool  # some object's other keys are skipped unread (the legacy ``meta``)


_COMPILED: dict[object, _Compiled] = {}


def _compiled(cls: object) -> _Compiled:
    """The decoder and checks of one declaration, built on first use (the set is fixed)."""
    done = _COMPILED.get(cls)
    if done is None:
        info = mi.type_info(cls)
        done = _Compiled(
            msgspec.json.Decoder(cls), info, _compile(info, {}) or _nothing, _skips(info, set())
        )
        _COMPILED[cls] = done
    return done


def _skips(info: mi.Type, seen: set[type]) -> bool:
    """Whether a value of ``info`` may hold an object whose unknown keys are skipped."""
    if isinstance(info, mi.Metadata):
        return _skips(info.type, seen)
    if isinstance(info, mi.UnionType):
        return any(_skips(t, seen) for t in info.types)
    if isinstance(info, mi.ListType):
        return _skips(info.item_type, seen)
    if isinstance(info, mi.StructType):
        if info.cls in seen:
            return False
        seen.add(info.cls)
        return not info.forbid_unknown_fields or any(_skips(f.type, seen) for f in info.fields)
    return False


# -- the rules msgspec cannot check while decoding ------------------------------------------

Check = Callable[[Any, str], None]


def refusal(pattern: str, extra: dict[str, Any], value: Any) -> str:
    """How a string that fails a declared pattern is refused ("must ...")."""
    if pattern == NON_BLANK or (isinstance(value, str) and not value.strip()):
        return "must not be empty"
    if extra.get("ident") and isinstance(value, str):
        bad = control_character(value)
        if bad is not None:
            return f"must not contain control characters (found U+{ord(bad):04X})"
    return f"must be {extra.get('form', 'in the documented form')}"


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what a stored JSON column takes back as an integer


def _storable(limit: int) -> Check:
    """Free-form JSON the store keeps as given: nested at most ``limit`` levels, integers
    within 64 bits (JSON allows any; the stored column's encoder does not)."""

    def check(value: Any, path: str) -> None:
        todo: list[tuple[Any, int]] = [(value, 0)]
        while todo:
            item, depth = todo.pop()
            if isinstance(item, dict | list):
                if depth >= limit:
                    raise Invalid(path, f"must be nested at most {limit} levels deep")
                values = item.values() if isinstance(item, dict) else item
                todo.extend((v, depth + 1) for v in values)
            elif isinstance(item, int) and not _INT_MIN <= item <= _INT_MAX:
                raise Invalid(path, "must hold integers within 64 bits")

    return check


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _nothing(value: Any, path: str) -> None:
    return None


def _compile(info: mi.Type, extra: dict[str, Any]) -> Check | None:
    """A check of one declared value, or None when nothing inside it is left to check."""
    if isinstance(info, mi.Metadata):
        extra = info.extra or {}
        inner = _compile(info.type, extra)
        if "max_depth" not in extra:
            return inner
        depth = _storable(int(extra["max_depth"]))
        if inner is None:
            return depth

        def both(value: Any, path: str) -> None:
            depth(value, path)
            inner(value, path)

        return both
    if isinstance(info, mi.UnionType):
        parts = [c for c in (_compile(t, {}) for t in info.types) if c is not None]
        if not parts:
            return None

        def any_member(value: Any, path: str) -> None:
            if value is not None:
                for check in parts:
                    check(value, path)

        return any_member
    if isinstance(info, mi.ListType):
        item = _compile(info.item_type, {})
        if item is None:
            return None

        def each(value: Any, path: str) -> None:
            for i, v in enumerate(value):
                item(v, f"{path}[{i}]")

        return each
    if isinstance(info, mi.StructType):
        fields = [
            (f.name, f.encode_name, c)
            for f in info.fields
            if (c := _compile(f.type, {})) is not None
        ]
        if not fields:
            return None
        cls = info.cls

        def struct(value: Any, path: str) -> None:
            if not isinstance(value, cls):
                return
            for attr, name, check in fields:
                check(getattr(value, attr), _join(path, name))

        return struct
    return None


# -- msgspec's message, read back into the house style --------------------------------------

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_MISSING = re.compile(r"Object missing required field `(?P<key>[^`]*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<key>[^`]*)`")
_TYPE = re.compile(r"Expected `(?P<want>[^`]*)`, got `(?P<got>[^`]*)`")
_LENGTH = re.compile(r"Expected `(?P<want>str|array)` of length (?P<op>[<>]=) (?P<n>\d+)")
_REGEX = re.compile(r"Expected `str` matching regex")
_RANGE = re.compile(r"Expected `(?:int|float)` (?:[<>]=?) ")
_KINDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "object": "an object",
    "array": "an array",
    "null": "null",
}
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _translate(cls: type[Any], raw: bytes, message: str, error: type[EdgeError]) -> EdgeError:
    m = _AT.match(message)
    what, where = (m.group("what"), m.group("path") or "") if m else (message, "")
    segments = [(key, int(i) if i else None) for key, i in _SEGMENT.findall(where)]
    path = where.lstrip(".")  # "$.geo_target.lat" -> "geo_target.lat", "$[2].ad_id" -> "[2].ad_id"
    node, extra = _node_at(_compiled(cls).info, segments)
    field = path or "body"

    def fail(text: str, where: str = field) -> EdgeError:
        return error(f"{where} {text}", field=where)

    if mm := _MISSING.match(what):
        return fail("is required", _join(path, mm.group("key")))
    if mm := _UNKNOWN.match(what):
        struct = isinstance(node, mi.StructType)
        known = sorted(f.encode_name for f in node.fields) if struct else []
        expected = f" (expected one of {', '.join(known)})" if known else ""
        key = mm.group("key") or '""'  # an empty name is still named
        return fail(f"is not a known field{expected}", _join(path, key))
    if mm := _TYPE.match(what):
        want = mm.group("want").split(" | ")[0]
        got = mm.group("got")
        if got == "null":
            return fail("is required")
        if not path and want in ("object", "array"):
            return fail(f"must be a JSON {want}, not {_KINDS.get(got, got)}")
        return fail(f"must be {_KINDS.get(want, want)}, not {_KINDS.get(got, got)}")
    value = _value_at(raw, segments)
    if mm := _LENGTH.match(what):
        n = int(mm.group("n"))
        if mm.group("want") == "array":
            need = "at least" if mm.group("op") == ">=" else "at most"
            return fail(f"must hold {need} {n:,} item{'s' if n != 1 else ''}")
        if mm.group("op") == ">=":
            return fail("must not be empty")
        got = len(value) if isinstance(value, str) else 0
        if "form" in extra:  # a code too long for its shape: name the shape ("Illinois")
            return fail(f"must be {extra['form']} (got {got:,} characters)")
        return fail(f"must be at most {n:,} characters (got {got:,})")
    if _REGEX.match(what) and isinstance(node, mi.StrType) and node.pattern is not None:
        return fail(refusal(node.pattern, extra, value))
    if _RANGE.match(what) and isinstance(node, mi.FloatType | mi.IntType):
        return fail(f"must be between {node.ge:g} and {node.le:g} (got {value!r})")
    return fail(f"is invalid: {what}")


def _node_at(info: mi.Type, segments: list[tuple[str, int | None]]) -> tuple[Any, dict[str, Any]]:
    """The declared type at a JSON path (Meta, Optional unwrapped) and its ``extra``."""
    extra: dict[str, Any] = {}

    def unwrap(t: mi.Type) -> mi.Type:
        while True:
            if isinstance(t, mi.Metadata):
                extra.update(t.extra or {})
                t = t.type
            elif isinstance(t, mi.UnionType):
                members = [m for m in t.types if not isinstance(m, mi.NoneType)]
                if len(members) != 1:
                    return t
                t = members[0]
            else:
                return t

    node = unwrap(info)
    for key, index in segments:
        extra = {}
        if index is not None and isinstance(node, mi.ListType):
            node = unwrap(node.item_type)
        elif isinstance(node, mi.StructType):
            match = [f for f in node.fields if f.encode_name == key]
            if not match:
                return node, extra
            node = unwrap(match[0].type)
        else:
            return node, extra
    return node, extra


def _value_at(raw: bytes, segments: list[tuple[str, int | None]]) -> Any:
    """The refused value itself, read again untyped (only on the error path)."""
    try:
        value: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    except RecursionError:  # deeper than msgspec recurses: orjson reads what the route took
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
    for key, index in segments:
        if index is not None and isinstance(value, list) and index < len(value):
            value = value[index]
        elif index is None and isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return value
