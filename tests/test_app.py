"""Health routes, path rules and the one error shape."""

import pytest

from tests.conftest import assert_error_shape


@pytest.mark.parametrize("path", ["/v1/ugc/health", "/v1/ai/health", "/dea/health"])
@pytest.mark.parametrize("env", ["production", "sandbox"])
def test_health_needs_no_key(make_client, env, path):
    r = make_client(env=env).get(path)
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["env"] == env


def test_sandbox_ugc_health_path(make_client):
    assert make_client(env="sandbox").get("/ugc/health").status_code == 200


def test_production_has_no_sandbox_health_path(make_client):
    assert_error_shape(make_client().get("/ugc/health"), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/ugc/process"), ("POST", "/ai/process"), ("GET", "/nope"), ("GET", "/v2/ugc/x")],
)
def test_unprefixed_and_unknown_paths_are_404_in_the_error_shape(make_client, method, path):
    err = assert_error_shape(make_client().request(method, path), 404, "not_found")
    assert path in err["message"]


def test_wrong_method_is_405_in_the_error_shape(make_client):
    r = make_client().post("/v1/ugc/health")
    assert_error_shape(r, 405, "method_not_allowed")
    assert "GET" in r.headers["allow"]


def test_unexpected_exception_is_500_without_a_stack_trace(make_client, caplog):
    client = make_client()

    async def boom(request):
        raise RuntimeError("secret internals /home/app/edge.py line 3")

    client.app.add_route("/v1/ugc/boom", boom)
    r = client.get("/v1/ugc/boom")
    err = assert_error_shape(r, 500, "internal_error")
    assert "secret" not in r.text and "Traceback" not in r.text and "line" not in err["message"]
    assert any("secret internals" in str(rec.exc_info) for rec in caplog.records if rec.exc_info)


def test_openapi_document_lists_the_served_routes(make_client):
    doc = make_client(env="sandbox").get("/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    assert {"/v1/ugc/health", "/ugc/health", "/dea/health", "/openapi.json"} <= set(doc["paths"])
    assert doc["components"]["schemas"]["Error"]["required"] == ["error"]


def test_signing_key_is_generated_once_and_kept(make_client, tmp_path):
    first = make_client()
    token = first.app.state.ctx.signer.sign("p", b"m")
    second = make_client()  # same database, a new process would read the same key
    assert second.app.state.ctx.signer.sign("p", b"m") == token


def test_start_up_objects_are_frozen_out_of_the_collector_while_serving(make_client):
    # A full collection then walks only what requests made, not the model and tables.
    import gc

    client = make_client()
    assert gc.get_freeze_count() > 0
    client.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0  # shutdown gives them back (tests start many apps)


def test_trailing_slash_redirect_is_relative_and_ignores_the_host_header(make_client):
    client = make_client()
    r = client.get("/v1/ugc/health/?x=1", headers={"Host": "evil.example"}, follow_redirects=False)
    assert r.status_code == 307
    assert r.headers["location"] == "/v1/ugc/health?x=1"
    r = client.get("//evil.example/", follow_redirects=False)
    assert r.status_code == 404
