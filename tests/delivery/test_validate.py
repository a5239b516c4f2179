"""The /dea validator and its schemas (the ones /openapi.json serves)."""

import math

import pytest

from edge.delivery import schemas
from edge.delivery.validate import _KNOWN, validate
from edge.errors import BadRequest

ALL = {name: value for name, value in vars(schemas).items()
       if isinstance(value, dict) and value.get("type") == "object"}  # fmt: skip


def _keywords(schema, path="") -> set[str]:
    found = set(schema)
    for key, sub in schema.get("properties", {}).items():
        found |= _keywords(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        found |= _keywords(schema["items"], path + "[]")
    return found


@pytest.mark.parametrize("name", sorted(ALL))
def test_schemas_use_only_keywords_the_validator_implements(name):
    assert _keywords(ALL[name]) <= _KNOWN


@pytest.mark.parametrize(
    ("value", "schema", "ok"),
    [
        (1, {"type": "integer"}, True),
        (True, {"type": "integer"}, False),  # JSON booleans are not numbers
        (1.5, {"type": "integer"}, False),
        (math.inf, {"type": "number"}, False),
        (None, {"type": ["object", "null"]}, True),
        ("b", {"enum": ["a"]}, False),
        ("ab", {"type": "string", "pattern": "^a"}, True),
        (5, {"type": "number", "maximum": 4}, False),
        ([1, 1], {"type": "array", "uniqueItems": True}, False),
    ],
)
def test_validator_rules(value, schema, ok):
    if ok:
        validate(value, schema)
    else:
        with pytest.raises(BadRequest):
            validate(value, schema)


def test_nested_field_paths_are_named():
    placements = [{"slot_id": "s", "text": "t"}, {"slot_id": "s2", "text": 7}]
    body = {
        "publisher_id": "p",
        "v": "1",
        "page_url": "https://a.example",
        "placements": placements,
    }
    with pytest.raises(BadRequest) as err:
        validate(body, schemas.PLACEMENTS_REQUEST)
    assert err.value.field == "placements[1].text"


def test_an_unsupported_schema_keyword_is_a_programming_error():
    with pytest.raises(ValueError):
        validate("x", {"type": "string", "format": "uri", "oneOf": []})
