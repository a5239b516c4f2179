"""The catalogue: loaded, validated, and indexed by ad id and ad number.

The file's shape is checked by ``matcher.catalogue_schema`` (every error with its JSON
path); this module turns a valid file into the ``Catalogue`` the matcher and the edge use.
With no path, the bundled sandbox catalogue (``data/sandbox_catalogue.json``) is the demand.
"""

from __future__ import annotations

import hashlib
import pickle  # nosec B403
import subprocess  # nosec B404
import sys
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import numpy as np
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
# From this size on (about 15k ads) a file is parsed in a child process (_parse_in_child).
CHILD_PARSE_BYTES = 4 * 2**20
_CHILD = "import sys; from matcher.catalogue import child_main; child_main()"


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
        self._campaigns = {c.id: c for c in self.campaigns}
        # Ads are found by their 53-bit number (a hash of the id) in one sorted array, not
        # by two dicts over 100k ids: ~13 MiB of dict tables and int objects at 100k ads.
        numbers = np.fromiter(
            (ad_number(p.ad.id) for p in self.placements), dtype=np.int64, count=len(self)
        )
        order = np.argsort(numbers, kind="stable")
        self._numbers: np.ndarray = numbers[order]
        self._rows: np.ndarray = order.astype(np.int32)
        for i in np.flatnonzero(self._numbers[1:] == self._numbers[:-1]).tolist():
            a, b = (self.placements[int(self._rows[j])].ad.id for j in (i, i + 1))
            if a != b:  # 1 in ~10^9 at 100k ads; refuse, never mix
                raise CatalogueError([("$", "two ad ids map to the same ad number; rename one")])
        self.content_hash = content_hash or _hash_campaigns(self.campaigns)

    def __len__(self) -> int:
        return len(self.placements)

    def placement(self, ad_id: str) -> Placement | None:
        found = self.placement_by_number(ad_number(ad_id))
        return found if found is not None and found.ad.id == ad_id else None

    def campaign(self, campaign_id: str) -> Campaign | None:
        return self._campaigns.get(campaign_id)

    def ad_number(self, ad_id: str) -> int:
        return ad_number(ad_id)

    def placement_by_number(self, n: int) -> Placement | None:
        if not 0 < n < _MAX_AD_NUMBER:
            return None
        # the last of equal numbers: a repeated id (only possible outside a validated file)
        # resolves to its last placement, as a dict by id would
        i = int(np.searchsorted(self._numbers, n, side="right")) - 1
        if i < 0 or int(self._numbers[i]) != n:
            return None
        return self.placements[int(self._rows[i])]

    def ad_sets(self) -> list[AdSet]:
        return [s for c in self.campaigns for s in c.ad_sets]


def _hash_campaigns(campaigns: tuple[Campaign, ...]) -> str:
    """SHA-256 of ``{"campaigns": [...]}`` as sorted-key compact JSON, written one campaign
    at a time so the whole catalogue is never a second time in memory as dicts."""
    h = hashlib.sha256(b'{"campaigns":[')
    for i, c in enumerate(campaigns):
        if i:
            h.update(b",")
        h.update(orjson.dumps(c.as_dict(), option=orjson.OPT_SORT_KEYS))
    h.update(b"]}")
    return h.hexdigest()


def _parse(raw: bytes | str) -> tuple[tuple[Campaign, ...], list[tuple[str, str]], str]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return (), [("$", f"not valid JSON: {exc}")], ""
    campaigns, errors = validate(data)
    del data
    return campaigns, errors, "" if errors else _hash_campaigns(campaigns)


def parse_catalogue(raw: bytes | str) -> Catalogue:
    """Parse and validate catalogue JSON text; raise CatalogueError with every problem."""
    if len(raw) >= CHILD_PARSE_BYTES:
        campaigns, errors, content_hash = _parse_in_child(raw)
    else:
        campaigns, errors, content_hash = _parse(raw)
    if errors:
        raise CatalogueError(errors)
    return Catalogue(campaigns, content_hash)


def _parse_in_child(
    raw: bytes | str,
) -> tuple[tuple[Campaign, ...], list[tuple[str, str]], str]:
    """``_parse`` run by a child interpreter, its result sent back pickled.

    Parsing keeps the whole JSON document, its validated copy and the retained strings in
    the heap at once; freed afterwards, that heap stays mapped, because the strings the
    catalogue keeps are scattered through it (at 100k ads: ~430 MiB at the peak, ~70 MiB
    kept). Unpickled here, the catalogue's objects are allocated one after another and the
    parse's peak is the child's, returned to the system when it exits. Pickle keeps shared
    objects shared (the pooled keywords and CTAs). The bytes come only from this
    interpreter running this module over a pipe, never from outside.
    """
    data = raw.encode() if isinstance(raw, str) else raw
    proc = subprocess.run(  # noqa: S603 - this interpreter, this module, our own pipe
        [sys.executable, "-c", _CHILD], input=data, capture_output=True, check=False
    )
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise CatalogueError([("$", f"the catalogue parser failed: {tail[0]}")])
    result: tuple[tuple[Campaign, ...], list[tuple[str, str]], str] = pickle.loads(  # noqa: S301
        proc.stdout
    )  # nosec B301
    return result


def child_main() -> None:
    """The child of ``_parse_in_child``: catalogue JSON on stdin, the pickled result out."""
    result = _parse(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


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
