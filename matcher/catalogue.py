"""The catalogue: loaded, validated, and indexed by ad id and ad number.

The file's shape is checked by ``matcher.catalogue_schema`` (every error with its JSON
path); this module turns a valid file into the ``Catalogue`` the matcher and the edge use.
With no path, the bundled sandbox catalogue (``data/sandbox_catalogue.json``) is the demand.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import orjson

from matcher.catalogue_schema import STATES, normalise_state, parse_timestamp, validate
from matcher.types import AdSet, Campaign, Placement

__all__ = [
    "STATES",
    "Catalogue",
    "CatalogueError",
    "ad_number",
    "load_catalogue",
    "normalise_state",
    "parse_catalogue",
    "parse_timestamp",
    "validate",
]

SANDBOX_CATALOGUE = "sandbox_catalogue.json"
_MAX_AD_NUMBER = 2**53


class CatalogueError(ValueError):
    """The file is not a valid catalogue; ``errors`` lists (json_path, message)."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        lines = [f"{p}: {m}" for p, m in errors[:20]]
        more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
        super().__init__(f"{len(errors)} catalogue error(s):\n" + "\n".join(lines) + more)


def ad_number(ad_id: str) -> int:
    """A stable positive integer < 2**53 for an ad id (the AI product's integer ``ad_id``).

    53 bits so it survives JavaScript's Number; derived from the id, so it is the same in
    every process and every restart without a table.
    """
    return (
        int.from_bytes(hashlib.sha256(ad_id.encode()).digest()[:8], "big") % (_MAX_AD_NUMBER - 1)
        + 1
    )


class Catalogue:
    """The validated catalogue with lookups by ad id and by ad number."""

    def __init__(self, campaigns: Iterable[Campaign], content_hash: str = "") -> None:
        self.campaigns: tuple[Campaign, ...] = tuple(campaigns)
        self.placements: tuple[Placement, ...] = tuple(
            Placement(ad=ad, ad_set=ad_set, campaign=camp)
            for camp in self.campaigns
            for ad_set in camp.ad_sets
            for ad in ad_set.ads
        )
        self._by_id = {p.ad.id: p for p in self.placements}
        self._campaigns = {c.id: c for c in self.campaigns}
        self._by_number = {ad_number(p.ad.id): p for p in self.placements}
        if len(self._by_number) != len(self._by_id):  # 1 in ~10^9 at 100k ads; refuse, never mix
            raise CatalogueError([("$", "two ad ids map to the same ad number; rename one")])
        self.content_hash = content_hash or _hash_campaigns(self.campaigns)

    def __len__(self) -> int:
        return len(self.placements)

    def placement(self, ad_id: str) -> Placement | None:
        return self._by_id.get(ad_id)

    def campaign(self, campaign_id: str) -> Campaign | None:
        return self._campaigns.get(campaign_id)

    def ad_number(self, ad_id: str) -> int:
        return ad_number(ad_id)

    def placement_by_number(self, n: int) -> Placement | None:
        return self._by_number.get(n)

    def ad_sets(self) -> list[AdSet]:
        return [s for c in self.campaigns for s in c.ad_sets]


def _hash_campaigns(campaigns: tuple[Campaign, ...]) -> str:
    doc = {"campaigns": [c.as_dict() for c in campaigns]}
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


def parse_catalogue(raw: bytes | str) -> Catalogue:
    """Parse and validate catalogue JSON text; raise CatalogueError with every problem."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CatalogueError([("$", f"not valid JSON: {exc}")]) from None
    campaigns, errors = validate(data)
    if errors:
        raise CatalogueError(errors)
    return Catalogue(campaigns)


def load_catalogue(path: Path | str | None = None) -> Catalogue:
    """The catalogue at ``path``, or the bundled sandbox catalogue when None."""
    if path is None:
        raw = resources.files("matcher.data").joinpath(SANDBOX_CATALOGUE).read_bytes()
    else:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise CatalogueError([("$", f"cannot read {path}: {exc.strerror}")]) from None
    return parse_catalogue(raw)
