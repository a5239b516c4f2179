"""/openapi.json stays true: every served route is documented, nothing documented is
missing, every $ref resolves, the partner contract's error statuses are all there, and every
status documented for a keyed (partner) operation is produced by that operation here.

That each status a route test observes is documented, with a body valid against its
schema, is checked on every response of tests/routes/ and tests/delivery/ (the routes
conftest's ``make_client``).
"""

from __future__ import annotations

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from edge import ledger
from edge.partner.flow import sandbox_no_match
from edge.settings import RateLimit
from edge.store import StoreUnavailable
from matcher.catalogue import load_catalogue
from tests.conftest import issue_key
from tests.routes.conftest import CATALOGUE, Script

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


# The partner contract's statuses (and the 403 of production's geofence), per partner
# operation and environment.
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
        ("/v1/ugc/process", "post"): {200, 400, 401, 429, 502},
        ("/v1/ad-manager/campaigns", "get"): {200, 401},
    },
}


@pytest.mark.parametrize("config", list(SPEC_7))
def test_spec_part_7_statuses_are_documented(make_client, config):
    doc = make_client(**CONFIGS[config]).get("/openapi.json").json()
    for (path, method), statuses in SPEC_7[config].items():
        have = {int(c) for c in doc["paths"][path][method]["responses"] if c != "default"}
        assert statuses <= have, f"{method} {path} lacks {sorted(statuses - have)}"
        op = doc["paths"][path][method]
        assert op["security"] == [{"ApiKey": []}]
    if config == "sandbox":
        assert 403 not in {
            int(c) for c in doc["paths"]["/ugc/v1/process"]["post"]["responses"] if c != "default"
        }  # the sandbox has no geofence


def test_rate_limit_and_retry_headers_are_documented(make_client):
    doc = make_client().get("/openapi.json").json()
    responses = doc["paths"]["/v1/ugc/process"]["post"]["responses"]
    assert {"Retry-After", "RateLimit", "RateLimit-Policy"} <= set(responses["429"]["headers"])
    assert "Retry-After" in responses["502"]["headers"]
    assert {"RateLimit", "RateLimit-Policy"} <= set(responses["200"]["headers"])


# -- every documented status of a partner operation is produced by that operation ---------------

MATCHED_ID = next(
    f"p-{i}" for i in range(50) if not sandbox_no_match(f"p-{i}")
)  # reaches the matcher
PARTNER = {  # path -> (product, a valid body or query, an invalid one)
    "/v1/ugc/process": ("ugc", {"post_id": MATCHED_ID, "message": "kibble for a picky pup"}, {}),
    "/ugc/v1/process": ("ugc", {"post_id": MATCHED_ID, "message": "kibble for a picky pup"}, {}),
    "/v1/ai/process": ("ai", {"message_id": "m-1", "content": "grain-free kibble"}, {}),
    "/v1/ad-manager/campaigns": ("ad-manager", {}, {"limit": "0"}),
    "/v1/ad-manager/ad-sets": ("ad-manager", {}, {"limit": "0"}),
    "/v1/ad-manager/impressions": (
        "ad-manager",
        {"impression_id": "iid-aaaa-1111"},
        {"impression_id": "bad"},
    ),
    "/ugc/process": ("ugc", {"post_id": "p-1", "message": "kibble for a picky pup"}, {}),
    "/ugc/disable": ("ugc", [{"post_id": "p-1", "ad_id": "ad-dog-food"}], []),
    "/ugc/impression": ("ugc", {"post_id": "p-1", "ad_id": "ad-dog-food"}, {}),
    "/keys/apiKey": ("ugc", None, None),
    "/v1/ad-manager/conversions": ("ad-manager", {"click_id": "clk-valid-0001"}, {}),
}
GB_CLIENT = ("81.2.69.160", 40000)


