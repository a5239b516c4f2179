"""Ad vectors: int8 codes scanned per query, exact float32 rescoring, and the disk cache.

Vectors are unit length, so a dot product is the cosine. The scan reads int8 codes (one
byte per dimension and a float32 scale per row: a quarter of the float32 matrix), whole
below ``IVF_MIN_ROWS`` ads; above it ``build_index`` returns the inverted-file index of
``matcher.ivf`` (measured in docs/decisions.md). The rows the scan cannot rule out are then
rescored with their exact float32 vectors, so the cosines ``search`` returns are exact and
its rows are those of a float32 scan: a row's int8 score is off by a rounding error of
standard deviation ``scale / sqrt(12)`` for a unit query (~0.0007 here), the scan keeps
every row within ``RESCORE_SIGMAS`` of those deviations of the floor and of the k-th best
score (at most ``2k + 32`` rows), and ``tests/matcher/test_index.py`` checks the rows and
recall@10 against a float32 scan. Either way ``search`` hands the engine only the live rows
above the relevance floor, so no Python-level gate runs per ad of the catalogue.

The cache file is named by the catalogue's content hash and the model id, so a restart with
the same catalogue skips embedding it, and a changed catalogue or model never reuses stale
vectors. It is memory-mapped read-only, not read into the process: the index is built from
the map, then ``release`` unmaps its pages, and rescoring reads the few rows it needs with
``pread``; every worker process of the same catalogue shares the one copy in the page cache
and holds only its int8 codes.
"""

from __future__ import annotations

import hashlib
import logging
import math
import mmap
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


QUANT_BLOCK = 8192  # rows quantised per step: bounds the float32 temporaries
# Rows scanned per step: each step widens its int8 codes to a float32 block and multiplies
# it by the query. 512 rows x 384 dims is 768 KiB, which stays in the core's cache between
# the two; at 8192 rows (12 MiB) both passes went to memory and a 10k-ad scan took twice
# as long (~1.4 ms against ~0.7 ms on one core here).
SCAN_BLOCK = 512
RESCORE_SIGMAS = 8.0  # rescoring margin, in standard deviations of the int8 rounding error


