"""Data-driven match cases: one JSON file per scenario in tests/data/match_cases/.

Each file has a ``description``, a ``catalogue`` (the catalogue file format), the clock (``now``),
optional ``spend`` per campaign and seeded ``state`` (disables), and ``steps``: requests run
in order against one in-memory state, each with its ``expected`` result and an optional
``advance_seconds`` before it. ``expected`` may give ``outcome``, ``reason``, ``ads`` (ids in
order), ``retry_after_seconds``, ``gates`` (ad id -> the gate named in the explanation),
``ad_count`` and ``campaigns_unique``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from matcher import Matcher, MemoryState
from matcher.catalogue import parse_catalogue, parse_timestamp
from matcher.index import ad_text
from matcher.types import GeoSignal, MatchRequest

CASE_DIR = Path(__file__).parents[1] / "data" / "match_cases"
CASES = sorted(CASE_DIR.glob("*.json"))


def build_matcher(shared, catalogue_doc: dict) -> Matcher:
    """A matcher over the case's own catalogue, reusing the session's model and gazetteer."""
    catalogue = parse_catalogue(json.dumps(catalogue_doc))
    vectors = shared.embedder.embed([ad_text(p.ad) for p in catalogue.placements])
    return Matcher(
        catalogue, shared.embedder, vectors, gazetteer=shared.gazetteer, safety=shared.safety
    )


def to_request(raw: dict) -> MatchRequest:
    raw = dict(raw, explain=True)
    if raw.get("geo") is not None:
        raw["geo"] = GeoSignal(**raw["geo"])
    if raw.get("created_at") is not None:
        raw["created_at"] = parse_timestamp(raw["created_at"])
    return MatchRequest(**raw)


def check(expected: dict, result, where: str) -> None:
    ads = [s.placement.ad.id for s in result.ads]
    assert result.outcome == expected["outcome"], (where, result.reason, ads)
    if "reason" in expected:
        assert result.reason == expected["reason"], where
    if "ads" in expected:
        assert ads == expected["ads"], (where, result.explanation and result.explanation["ads"])
    if "retry_after_seconds" in expected:
        assert result.retry_after_seconds == expected["retry_after_seconds"], where
    if "ad_count" in expected:
        assert len(ads) == expected["ad_count"], (where, ads)
    if expected.get("campaigns_unique"):
        camps = [s.placement.campaign.id for s in result.ads]
        assert len(camps) == len(set(camps)), (where, camps)
    gates = {a["ad_id"]: a["gate"] for a in (result.explanation or {}).get("ads", [])}
    for ad_id, gate in expected.get("gates", {}).items():
        assert gates.get(ad_id) == gate, (where, ad_id, gates)


def run_case(shared, case: dict) -> None:
    matcher = build_matcher(shared, case["catalogue"])
    state = MemoryState()
    for thread_id, ad_id in case.get("state", {}).get("disabled", []):
        state.disabled[thread_id].add(ad_id)
    now = parse_timestamp(case["now"])
    spend = case.get("spend", {})

    async def steps() -> None:
        nonlocal now
        for i, step in enumerate(case["steps"]):
            now += step.get("advance_seconds", 0)
            result = await matcher.match(to_request(step["request"]), state, now, spend)
            check(step["expected"], result, f"step {i}")

    try:
        asyncio.run(steps())
    finally:
        matcher.close()


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(shared_matcher, path: Path) -> None:
    case = json.loads(path.read_text())
    assert case["description"], "every case says what it shows"
    run_case(shared_matcher, case)


def test_there_are_cases_for_every_gate() -> None:
    names = {p.stem for p in CASES}
    assert len(names) >= 20
    gates = set()
    for p in CASES:
        for step in json.loads(p.read_text())["steps"]:
            gates |= set(step["expected"].get("gates", {}).values())
            gates.add(step["expected"].get("reason"))
    assert {"status_paused", "expired", "not_started", "product_not_ugc", "geo"} <= gates
    assert {"budget_exhausted", "disabled_in_thread", "frequency_capped", "unsafe"} <= gates
