"""Schemathesis against the OpenAPI document a real ``edge serve`` serves (issue 7).

Every operation of the served document is fuzzed with schema-valid and schema-invalid
requests, carrying a valid key of the product the path belongs to, on a production edge
(earlier-described routes on) and a sandbox edge. Checked on every answer: no 5xx, the
status is documented, the body matches the documented schema, invalid data is refused with
a 4xx, and every 4xx body is the one error shape. New routes are fuzzed as soon as they are
in the document; nothing here lists them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator

import orjson
import pytest
import schemathesis
import schemathesis.generation
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from edge.keys import PRODUCTS, Keyring
from edge.qa import EdgeProcess
from edge.store.sqlite import SQLiteStore

MAX_EXAMPLES = 12  # per operation and generation mode: both edges stay under half a minute
ENVIRONMENTS = {
    "production": {"EDGE_LEGACY_API": "1", "EDGE_ALLOW_PRIVATE_IPS": "1"},
    "sandbox": {},
}
UNLIMITED = {f"EDGE_RATE_LIMIT_{p}": "100000/1s" for p in ("UGC", "AI", "AD_MANAGER")}


async def _issue_keys(db, env: str) -> dict[str, str]:
    store = SQLiteStore(db)
    await store.open()
    try:
        keyring = Keyring(store, time.time, 5)
        return {p: (await keyring.issue(env, p, "fuzz"))[0] for p in PRODUCTS}
    finally:
        await store.close()


def _product_of(path: str) -> str:
    for product in ("ad-manager", "ugc", "ai"):
        if f"/{product}/" in path or path.startswith(f"/{product}"):
            return product
    return "ugc"  # /keys/apiKey: rotates the key it is given; any product's key will do


@pytest.fixture(scope="module", params=list(ENVIRONMENTS))
def fuzzed_edge(request, tmp_path_factory) -> Iterator[tuple[EdgeProcess, dict[str, str]]]:
    env = request.param
    db = tmp_path_factory.mktemp(f"fuzz-{env}") / "edge.db"
    keys = asyncio.run(_issue_keys(db, env))
    with EdgeProcess(db=db, env=env, settings={**ENVIRONMENTS[env], **UNLIMITED}) as edge:
        yield edge, keys


def error_shape(ctx, response, case) -> bool | None:
    """Every 4xx body is ``{"error": {"code", "message", "field"?}}``, except where the
    document says a status answers HTML only: an operator page's sign-in form (its 401)."""
    if not 400 <= response.status_code < 500:
        return None
    documented = case.operation.definition.raw["responses"].get(str(response.status_code), {})
    if set(documented.get("content", {})) == {"text/html"}:
        assert response.headers.get("content-type", [""])[0].startswith("text/html")
        return True
    body = orjson.loads(response.content)
    assert set(body) == {"error"}, f"not the error shape: {body}"
    err = body["error"]
    assert {"code", "message"} <= set(err) <= {"code", "message", "field"}, err
    assert isinstance(err["code"], str) and err["code"], err
    assert isinstance(err["message"], str) and err["message"], err
    return True


def negative_data_refused(ctx, response, case) -> bool | None:
    """Schemathesis's rejection check, with 413 and 431 counted as refusals: a negative
    example can be a body past the edge's size limit, which the edge refuses before reading
    it whole, or a query string past the request line's (a token far over its maxLength)."""
    if response.status_code in (413, 431):
        return True
    return negative_data_rejection(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_refused,
    error_shape,
]


def _fuzz(operation, mode: GenerationMode, key: str) -> str | None:
    """Run the bounded examples of one operation; the first failure, described, or None."""
    try:
        strategy = operation.as_strategy(generation_mode=mode)
    except Exception as exc:  # nothing invalid can be made of an operation without inputs
        if mode is GenerationMode.NEGATIVE:
            return None
        raise AssertionError(f"{operation.label}: no strategy: {exc}") from exc
    failure: list[str] = []
    # Hypothesis is derandomised, but schemathesis also draws from the global `random` and
    # its own module-level Random: seed both per operation so a run does not depend on
    # what ran before it in the session.
    seed = f"{operation.label}:{mode.value}"
    random.seed(seed)
    schemathesis.generation.RANDOM.seed(seed)

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples on every run: a failure is reproducible
        phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded time
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case) -> None:
        if failure:
            return
        try:
            case.call_and_validate(headers={"X-API-Key": key}, checks=CHECKS, timeout=15)
        except (Exception, BaseExceptionGroup) as exc:  # schemathesis: failure groups
            failure.append(f"{operation.label} [{mode.value}]: {exc}\n  {case.as_curl_command()}")

    try:
        run()
    except Unsatisfiable:
        # an operation without inputs (a health check) has no invalid request to make
        if mode is GenerationMode.POSITIVE:
            raise
    return failure[0] if failure else None


@pytest.mark.slow
def test_every_documented_route_survives_fuzzing(fuzzed_edge):
    edge, keys = fuzzed_edge
    schema = schemathesis.openapi.from_url(edge.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 3, [op.label for op in operations]
    failures = []
    for operation in operations:
        key = keys[_product_of(operation.path)]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failure = _fuzz(operation, mode, key)
            if failure:
                failures.append(failure)
    log_tail = "\n".join(edge.output().splitlines()[-60:])
    assert not failures, (
        f"{len(failures)} operations failed:\n"
        + "\n\n".join(failures)
        + f"\n\nlast lines of the edge's log:\n{log_tail}"
    )
