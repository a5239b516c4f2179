"""ARCHITECTURE.md and the migration note match the code they describe."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

import pytest
from starlette.routing import Route

from edge.store import migrations
from tag.demo import PAGE_PATH as DEMO_PATH

ROOT = Path(__file__).parent.parent
PACKAGES = ("edge", "matcher", "tag", "geoip")


def code_map() -> str:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Code map", 1)[1]
    return section.split("```", 2)[1]


def modules() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix == ".py" or (package == "tag" and "/src/" in rel and path.is_file()):
                found.append(rel)
    return found


def test_every_module_is_in_the_code_map():
    listed = set(re.findall(r"[\w./-]+", code_map()))
    # A package counts as listed by its folder ("edge/cli/") or by its __init__.py.
    missing = [
        m
        for m in modules()
        if m not in listed
        and not (m.endswith("/__init__.py") and m[: -len("__init__.py")] in listed)
    ]
    assert not missing, f"modules missing from the ARCHITECTURE.md code map: {missing}"


def test_the_code_map_names_no_module_that_is_gone():
    words = re.findall(r"[\w./-]+\.(?:py|js|j2)\b", code_map())
    named = {w for w in words if w.split("/", 1)[0] in PACKAGES}
    gone = sorted(n for n in named if not (ROOT / n).exists())
    assert not gone, f"the code map names files that do not exist: {gone}"


def test_the_context_section_names_every_field_of_the_context():
    import dataclasses

    from edge.context import Context

    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## The context", 1)[1].split("\n## ", 1)[0]
    missing = [f.name for f in dataclasses.fields(Context) if f"`{f.name}`" not in section]
    assert not missing, f"Context fields missing from ARCHITECTURE.md, The context: {missing}"


def test_the_migration_note_lists_every_migration_file():
    files = [name for name, _sql in migrations.migration_files()]
    assert files, "no migrations found"
    note = migrations.__doc__ or ""
    missing = [name for name in files if f"``{name}``" not in note]
    assert not missing, f"migrations missing from the note in migrations/__init__.py: {missing}"
    numbers = [name.split("_", 1)[0] for name in files]
    assert all(re.fullmatch(r"\d{4}", n) for n in numbers), numbers
    assert len(set(numbers)) == len(numbers), f"two migrations share a number: {files}"


@pytest.mark.parametrize(
    "config", [{"legacy_api": True}, {"env": "sandbox", "legacy_api": True}], ids=str
)
def test_every_endpoint_is_a_module_function_bound_to_the_context(make_client, config):
    # The one handler pattern: `async def name(ctx, request)` at module level, bound with
    # functools.partial(name, ctx). /openapi.json is bound to its prebuilt bytes instead,
    # and the demo page's routes come from tag/demo.py.
    client = make_client(**config)
    ctx = client.app.state.ctx
    checked = 0
    for route in client.app.routes:
        if not isinstance(route, Route) or route.path.startswith(DEMO_PATH):
            continue
        endpoint = route.endpoint
        assert isinstance(endpoint, functools.partial), route.path
        func = endpoint.func
        assert inspect.iscoroutinefunction(func), route.path
        assert func.__qualname__ == func.__name__, f"{route.path}: {func.__qualname__}"
        if route.path == "/openapi.json":
            assert len(endpoint.args) == 1 and isinstance(endpoint.args[0], bytes)
        else:
            assert endpoint.args == (ctx,), route.path
        checked += 1
    assert checked > 10
