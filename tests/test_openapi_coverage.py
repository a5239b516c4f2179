"""/openapi.json stays true: every served route is documented, nothing documented is
missing, every $ref resolves, and the partner statuses of SPEC part 7 are all there.

That each status a route test observes is documented, with a body valid against its
schema, is checked on every response of tests/routes/ (its conftest's ``make_client``).
"""

from __future__ import annotations

import pytest
from starlette.routing import Mount, Route

CONFIGS = {
    "production": {},
    "sandbox": {"env": "sandbox"},
    "production+legacy": {"legacy_api": True},
    "sandbox+legacy": {"env": "sandbox", "legacy_api": True},
}
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def served(app) -> set[tuple[str, str]]:
    out = set()
    for route in app.routes:
        if isinstance(route, Route):
            out |= {(route.path, m.lower()) for m in route.methods or () if m != "HEAD"}
        elif isinstance(route, Mount):
            out.add((route.path, "mount"))
    return out


def documented(doc) -> set[tuple[str, str]]:
    return {(p, m) for p, ops in doc["paths"].items() for m in ops if m in METHODS}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def app_doc(request, make_client):
    client = make_client(**CONFIGS[request.param])
    return client.app, client.get("/openapi.json").json()


def test_every_served_route_and_method_is_documented(app_doc):
    app, doc = app_doc
    routes = served(app)
    mounts = {p for p, m in routes if m == "mount"}
    missing = {(p, m) for p, m in routes if m != "mount" and (p, m) not in documented(doc)} | {
        p for p in mounts if not any(d.startswith(p) for d, _ in documented(doc))
    }
    assert not missing, f"served but not in /openapi.json: {sorted(map(str, missing))}"


def test_nothing_documented_is_missing(app_doc):
    app, doc = app_doc
    routes = served(app)
    mounts = [p for p, m in routes if m == "mount"]
    ghosts = {
        (p, m)
        for p, m in documented(doc)
        if (p, m) not in routes
        and not (m == "head" and (p, "get") in routes)
        and m != "options"  # CORS preflights are answered by middleware
        and not any(p.startswith(mp) for mp in mounts)
    }
    assert not ghosts, f"documented but not served: {sorted(ghosts)}"


def test_every_ref_resolves(app_doc):
    _, doc = app_doc

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                target = doc
                for part in ref.removeprefix("#/").split("/"):
                    assert part in target, f"unresolved $ref {ref}"
                    target = target[part]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    assert doc["openapi"] == "3.1.0"


# SPEC part 7 (and 5.11's 403 in production), per partner operation and environment.
SPEC_7 = {
    "production+legacy": {
        ("/v1/ugc/process", "post"): {200, 400, 401, 403, 429, 502},
        ("/v1/ai/process", "post"): {200, 401, 403, 422, 429, 502},
        ("/v1/ad-manager/campaigns", "get"): {200, 401, 403, 429},
        ("/v1/ad-manager/ad-sets", "get"): {200, 401, 403, 429},
        ("/ugc/process", "post"): {200, 400, 401, 403, 429, 502},
        ("/ugc/disable", "post"): {200, 400, 401},
        ("/ugc/impression", "post"): {200, 400, 401},
        ("/keys/apiKey", "get"): {200, 401, 502},
    },
    "sandbox": {
        ("/ugc/v1/process", "post"): {200, 400, 401, 429, 502},
        ("/v1/ad-manager/campaigns", "get"): {200, 401},
    },
}


@pytest.mark.parametrize("config", list(SPEC_7))
def test_spec_part_7_statuses_are_documented(make_client, config):
    doc = make_client(**CONFIGS[config]).get("/openapi.json").json()
    for (path, method), statuses in SPEC_7[config].items():
        have = {int(c) for c in doc["paths"][path][method]["responses"]}
        assert statuses <= have, f"{method} {path} lacks {sorted(statuses - have)}"
        op = doc["paths"][path][method]
        assert op["security"] == [{"ApiKey": []}]
    if config == "sandbox":
        assert 403 not in {
            int(c) for c in doc["paths"]["/ugc/v1/process"]["post"]["responses"]
        }  # the sandbox has no geofence (SPEC 1)


def test_rate_limit_and_retry_headers_are_documented(make_client):
    doc = make_client().get("/openapi.json").json()
    responses = doc["paths"]["/v1/ugc/process"]["post"]["responses"]
    assert {"Retry-After", "RateLimit", "RateLimit-Policy"} <= set(responses["429"]["headers"])
    assert "Retry-After" in responses["502"]["headers"]
    assert {"RateLimit", "RateLimit-Policy"} <= set(responses["200"]["headers"])