def quantise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, float32 scale per row): ``codes * scale[:, None]`` approximates a row
    within ``scale / 2`` per component."""
    n, dim = vectors.shape
    codes = np.empty((n, dim), dtype=np.int8)
    scales = np.empty(n, dtype=np.float32)
    for a in range(0, n, QUANT_BLOCK):
        block = np.asarray(vectors[a : a + QUANT_BLOCK], dtype=np.float32)
        peak = np.abs(block).max(axis=1) if dim else np.zeros(len(block), np.float32)
        scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        codes[a : a + QUANT_BLOCK] = np.rint(block / scale[:, None]).astype(np.int8)
        scales[a : a + QUANT_BLOCK] = scale
    return codes, scales


def approx_scores(codes: np.ndarray, scales: np.ndarray, query: np.ndarray) -> np.ndarray:
    """int8 scores of every row of ``codes`` (a block at a time: no full float32 copy)."""
    out = np.empty(len(codes), dtype=np.float32)
    for a in range(0, len(codes), SCAN_BLOCK):
        np.matmul(codes[a : a + SCAN_BLOCK].astype(np.float32), query, out=out[a : a + SCAN_BLOCK])
    out *= scales
    return out


class VectorIndex:
    """Maximum-inner-product search: an int8 scan, then exact rescoring of what it keeps.

    ``matrix`` is the exact (n, dim) float32 matrix in catalogue order, a read-only memory
    map when it came from the cache file.
    """

    kind = "exact"

    def __init__(self, vectors: np.ndarray) -> None:
        if vectors.ndim != 2:
            raise ValueError(f"expected a (n, dim) matrix, got shape {vectors.shape}")
        self._file: tuple[int, int] | None = None  # (descriptor, data offset) of the cache file
        if isinstance(vectors, np.memmap) and vectors.dtype == np.float32 and vectors.filename:
            self.matrix: np.ndarray = vectors
            if vectors.flags.c_contiguous:
                fd = os.open(vectors.filename, os.O_RDONLY)
                self._file = (fd, int(vectors.offset))
        else:
            self.matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        self._build()
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_file", None) is not None:
            assert self._file is not None
            os.close(self._file[0])

    def exact_rows(self, rows: np.ndarray) -> np.ndarray:
        """The float32 vectors of ``rows`` (ascending). From a cache file they are read with
        ``pread``, not through the map: the kernel maps whole page-cache folios on a fault,
        so a few hundred scattered rows would make most of the file resident again."""
        if self._file is None or not len(rows):
            return np.asarray(self.matrix[rows])
        fd, offset = self._file
        width = self.dim * 4
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        view = memoryview(out.data).cast("B")
        for i, row in enumerate(rows.tolist()):
            got = os.preadv(fd, [view[i * width : (i + 1) * width]], offset + row * width)
            if got != width:
                raise OSError(f"short read of row {row} from the vector cache")
        return out

    def _build(self) -> None:
        self.codes, self.scales = quantise(self.matrix)
        self._max_scale = float(self.scales.max()) if len(self.scales) else 0.0

    def __len__(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def release(self) -> None:
        """Unmap the exact rows this process touched (they stay in the page cache)."""
        release_pages(self.matrix)

    def scores(self, query: np.ndarray) -> np.ndarray:
        """Exact cosine of every ad with the unit ``query`` vector (explanations use this)."""
        q = query.astype(np.float32, copy=False)
        out = np.empty(len(self), dtype=np.float32)
        for a in range(0, len(self), QUANT_BLOCK):
            out[a : a + QUANT_BLOCK] = np.asarray(self.matrix[a : a + QUANT_BLOCK]) @ q
        self.release()
        return out

    def margin(self, query: np.ndarray) -> float:
        """How far below a cut-off an int8 score is still rescored: RESCORE_SIGMAS standard
        deviations of the rounding error, never more than its worst case."""
        worst = self._max_scale / 2 * float(np.abs(query).sum())
        return min(worst, RESCORE_SIGMAS * self._max_scale / math.sqrt(12)) + 1e-6

    def search(
        self, query: np.ndarray, live: np.ndarray, floor: float, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosines) of live ads with cosine >= floor, best first, at most ``k``."""
        q = query.astype(np.float32, copy=False)
        approx = approx_scores(self.codes, self.scales, q)
        return self.rescore(np.arange(len(approx)), approx, q, live, floor, k)

    def rescore(
        self,
        rows: np.ndarray,
        approx: np.ndarray,
        query: np.ndarray,
        live: np.ndarray,
        floor: float,
        k: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Keep the rows whose exact score may reach the answer, score those exactly."""
        eps = self.margin(query)
        keep = np.flatnonzero((approx >= floor - eps) & live[rows])
        if len(keep) > k:
            # The k-th best int8 score is about eps above the k-th best exact one at most,
            # and a row of the exact top k about eps below its int8 score at most.
            kth = np.partition(approx[keep], len(keep) - k)[len(keep) - k]
            keep = keep[approx[keep] >= kth - 2 * eps]
            cap = 2 * k + 32
            if len(keep) > cap:
                keep = keep[np.argpartition(approx[keep], len(keep) - cap)[len(keep) - cap :]]
        chosen = rows[keep]
        order = np.argsort(chosen, kind="stable")  # ascending rows: sequential page reads
        exact = np.empty(len(chosen), dtype=np.float32)
        exact[order] = self.exact_rows(chosen[order]) @ query
        return top_candidates(chosen, exact, live, floor, k)


def release_pages(matrix: np.ndarray) -> None:
    """Drop this process's mappings of a read-only memory map's pages (no-op otherwise)."""
    mapped = getattr(matrix, "_mmap", None)
    if isinstance(mapped, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)


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
    """(vectors, came_from_cache). ``embed(texts)`` runs only when the cache has no match.

    With a cache file the vectors are its read-only memory map (also right after embedding
    them), so processes of the same catalogue share one copy in the page cache.
    """
    if cache_file is not None and cache_file.exists():
        try:
            vectors = np.load(cache_file, mmap_mode="r", allow_pickle=False)
            if vectors.shape == (len(texts), dim) and vectors.dtype == np.float32:
                return vectors, True
            log.warning("ignoring %s: shape %s does not fit", cache_file, vectors.shape)
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable vector cache %s: %s", cache_file, exc)
    vectors = embed(list(texts)) if texts else np.zeros((0, dim), dtype=np.float32)
    if cache_file is not None and _atomic_save(cache_file, vectors) and len(vectors):
        try:
            return np.load(cache_file, mmap_mode="r", allow_pickle=False), False
        except (OSError, ValueError) as exc:
            log.warning("could not map the vector cache %s: %s", cache_file, exc)
    return vectors, False


def _atomic_save(path: Path, vectors: np.ndarray) -> bool:
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
        return False
    return True


IVF_MIN_ROWS = 50_000


def build_index(vectors: np.ndarray, *, ivf_min_rows: int = IVF_MIN_ROWS) -> VectorIndex:
    """Exact search below ``ivf_min_rows`` ads, the IVF index from there up."""
    if len(vectors) >= ivf_min_rows:
        from matcher.ivf import IVFIndex

        return IVFIndex(vectors)
    return VectorIndex(vectors)
