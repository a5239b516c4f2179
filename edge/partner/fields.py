"""Typed reads of JSON request fields, each failure an error naming the field.

The UGC routes answer a bad body with 400 and ``/v1/ai/process`` with 422, so a
``Fields`` reader is made with the error class to raise. Field names in errors are JSON
paths as a partner would write them: ``geo_target.lat``, ``[2].ad_id``.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from edge.errors import EdgeError


def control_character(text: str) -> str | None:
    """The first control, format or line-separator character of ``text``, else None.

    Ids are refused with one: a newline or an invisible character makes two ids that look
    alike (and once let a signed URL be re-split into several dedupe keys).
    """
    for ch in text:
        category = unicodedata.category(ch)
        if category[0] == "C" or category in ("Zl", "Zp"):
            return ch
    return None


def kind(value: Any) -> str:
    """How a JSON value reads in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


class Fields:
    """Reads fields of one JSON object, raising ``error`` (400 or 422) on the first fault."""

    def __init__(self, data: Any, error: type[EdgeError], prefix: str = "") -> None:
        self.error = error
        self.prefix = prefix
        if not isinstance(data, dict):
            where = prefix.rstrip(".") or "body"
            raise error(f"{where} must be a JSON object, not {kind(data)}", field=where)
        self.data: Mapping[str, Any] = data

    def name(self, key: str) -> str:
        return self.prefix + key

    def fail(self, key: str, message: str) -> EdgeError:
        return self.error(f"{self.name(key)} {message}", field=self.name(key))

    def only(self, allowed: Iterable[str]) -> None:
        """Refuse fields we do not know: a typo must not silently drop a signal."""
        allowed = set(allowed)
        for key in self.data:
            if key not in allowed:
                raise self.error(
                    f"{self.name(key)} is not a known field (expected one of "
                    f"{', '.join(sorted(allowed))})",
                    field=self.name(key),
                )

    def text(
        self,
        key: str,
        *,
        required: bool = False,
        max_len: int = 256,
        allow_blank: bool = False,
        ident: bool = False,
    ) -> str | None:
        """A string field; missing or null gives None unless ``required``.

        ``ident``: an id, refused when it holds a control or invisible format character."""
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.fail(key, "is required")
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, not {kind(value)}")
        if not allow_blank and not value.strip():
            raise self.fail(key, "must not be empty")
        if len(value) > max_len:
            raise self.fail(key, f"must be at most {max_len:,} characters (got {len(value):,})")
        if ident:
            bad = control_character(value)
            if bad is not None:
                raise self.fail(
                    key, f"must not contain control characters (found U+{ord(bad):04X})"
                )
        return value

    def required(self, key: str, *, max_len: int = 256, ident: bool = False) -> str:
        """A string field that must be present and not blank."""
        value = self.text(key, required=True, max_len=max_len, ident=ident)
        if value is None:  # unreachable: text() raised; keeps the type exact
            raise self.fail(key, "is required")
        return value

    def number(self, key: str, *, lo: float, hi: float) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, not {kind(value)}")
        if not math.isfinite(value) or not lo <= value <= hi:
            raise self.fail(key, f"must be between {lo:g} and {hi:g} (got {value!r})")
        return float(value)

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, not {kind(value)}")
        return value

    def obj(self, key: str) -> Fields | None:
        """A nested object's reader, or None when the field is missing or null."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, f"must be an object, not {kind(value)}")
        return Fields(value, self.error, prefix=f"{self.name(key)}.")
