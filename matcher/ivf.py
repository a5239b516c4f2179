"""An inverted-file (IVF) index for large catalogues, in numpy alone.

Above ~50k ads a full scan reads every row per query and costs more than the embedding
forward pass itself. IVF clusters the ad vectors with spherical k-means (``nlist`` ~ 2 *
sqrt(n) centroids), stores the int8 codes cluster by cluster in one contiguous matrix
(``codes`` is in cluster order here; ``perm`` maps back; the exact ``matrix`` stays in
catalogue order), and at query time scans only the ``nprobe`` clusters whose centroids are
nearest the query, then rescores what the scan keeps exactly, as the exact index does.
Scores it returns are exact; what it can miss is a relevant ad in an unprobed cluster,
which ``tests/matcher/test_index.py`` measures (recall of the above-floor candidates
against exact search).

Chosen over an HNSW library: no new dependency, a build of a few seconds instead of
25-85 s, no extra memory beyond a permutation, and recall that is tunable by
``nprobe`` alone.
"""

from __future__ import annotations

import math

import numpy as np

from matcher.embeddings import normalise
from matcher.index import QUANT_BLOCK, VectorIndex, approx_scores, quantise

KMEANS_SAMPLE = 16_384
KMEANS_ITERATIONS = 8
PROBE_SHARE = 0.08  # scan about this share of the clusters (at least MIN_PROBE)
MIN_PROBE = 8


class IVFIndex(VectorIndex):
    kind = "ivf"

    def __init__(self, vectors: np.ndarray, *, nlist: int | None = None, seed: int = 0) -> None:
        n = len(vectors)
        self.nlist = nlist or max(1, min(n, int(2 * math.sqrt(n))))
        self.nprobe = min(self.nlist, max(MIN_PROBE, int(self.nlist * PROBE_SHARE)))
        self._seed = seed
        super().__init__(vectors)

    def _build(self) -> None:
        self.centroids = _spherical_kmeans(self.matrix, self.nlist, self._seed)
        assign = _assign(self.matrix, self.centroids)
        order = np.argsort(assign, kind="stable")
        self.perm = order.astype(np.intp)  # clustered position -> original row
        codes, scales = quantise(self.matrix)
        # Only the clustered codes are kept (a quarter of the float32 matrix).
        self.codes, self.scales = codes[order], scales[order]
        del codes, scales
        self._max_scale = float(self.scales.max()) if len(self.scales) else 0.0
        counts = np.bincount(assign, minlength=self.nlist)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.intp)

    def scan(self, query: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """The int8 scores of the ``nprobe`` clusters nearest the query, nearest first,
        each cluster's rows a slice of the clustered codes, written into one array."""
        near = np.argpartition(-(self.centroids @ query), self.nprobe - 1)[: self.nprobe]
        starts, ends = self.offsets[near], self.offsets[near + 1]
        sizes = ends - starts
        total = int(sizes.sum())
        approx = np.empty(total, dtype=np.float32)
        at = 0
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            codes, scales = self.codes[start:end], self.scales[start:end]
            approx_scores(codes, scales, query, out=approx[at : at + end - start])
            at += end - start
        # Clustered positions of the same rows: each cluster's start, then one by one.
        positions = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(total)
        return self.perm[positions], approx


def _assign(x: np.ndarray, centroids: np.ndarray, step: int = QUANT_BLOCK) -> np.ndarray:
    out = np.empty(len(x), dtype=np.intp)
    for start in range(0, len(x), step):
        block = np.asarray(x[start : start + step], dtype=np.float32)
        out[start : start + step] = np.argmax(block @ centroids.T, axis=1)
    return out


def _spherical_kmeans(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(x), size=min(len(x), KMEANS_SAMPLE), replace=False)
    sample = np.asarray(x[picks], dtype=np.float32)
    centroids = sample[rng.choice(len(sample), size=k, replace=False)].copy()
    for _ in range(KMEANS_ITERATIONS):
        assign = _assign(sample, centroids)
        sums = np.zeros_like(centroids)
        np.add.at(sums, assign, sample)
        empty = np.bincount(assign, minlength=k) == 0
        sums[empty] = sample[rng.choice(len(sample), size=int(empty.sum()))]  # reseed
        centroids = normalise(sums)
    return centroids