class Provoker:
    """Makes one partner operation answer a given status, each time with a fresh key (the
    apps allow 2 requests per key per minute, so the third on one key is the 429)."""

    def __init__(self, client, script, monkeypatch) -> None:
        self.client, self.script, self.monkeypatch = client, script, monkeypatch
        self.ctx = client.app.state.ctx
        self.clicks: list[str] = []

    def key(self, product: str) -> str:
        return issue_key(self.client, product)

    def send(self, method, path, payload, key, client=None, **headers):
        client = client or self.client
        headers = {"X-API-Key": key, **headers} if key else headers
        if method == "get":
            return client.get(path, params=payload or {}, headers=headers)
        return client.post(path, json=payload, headers=headers)

    def outage(self, method_name: str) -> None:
        async def down(*args, **kwargs):
            raise StoreUnavailable("injected outage")

        self.monkeypatch.setattr(self.ctx.store, method_name, down)
        self.ctx.keyring._cache.clear()

    def convert(self, status: int, key: str):
        """A conversion of a stored valid click (200), of an invalid one (422), or of a
        click id never stored (404)."""
        from edge.store import Click

        n = len(self.clicks)
        click_id = f"clk-{status}-{n:04d}"
        self.clicks.append(click_id)
        if status != 404:
            reason = None if status == 200 else "duplicate"
            click = Click(click_id, f"tok:t{n}", "url", "production", "ad-dog-food",
                          "cmp-happy-hound", self.ctx.clock(), invalid_reason=reason)  # fmt: skip
            self.client.portal.call(ledger.record_click, self.ctx.store, click)
        path = "/v1/ad-manager/conversions"
        return self.send("post", path, {"click_id": click_id}, key)

    def __call__(self, method: str, path: str, status: int):
        product, valid, invalid = PARTNER[path]
        key = self.key(product)
        send = self.send
        if path == "/v1/ad-manager/conversions" and status in (200, 404, 422):
            return self.convert(status, key)
        if status == 200:
            return send(method, path, valid, key)
        if path == "/ugc/impression" and status == 422:  # an Idempotency-Key reused
            send(method, path, valid, key, **{"Idempotency-Key": "k-1"})
            other = {**valid, "post_id": "p-2"}
            return send(method, path, other, key, **{"Idempotency-Key": "k-1"})
        if status in (400, 422):
            return send(method, path, invalid, key)
        if status == 401:
            return send(method, path, valid, None)
        if status == 403:
            abroad = TestClient(self.client.app, client=GB_CLIENT, raise_server_exceptions=False)
            return send(method, path, valid, key, client=abroad)
        if status == 409:
            send(method, path, valid, key)
            return send(method, path, valid, key)  # the key is a secondary now
        if status == 413:
            return send(method, path, {"post_id": "p", "message": "x" * 2000}, key)
        if status == 415:
            return self.client.post(
                path, content=b"{}", headers={"X-API-Key": key, "Content-Type": "text/plain"}
            )
        if status == 429:
            for _ in range(2):
                send(method, path, valid, key)
            return send(method, path, valid, key)
        if status == 502:
            if path in ("/v1/ugc/process", "/ugc/v1/process", "/v1/ai/process", "/ugc/process"):
                self.script.error = RuntimeError("matcher down")
            elif path == "/keys/apiKey":
                self.outage("rotate_key")
            else:
                self.outage("key_by_lookup")
            return send(method, path, valid, key)
        if status == 503:
            outages = {"/ugc/disable": "disable_ads", "/v1/ad-manager/conversions": "clicks_by_id"}
            self.outage(outages.get(path, "save_impression"))
            return send(method, path, valid, key)
        raise AssertionError(f"no way to provoke {status} on {method} {path}: add one")


OPERATIONS = [
    *(
        ("production+legacy", method, path)
        for path, method in [
            ("/v1/ugc/process", "post"),
            ("/v1/ai/process", "post"),
            ("/v1/ad-manager/campaigns", "get"),
            ("/v1/ad-manager/ad-sets", "get"),
            ("/v1/ad-manager/impressions", "get"),
            ("/v1/ad-manager/conversions", "post"),
            ("/ugc/process", "post"),
            ("/ugc/disable", "post"),
            ("/ugc/impression", "post"),
            ("/keys/apiKey", "get"),
        ]
    ),
    *(
        ("sandbox+legacy", method, path)
        for path, method in [
            ("/ugc/v1/process", "post"),
            ("/v1/ugc/process", "post"),
            ("/v1/ad-manager/campaigns", "get"),
            ("/v1/ad-manager/ad-sets", "get"),
            ("/v1/ad-manager/impressions", "get"),
            ("/ugc/process", "post"),
            ("/ugc/disable", "post"),
            ("/ugc/impression", "post"),
            ("/keys/apiKey", "get"),
        ]
    ),
]


@pytest.fixture(scope="module")
def test_catalogue():
    return load_catalogue(CATALOGUE)


@pytest.mark.parametrize("config", ["production+legacy", "sandbox+legacy"])
def test_every_keyed_operation_is_provoked_below(make_client, config):
    doc = make_client(**CONFIGS[config]).get("/openapi.json").json()
    keyed = {
        (config, method, path)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if op.get("security") == [{"ApiKey": []}]
    }
    assert keyed == {op for op in OPERATIONS if op[0] == config}


@pytest.mark.parametrize(("config", "method", "path"), OPERATIONS)
def test_each_documented_partner_status_is_produced(
    make_client, monkeypatch, test_catalogue, config, method, path
):
    script = Script(test_catalogue)
    client = make_client(
        **CONFIGS[config],
        max_body_bytes=1024,
        matcher=script,
        **{f"rate_limit_{p}": RateLimit(2, 60.0) for p in ("ugc", "ai", "ad_manager")},
    )
    doc = client.get("/openapi.json").json()
    statuses = sorted(
        int(code) for code in doc["paths"][path][method]["responses"] if code != "default"
    )
    provoke = Provoker(client, script, monkeypatch)
    for status in statuses:
        r = provoke(method, path, status)
        assert r.status_code == status, f"{method} {path} wanted {status}: {r.text}"
        monkeypatch.undo()  # end any injected outage
        script.error = None
        client.app.state.ctx.keyring._cache.clear()
