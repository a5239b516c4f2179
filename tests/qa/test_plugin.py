"""expect_viewable_once on its own: one slot's rendered ad, by its impression id, whatever
else the page or the edge holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from edge.qa import BeaconTimeout
from edge.qa.plugin import expect_viewable_once


class Monitor:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._events = events
        self.page_errors: list[str] = []

    def events(self, type: str | None = None, slot_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self._events
            if (type is None or e["type"] == type) and (slot_id is None or e["slot_id"] == slot_id)
        ]


class Edge:
    def __init__(self, records: dict[str, dict[str, Any]]) -> None:
        self.records = records

    def impressions(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {i: self.records[i] for i in ids if i in self.records}


PAGE = [
    {"type": "filled", "slot_id": "top", "ad_id": "ad-shoes"},
    {"type": "filled", "slot_id": "sidebar", "ad_id": "ad-skillet"},
    {"type": "viewable", "slot_id": "top", "ad_id": "ad-shoes", "impression_id": "i-top"},
    {"type": "viewable", "slot_id": "sidebar", "ad_id": "ad-skillet", "impression_id": "i-side"},
]
EDGE = {
    "i-top": {"slot_id": "top", "ad_id": "ad-shoes", "invalid_reason": None},
    "i-side": {"slot_id": "sidebar", "ad_id": "ad-skillet", "invalid_reason": None},
}


@pytest.mark.parametrize("slot", ["top", "sidebar"])
def test_each_slot_of_a_page_with_two_ads_passes_on_its_own(slot: str) -> None:
    event = expect_viewable_once(Monitor(PAGE), slot, beacons=Edge(EDGE), timeout=0.2)
    assert event["recorded"] is EDGE[event["impression_id"]]


def test_a_second_viewable_event_of_the_slot_fails_at_once() -> None:
    again = {**PAGE[2], "impression_id": "i-top-2"}
    with pytest.raises(BeaconTimeout, match="past it"):
        expect_viewable_once(Monitor([*PAGE, again]), "top", timeout=5)


def test_an_impression_the_edge_never_recorded_fails() -> None:
    with pytest.raises(BeaconTimeout, match="the edge to record impression i-top"):
        expect_viewable_once(Monitor(PAGE), "top", beacons=Edge({}), timeout=0.2)


def test_an_impression_recorded_for_another_slot_fails() -> None:
    wrong = {**EDGE, "i-top": {**EDGE["i-top"], "slot_id": "sidebar"}}
    with pytest.raises(AssertionError, match="not"):
        expect_viewable_once(Monitor(PAGE), "top", beacons=Edge(wrong), timeout=0.2)


def test_an_impression_stored_as_invalid_traffic_fails() -> None:
    bot = {**EDGE, "i-top": {**EDGE["i-top"], "invalid_reason": "known_bot"}}
    with pytest.raises(AssertionError, match="invalid traffic"):
        expect_viewable_once(Monitor(PAGE), "top", beacons=Edge(bot), timeout=0.2)
