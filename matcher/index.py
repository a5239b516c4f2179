"""Ad vectors: one contiguous float32 matrix, exact dot-product search, and its disk cache.

Vectors are unit length, so a dot product is the cosine. Exact search reads the whole
matrix once per query (RECIPES 4: ~0.3 ms at 10k x 384, ~12 ms at 100k), which is right
below ``IVF_MIN_ROWS`` ads; above it ``build_index`` returns the inverted-file index of
``matcher.ivf`` (measured in docs/decisions.md). Either way ``search`` hands the engine only
the live rows above the relevance floor, so no Python-level gate runs per ad of the catalogue.

The cache file is named by the catalogue's content hash and the model id, so a restart with
the same catalogue skips embedding it, and a changed catalogue or model never reuses stale
vectors.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from matcher.types import Ad

log = logging.getLogger("matcher.index")


def ad_text(ad: Ad) -> str:
    """What an ad is embedded from: title, description and keywords (issue 3)."""
    keywords = ", ".join(ad.keywords)
    return f"{ad.title}. {ad.description} {keywords}".strip()


class VectorIndex:
    """Exact maximum-inner-product search over a (n, dim) float32 matrix."""

    kind = "exact"

    def __init__(self, vectors: np.ndarray) -> None:
        if vectors.ndim != 2:
            raise ValueError(f"expected a (n, dim) matrix, got shape {vectors.shape}")
        self.matrix = np.ascontiguousarray(vectors, dtype=np.float32)

    def __len__(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def scores(self, query: np.ndarray) -> np.ndarray:
        """Exact cosine of every ad with the unit ``query`` vector (explanations use this)."""
        return self.matrix @ query.astype(np.float32, copy=False)

    def search(
        self, query: np.ndarray, live: np.ndarray, floor: float, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosines) of live ads with cosine >= floor, best first, at most ``k``."""
        scores = self.scores(query)
        return top_candidates(np.arange(len(scores)), scores, live, floor, k)


def top_candidates(
    rows: np.ndarray, scores: np.ndarray, live: np.ndarray, floor: float, k: int
) -> tuple[np.ndarray, np.ndarray]:
    keep = np.flatnonzero((scores >= floor) & live[rows])
    if len(keep) > k:
        keep = keep[np.argpartition(scores[keep], len(keep) - k)[len(keep) - k :]]
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    return rows[keep], scores[keep]


def cache_path(cache_dir: Path, catalogue_hash: str, model_id: str) -> Path:
    key = hashlib.sha256(f"{catalogue_hash}|{model_id}".encode()).hexdigest()[:32]
    return Path(cache_dir) / f"ad-vectors-{key}.npy"


def load_or_embed(
    texts: Sequence[str],
    embed: Callable[[list[str]], np.ndarray],
    dim: int,
    cache_file: Path | None,
) -> tuple[np.ndarray, bool]:
    """(vectors, came_from_cache). ``embed(texts)`` runs only when the cache has no match."""
    if cache_file is not None and cache_file.exists():
        try:
            vectors = np.load(cache_file, allow_pickle=False)
            if vectors.shape == (len(texts), dim) and vectors.dtype == np.float32:
                return np.ascontiguousarray(vectors), True
            log.warning("ignoring %s: shape %s does not fit", cache_file, vectors.shape)
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable vector cache %s: %s", cache_file, exc)
    vectors = embed(list(texts)) if texts else np.zeros((0, dim), dtype=np.float32)
    if cache_file is not None:
        _atomic_save(cache_file, vectors)
    return vectors, False


def _atomic_save(path: Path, vectors: np.ndarray) -> None:
    # Write beside the target and rename: a reader never sees half a file, and two
    # processes warming the same cache both end with a whole one.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".vectors-", suffix=".npy", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            np.save(f, vectors, allow_pickle=False)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache folder costs a re-embed next start, no more
        log.warning("could not write the vector cache %s: %s", path, exc)


IVF_MIN_ROWS = 50_000


def build_index(vectors: np.ndarray, *, ivf_min_rows: int = IVF_MIN_ROWS) -> VectorIndex:
    """Exact search below ``ivf_min_rows`` ads, the IVF index from there up."""
    if len(vectors) >= ivf_min_rows:
        from matcher.ivf import IVFIndex

        return IVFIndex(vectors)
    return VectorIndex(vectors)
