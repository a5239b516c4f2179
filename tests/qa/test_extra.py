"""The ``qa`` extra: exact pins, the same ones this repository's own tests run with."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def test_the_qa_extra_brings_the_test_tools_pinned() -> None:
    names = {req.split("==")[0] for req in EXTRAS["qa"]}
    assert names == {"pytest", "playwright", "pytest-playwright"}
    assert all("==" in req for req in EXTRAS["qa"])


def test_the_qa_pins_are_the_dev_pins() -> None:
    assert set(EXTRAS["qa"]) <= set(EXTRAS["dev"])


def test_the_plugin_is_registered_for_pytest() -> None:
    entry = PYPROJECT["project"]["entry-points"]["pytest11"]
    assert entry == {"edge_qa": "edge.qa.plugin"}
