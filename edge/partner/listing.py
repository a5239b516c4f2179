"""The Ad Manager's view of a catalogue: campaigns and ad sets as id-sorted dicts."""

from __future__ import annotations

from typing import Any

from matcher.catalogue import Catalogue


class Listing:
    """The catalogue's campaigns and ad sets as sorted dicts, built once per catalogue
    (``as_dict`` of a large catalogue is too slow to repeat on every page)."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.campaigns = sorted((c.as_dict() for c in catalogue.campaigns), key=_id)
        self.ad_sets = sorted(
            ({"campaign_id": c["id"], **s} for c in self.campaigns for s in c["ad_sets"]),
            key=_id,
        )
        self.campaign_ids = [c["id"] for c in self.campaigns]
        self.ad_set_ids = [s["id"] for s in self.ad_sets]


def _id(item: dict[str, Any]) -> str:
    return str(item["id"])
