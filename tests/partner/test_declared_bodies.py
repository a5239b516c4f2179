"""The partner bodies' one declaration: the schema the edge serves and the check it runs agree.

Bodies generated from the served schema are accepted by the parser, schema-invalid ones
are refused by it, and a table of known invalid bodies (the three rules the hand-written
schemas once stated differently among them) is refused by both, naming the same field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema_rs
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from edge.errors import BadRequest, EdgeError, Unprocessable
from edge.partner import bodies

EXAMPLES = 40  # per body and mode: a few seconds in all

# name -> (component or inline schema as the document serves it, parser, its error class)
Parser = Callable[[bytes], Any]
BODIES: dict[str, tuple[str, str, Parser, type[EdgeError]]] = {
    "ugc": ("production", "/v1/ugc/process", bodies.parse_ugc, BadRequest),
    "sandbox": ("sandbox", "/ugc/v1/process", lambda raw: bodies.parse_ugc(raw, sandbox=True),
                BadRequest),
    "ai": ("production", "/v1/ai/process", bodies.parse_ai, Unprocessable),
    "legacy": ("production+legacy", "/ugc/process", bodies.parse_legacy_process, BadRequest),
    "disable": ("production+legacy", "/ugc/disable", bodies.parse_disable, BadRequest),
    "impression": ("production+legacy", "/ugc/impression", bodies.parse_impression, BadRequest),
}  # fmt: skip
SETTINGS = {
    "production": {},
    "sandbox": {"env": "sandbox"},
    "production+legacy": {"legacy_api": True},
}


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    return {}


@pytest.fixture
def served(make_client: Any, documents: dict[str, dict[str, Any]]) -> Callable[[str], Any]:
    def get(config: str) -> dict[str, Any]:
        if config not in documents:
            documents[config] = make_client(**SETTINGS[config]).get("/openapi.json").json()
        return documents[config]

    return get


def _body_only(doc: dict[str, Any], path: str) -> dict[str, Any]:
    """The served document cut down to one operation's request body (no key, no headers)."""
    body = doc["paths"][path]["post"]["requestBody"]
    op = {"requestBody": body, "responses": {"200": {"description": "ok"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": path, "version": "1"},
        "paths": {"/body": {"post": op}},
        "components": {"schemas": doc["components"]["schemas"]},
    }


def _validator(doc: dict[str, Any], path: str) -> Any:
    schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.validator_for(
        {**schema, "components": {"schemas": doc["components"]["schemas"]}}
    )


def _raw(body: Any) -> bytes:
    """A generated body as a client sends it (the standard encoder: integers of any size)."""
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def _examples(doc: dict[str, Any], path: str, mode: GenerationMode) -> list[Any]:
    op = next(iter(schemathesis.openapi.from_dict(_body_only(doc, path)).get_all_operations()))
    found: list[Any] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.ok().as_strategy(generation_mode=mode))
    def collect(case: Any) -> None:
        found.append(case.body)

    collect()
    return found


def _words_only_fault(body: Any) -> str | None:
    """The field a rule the schema states in words only refuses, or None. Two such rules:
    a state's country prefix (GB-ENG) must be geo_target.country when both are sent, and
    meta_data (kept as given by the store) holds integers within 64 bits."""
    geo = body.get("geo_target") if isinstance(body, dict) else None
    if isinstance(geo, dict) and geo.get("state") and geo.get("country"):
        state, country = geo["state"], geo["country"]
        if "-" in state and state.split("-")[0].upper() != country.upper():
            return "geo_target.state"
    for i, pair in enumerate(body if isinstance(body, list) else []):
        try:
            orjson.dumps(pair.get("meta_data"))
        except TypeError:
            return f"[{i}].meta_data"
    return None


@pytest.mark.parametrize("name", list(BODIES))
def test_bodies_generated_from_the_served_schema_are_accepted(name: str, served: Any) -> None:
    config, path, parse, _ = BODIES[name]
    doc = served(config)
    validator = _validator(doc, path)
    examples = _examples(doc, path, GenerationMode.POSITIVE)
    assert len(examples) >= 5
    for body in examples:
        assert validator.is_valid(body), body
        fault = _words_only_fault(body)
        if fault:
            with pytest.raises(BadRequest) as err:
                parse(_raw(body))
            assert err.value.field == fault
            continue
        try:
            parse(_raw(body))
        except EdgeError as exc:
            pytest.fail(f"schema-valid body refused: {body!r}: {exc}")


@pytest.mark.parametrize("name", list(BODIES))
def test_bodies_the_served_schema_refuses_are_refused(name: str, served: Any) -> None:
    config, path, parse, error = BODIES[name]
    doc = served(config)
    validator = _validator(doc, path)
    refused = 0
    for body in _examples(doc, path, GenerationMode.NEGATIVE):
        if not isinstance(body, bytes) and validator.is_valid(body):
            continue  # schemathesis's negative cases can miss; only truly invalid ones count
        refused += 1
        with pytest.raises(error) as err:
            parse(_raw(body))
        assert err.value.field or isinstance(body, bytes), body  # bytes: not JSON at all
    assert refused >= 5


VALID_POST = {"post_id": "p-1", "message": "trail shoes"}
KNOWN_INVALID = [
    # The three rules the schemas once stated apart from the code:
    ({**VALID_POST, "geo_target": {"zipcode": " 94107"}}, "geo_target.zipcode"),  # not trimmed
    ({**VALID_POST, "geo_target": {"zipcode": "94107 "}}, "geo_target.zipcode"),
    ({**VALID_POST, "geo_target": {"state": "California"}}, "geo_target.state"),
    ({**VALID_POST, "geo_target": {"state": " CA"}}, "geo_target.state"),
    ({**VALID_POST, "geo_target": {"state": "US-CALI"}}, "geo_target.state"),
    ({"post_id": "p-1", "message": "   "}, "message"),  # blank is empty
    ({"post_id": "p-1", "message": "\n\t"}, "message"),
    # and the ones around them
    ({"post_id": "p\n", "message": "hi"}, "post_id"),  # a final newline (Python's `$`)
    ({"post_id": "a\u200bb", "message": "hi"}, "post_id"),  # an invisible format character
    ({**VALID_POST, "geo_target": {"zipcode": "94107\n"}}, "geo_target.zipcode"),
    ({**VALID_POST, "geo_target": {"dma": "८०७"}}, "geo_target.dma"),  # not ASCII digits
    ({**VALID_POST, "geo_target": {"lat": 90.5, "lon": 0}}, "geo_target.lat"),
    ({**VALID_POST, "message": "x" * 10_001}, "message"),
    ({**VALID_POST, "geo_taget": {}}, "geo_taget"),
]


@pytest.mark.parametrize(("body", "field"), KNOWN_INVALID)
def test_known_invalid_bodies_fail_the_schema_and_the_parser(
    body: dict[str, Any], field: str, served: Any
) -> None:
    assert not _validator(served("production"), "/v1/ugc/process").is_valid(body)
    with pytest.raises(BadRequest) as err:
        bodies.parse_ugc(orjson.dumps(body))
    assert err.value.field == field


def test_the_served_schema_is_the_declaration(served: Any) -> None:
    schemas = served("production")["components"]["schemas"]
    assert schemas["UgcProcessRequest"]["properties"]["message"]["pattern"] == r"\S"
    state = schemas["GeoTarget"]["properties"]["state"]["anyOf"][0]
    assert state["pattern"] == r"^([A-Za-z]{2}-)?[A-Za-z0-9]{1,3}$"  # Python's \Z, published
    assert schemas["GeoTarget"]["additionalProperties"] is False
