"""/openapi.json as typed clients read it: nested catalogue objects typed, required catalogue
fields marked, a default error response everywhere, the key scheme declared and applied,
and the two types of ``ad_id`` explained where a client author looks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.matcher.test_catalogue_doc import table_rows
from tests.test_openapi_coverage import CONFIGS, METHODS

ERROR_REF = {"$ref": "#/components/schemas/Error"}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def doc(request: pytest.FixtureRequest, make_client: Any) -> dict[str, Any]:
    document: dict[str, Any] = make_client(**CONFIGS[request.param]).get("/openapi.json").json()
    return document


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(p, m, op) for p, ops in doc["paths"].items() for m, op in ops.items() if m in METHODS]


def test_every_operation_has_a_default_error_response(doc: dict[str, Any]) -> None:
    for path, method, op in operations(doc):
        default = op["responses"].get("default")
        assert default is not None, f"{method} {path} has no default response"
        assert default["content"]["application/json"]["schema"] == ERROR_REF


def test_the_key_scheme_is_an_api_key_header_on_the_keyed_routes(doc: dict[str, Any]) -> None:
    schemes = doc["components"]["securitySchemes"]
    assert schemes["ApiKey"]["type"] == "apiKey"
    assert (schemes["ApiKey"]["in"], schemes["ApiKey"]["name"]) == ("header", "X-API-Key")
    assert "security" not in doc  # no global default: open routes stay open
    for path, method, op in operations(doc):
        keyed = (path.startswith("/v1/") and "/health" not in path) or path in (
            "/ugc/v1/process", "/ugc/process", "/ugc/disable", "/ugc/impression", "/keys/apiKey"
        )  # fmt: skip
        assert op.get("security") == ([{"ApiKey": []}] if keyed else None), (method, path)
        if keyed:
            assert "401" in op["responses"], (method, path)


def test_campaigns_type_their_nested_ad_sets_and_ads(make_client: Any) -> None:
    schemas = make_client().get("/openapi.json").json()["components"]["schemas"]
    ad_sets = schemas["Campaign"]["properties"]["ad_sets"]["items"]
    assert ad_sets == {"$ref": "#/components/schemas/CampaignAdSet"}
    nested = schemas["CampaignAdSet"]
    assert "campaign_id" not in nested["properties"]
    assert nested["properties"]["ads"]["items"] == {"$ref": "#/components/schemas/CatalogueAd"}
    assert schemas["AdSet"]["properties"]["ads"] == nested["properties"]["ads"]
    geo = nested["properties"]["geo"]["properties"]
    assert geo["cities"]["items"]["required"] == ["city", "state"]
    assert geo["radius"]["items"]["required"] == ["lat", "lon", "km"]


@pytest.mark.parametrize(
    ("schema", "section"),
    [("CatalogueAd", "Ad"), ("CampaignAdSet", "Ad set"), ("Campaign", "Campaign")],
)
def test_catalogue_fields_are_required_as_the_catalogue_requires(
    make_client: Any, schema: str, section: str
) -> None:
    # docs/catalogue.md's tables are checked against the validator (tests/matcher).
    schemas = make_client().get("/openapi.json").json()["components"]["schemas"]
    required = {field for field, req in table_rows(section) if req == "yes"}
    assert set(schemas[schema]["required"]) == required


def test_ad_id_types_are_explained_on_both_sides(make_client: Any) -> None:
    schemas = make_client().get("/openapi.json").json()["components"]["schemas"]
    ugc, ai = schemas["UgcAd"]["properties"]["ad_id"], schemas["AiAd"]["properties"]["ad_id"]
    assert ugc["type"] == "string" and ai["type"] == "integer"  # as they are, documented
    assert "integer" in ugc["description"] and "/v1/ai/process" in ugc["description"]
    assert "string" in ai["description"] and "UGC" in ai["description"]


def test_partner_fired_beacons_declare_the_device_user_agent_header(make_client: Any) -> None:
    # The invalid-traffic rules judge the user's browser named in X-Device-User-Agent on the
    # beacons a partner may fire from its server: the pixel, the AI beacons, the earlier
    # API's impression. A generated client sends only the headers it is told of.
    doc = make_client(legacy_api=True).get("/openapi.json").json()
    fired = [
        ("/dea/ugc/impression", "get"),
        ("/dea/ai/impressions/render", "get"),
        ("/dea/ai/impressions/view", "get"),
        ("/dea/ai/click", "get"),
        ("/ugc/impression", "post"),
    ]
    for path, method in fired:
        params = doc["paths"][path][method]["parameters"]
        header = [p for p in params if p["name"] == "X-Device-User-Agent"]
        assert header and header[0]["in"] == "header", (path, method)
    tag_only = doc["paths"]["/dea/url/impression"]["post"].get("parameters", [])
    assert not [p for p in tag_only if p["name"] == "X-Device-User-Agent"]


def test_every_field_a_partner_sends_is_described(make_client: Any) -> None:
    # A field without a description is one a partner learns of only by reading the code
    # (the AI `prompt`, which brand safety depends on, once was).
    doc = make_client().get("/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def resolve(schema: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in schema:
            return resolve(schemas[schema["$ref"].rsplit("/", 1)[1]])
        for option in schema.get("anyOf", []):
            if option.get("type") != "null":
                return {**resolve(option), **{k: v for k, v in schema.items() if k != "anyOf"}}
        return schema

    bare = []
    for path, ops in doc["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, op in ops.items():
            content = op.get("requestBody", {}).get("content", {}).get("application/json")
            if content is None:
                continue
            body = resolve(content["schema"])
            for name, prop in body.get("properties", {}).items():
                if not (prop.get("description") or resolve(prop).get("description")):
                    bare.append(f"{method.upper()} {path}: {name}")
    assert not bare, bare
