"""docs/catalogue.md stays true to the validator: its example is valid, and every field its
tables mark required (or optional) is required (or optional) to the validator."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from matcher.catalogue_schema import validate

DOC = (Path(__file__).parents[2] / "docs" / "catalogue.md").read_text()
EXAMPLE: dict[str, Any] = json.loads(re.findall(r"```json\n(.*?)```", DOC, re.S)[0])

# Where each table's object sits in the example.
SECTIONS = {
    "Campaign": ("campaigns", 0),
    "Ad set": ("campaigns", 0, "ad_sets", 0),
    "Ad": ("campaigns", 0, "ad_sets", 0, "ads", 0),
    "Pixel tracker": ("campaigns", 0, "ad_sets", 0, "ads", 0, "pixel_trackers", 0),
}


def table_rows(section: str) -> list[tuple[str, str]]:
    """(field, required) of the table under the ``## section`` or ``### section`` heading."""
    body = re.split(rf"^#+ {re.escape(section)}\n", DOC, flags=re.M)[1]
    body = re.split(r"^#+ ", body, flags=re.M)[0]
    return re.findall(r"^\| `(\w+)` \| (yes|no) \|", body, flags=re.M)


def test_the_example_is_valid() -> None:
    campaigns, errors = validate(EXAMPLE)
    assert errors == [] and len(campaigns) == 1


def test_the_example_uses_every_documented_field() -> None:
    for section, where in SECTIONS.items():
        node: Any = EXAMPLE
        for step in where:
            node = node[step]
        assert {f for f, _ in table_rows(section)} == set(node), section


@pytest.mark.parametrize(
    ("section", "field", "required"),
    [(s, f, r == "yes") for s in SECTIONS for f, r in table_rows(s)],
)
def test_required_as_documented(section: str, field: str, required: bool) -> None:
    doc = copy.deepcopy(EXAMPLE)
    node: Any = doc
    for step in SECTIONS[section]:
        node = node[step]
    del node[field]
    _, errors = validate(doc)
    missing = [m for _p, m in errors if m == "required field is missing"]
    assert bool(missing) == required, (section, field, errors)


def test_unknown_fields_are_errors_as_documented() -> None:
    doc = copy.deepcopy(EXAMPLE)
    doc["campaigns"][0]["budget"] = 1
    _, errors = validate(doc)
    assert ("$.campaigns[0].budget", "unknown field") in errors
