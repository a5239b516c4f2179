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
above the relevance floor, so no Python-level gate runs per ad of the catalogue. The engine
reads them through ``candidates`` instead, which rescores them in blocks as it reads: a
decision usually settles after a few dozen rows, and the hundreds of rows the scan kept
are then never read from the vector cache.

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
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

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
RESCORE_FIRST = 32  # rows rescored first; the rest in one step if the caller reads on


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


def approx_scores(
    codes: np.ndarray, scales: np.ndarray, query: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """int8 scores of every row of ``codes`` (a block at a time: no full float32 copy),
    written into ``out`` when given."""
    if out is None:
        out = np.empty(len(codes), dtype=np.float32)
    wide = _scan_buffer(codes.shape[1])
    for a in range(0, len(codes), SCAN_BLOCK):
        block = codes[a : a + SCAN_BLOCK]
        rows = wide[: len(block)]
        rows[...] = block  # widened in place: no fresh float32 block per step
        np.matmul(rows, query, out=out[a : a + len(block)])
    out *= scales
    return out


_scan_buffers = threading.local()


def _scan_buffer(dim: int) -> np.ndarray:
    """This thread's (SCAN_BLOCK, dim) float32 block that the scan widens its codes into.

    A fresh block per step (768 KiB at 384 dims) is served from the top of the C heap and
    handed back to the system when freed (glibc trims a free top larger than 128 KiB), so
    each step faulted its pages in again: ~3,000 page faults and ~2 ms per 10k-ad scan,
    depending on what the heap held before. One block per thread is faulted in once."""
    buf: np.ndarray | None = getattr(_scan_buffers, "block", None)
    if buf is None or buf.shape[1] != dim:
        buf = np.empty((SCAN_BLOCK, dim), dtype=np.float32)
        _scan_buffers.block = buf
    return buf


class Int8Rows:
    """Rows held as int8 codes for approximate dot products with a few float queries at a
    time, computed by onnxruntime's integer matrix product (``MatMulInteger``: uint8
    queries by int8 rows, exact int32 sums), which packs the rows once for its int8 kernels:
    six queries against 2,568 rows of 384 dims took ~26 us against ~410 us for the float32
    product in numpy here. ``scores`` gives each query's approximate products and a bound
    on their error, so callers rescore the few rows that may matter exactly.
    """

    def __init__(self, codes: np.ndarray, scales: np.ndarray, max_l1: float) -> None:
        """``codes`` and ``scales`` as ``quantise`` gives them; ``max_l1``: the largest sum
        of absolute values of a row they were made from."""
        n, self.dim = codes.shape
        self.scales = scales
        self._max_scale = float(scales.max()) if n else 0.0
        self.max_l1 = max_l1
        self._session = _matmul_integer(np.ascontiguousarray(codes.T))

    @classmethod
    def of(cls, vectors: np.ndarray) -> Int8Rows:
        vectors = np.asarray(vectors, dtype=np.float32)
        codes, scales = quantise(vectors)
        return cls(codes, scales, float(np.abs(vectors).sum(axis=1).max()) if len(vectors) else 0.0)

    @staticmethod
    def query_step(query: np.ndarray) -> float:
        """The rounding step of a query's codes (its largest magnitude / 127; 0 for zero)."""
        return float(np.abs(query).max()) / 127.0 if query.size else 0.0

    def scores(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """((q, n) approximate products of each query with every row, (q,) bounds): each
        exact float product lies within its query's bound of the approximate one."""
        q = np.asarray(queries, dtype=np.float32)
        peak = np.abs(q).max(axis=1) if self.dim else np.zeros(len(q), np.float32)
        step = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        codes = (np.rint(q / step[:, None]) + 128.0).astype(np.uint8)  # zero point 128
        (sums,) = self._session.run(None, {"a": codes})
        approx: np.ndarray = sums.astype(np.float32) * step[:, None] * self.scales
        # x.r - (sx cx).(sr cr) = x.(r - sr cr) + (x - sx cx).(sr cr): each rounding error
        # is at most half its step (none for a zero query), and |sr cr| sums to at most
        # |r|_1 + dim * sr / 2.
        rows_half = self._max_scale / 2
        bound = (
            rows_half * np.abs(q).sum(axis=1)
            + np.where(peak > 0, step / 2, 0.0) * (self.max_l1 + self.dim * rows_half)
            + 1e-5  # float32 rounding of the products above
        ).astype(np.float32)
        return approx, bound


def _matmul_integer(rows_t: np.ndarray) -> Any:
    """An onnxruntime session computing ``(a - 128) @ rows_t`` in int32 for a uint8 input
    ``a`` of shape (q, rows_t.shape[0]); ``rows_t`` (int8) is a constant of the graph, so the
    session packs it once. One thread, no memory arena (it runs on the caller's thread)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(
        _matmul_integer_model(rows_t), sess_options=options, providers=["CPUExecutionProvider"]
    )


# The graph is written as protobuf bytes here, not with the ``onnx`` package, which costs
# ~11 MiB and ~0.15 s to import (``matcher.model_graph`` imports it only on a first start).
_ONNX_INT8, _ONNX_UINT8, _ONNX_INT32 = 3, 2, 6  # TensorProto.DataType


def _matmul_integer_model(rows_t: np.ndarray) -> bytes:
    dim, n = rows_t.shape

    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            byte, v = v & 0x7F, v >> 7
            out.append(byte | (0x80 if v else 0))
            if not v:
                return bytes(out)

    def field(number: int, payload: bytes | str | int) -> bytes:
        if isinstance(payload, int):
            return varint(number << 3) + varint(payload)
        raw = payload.encode() if isinstance(payload, str) else payload
        return varint(number << 3 | 2) + varint(len(raw)) + raw

    def value_info(name: str, elem: int, dims: Sequence[int | str]) -> bytes:
        shape = b"".join(field(1, field(2, d) if isinstance(d, str) else field(1, d)) for d in dims)
        return field(1, name) + field(2, field(1, field(1, elem) + field(2, shape)))

    def tensor(name: str, elem: int, array: np.ndarray) -> bytes:
        dims = b"".join(field(1, int(d)) for d in array.shape)
        return dims + field(2, elem) + field(8, name) + field(9, array.tobytes())

    node = field(1, "a") + field(1, "rows") + field(1, "zero") + field(2, "y")
    node += field(4, "MatMulInteger")
    graph = field(1, node) + field(2, "int8_rows")
    graph += field(5, tensor("rows", _ONNX_INT8, np.ascontiguousarray(rows_t, dtype=np.int8)))
    graph += field(5, tensor("zero", _ONNX_UINT8, np.array(128, dtype=np.uint8)))
    graph += field(11, value_info("a", _ONNX_UINT8, ["q", dim]))
    graph += field(12, value_info("y", _ONNX_INT32, ["q", n]))
    opset = field(2, 13)
    return field(1, 8) + field(7, graph) + field(8, opset)


class VectorIndex:
    """Maximum-inner-product search: an int8 scan, then exact rescoring of what it keeps.

    ``matrix`` is the exact (n, dim) float32 matrix in catalogue order, a read-only memory
    map when it came from the cache file.
    """

    kind = "exact"
    _int8: Int8Rows | None = None  # the scan's integer product (the IVF index scans lists)
    _max_l2 = 1.0

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
        l1 = l2 = 0.0
        for a in range(0, len(self.matrix), QUANT_BLOCK):
            block = np.asarray(self.matrix[a : a + QUANT_BLOCK], dtype=np.float32)
            l1 = max(l1, float(np.abs(block).sum(axis=1).max()))
            l2 = max(l2, float(np.linalg.norm(block, axis=1).max()))
        self._max_l2 = l2
        # The scan: the query's int8 codes by the rows' in onnxruntime's integer product
        # (~0.3 ms for 10k rows right after a forward pass, against ~1.1 ms widening the
        # codes to float32 in numpy); its own copy of the codes, packed for its kernels.
        self._int8 = Int8Rows(self.codes, self.scales, l1)

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
        deviations of the rounding error, never more than its worst case. The error is the
        rows' rounding and, where the scan codes the query too (``Int8Rows``), the query's:
        each component off by at most half its step, independently."""
        step = Int8Rows.query_step(query) if self._int8 is not None else 0.0
        worst = self._max_scale / 2 * float(np.abs(query).sum())
        worst += step / 2 * (self._max_l1_codes() if step else 0.0)
        sigma = math.hypot(self._max_scale, step * self._max_l2) / math.sqrt(12)
        return min(worst, RESCORE_SIGMAS * sigma) + 1e-6

    def _max_l1_codes(self) -> float:
        # |sr cr|_1 of a row is at most its own |r|_1 plus dim * sr / 2.
        assert self._int8 is not None
        return self._int8.max_l1 + self.dim * self._max_scale / 2

    def search(
        self, query: np.ndarray, live: np.ndarray, floor: float, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosines) of live ads with cosine >= floor, best first, at most ``k``."""
        return self.candidates(query, live, floor, k).arrays()

    def candidates(self, query: np.ndarray, live: np.ndarray, floor: float, k: int) -> Candidates:
        """What ``search`` returns, rescored only as far as the caller iterates."""
        q = query.astype(np.float32, copy=False)
        rows, approx = self.scan(q)
        return self.shortlist(rows, approx, q, live, floor, k)

    def scan(self, query: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """(catalogue rows, int8 scores) of the rows scanned; rows None: every row, in
        catalogue order."""
        assert self._int8 is not None
        approx, _ = self._int8.scores(query[None, :])
        return None, approx[0]

    def shortlist(
        self,
        rows: np.ndarray | None,
        approx: np.ndarray,
        query: np.ndarray,
        live: np.ndarray,
        floor: float,
        k: int,
    ) -> Candidates:
        """Keep the live rows whose exact score may reach the answer, best int8 score first
        (``rows`` None: ``approx`` is every row's, in catalogue order)."""
        eps = self.margin(query)
        keep = np.flatnonzero(approx >= floor - eps)  # the floor first: few rows pass it
        chosen = keep if rows is None else rows[keep]
        alive = live[chosen]
        keep, chosen = keep[alive], chosen[alive]
        if len(keep) > k:
            # The k-th best int8 score is about eps above the k-th best exact one at most,
            # and a row of the exact top k about eps below its int8 score at most.
            scores = approx[keep]
            kth = np.partition(scores, len(keep) - k)[len(keep) - k]
            near = np.flatnonzero(scores >= kth - 2 * eps)
            cap = 2 * k + 32
            if len(near) > cap:
                near = near[np.argpartition(scores[near], len(near) - cap)[len(near) - cap :]]
            keep, chosen = keep[near], chosen[near]
        scores = approx[keep]
        order = np.argsort(-scores, kind="stable")
        return Candidates(self, chosen[order], scores[order], query, eps, floor, k)


class Candidates:
    """The live rows above the floor, best exact cosine first, at most ``k``, scored exactly
    only as far as they are read.

    Rows come in int8-score order and are rescored in two steps: the first
    ``RESCORE_FIRST``, then, if the caller reads on, all the rest at once (a caller that
    reads past the first few usually reads most, every candidate geo-targeted elsewhere
    say, and more small steps cost more than one large one). A rescored row is given out
    once its exact cosine is at least the next unrescored row's int8 score plus the
    rescoring margin: no row not yet rescored can score above it. A caller that stops after
    the first few (the engine stops once the response cannot change) reads a few dozen rows
    from the vector cache instead of every row the scan kept. Iterating to the end gives
    exactly what rescoring all of them and sorting would; equal cosines come in ascending
    row order.
    """

    def __init__(
        self,
        index: VectorIndex,
        rows: np.ndarray,
        approx: np.ndarray,
        query: np.ndarray,
        eps: float,
        floor: float,
        k: int,
    ) -> None:
        self._index = index
        self._rows = rows  # best int8 score first
        self._approx = approx
        self._query = query
        self._eps = eps
        self._floor = floor
        self._k = k
        self.given = 0  # rows given out so far
        self.exhausted = False  # True once every row above the floor (at most k) was given
        self.rescored = 0  # rows scored exactly so far

    def __iter__(self) -> Iterator[tuple[int, float]]:
        self.given = self.rescored = 0
        self.exhausted = False
        rows, approx, floor = self._rows, self._approx, self._floor
        n, step, pos = len(rows), RESCORE_FIRST, 0
        # Rescored rows not given out yet, and their exact cosines.
        waiting = np.empty(0, dtype=rows.dtype)
        cosines = np.empty(0, dtype=np.float32)
        while self.given < self._k and (pos < n or len(waiting)):
            if pos < n:
                block = np.sort(rows[pos : pos + step])  # ascending: sequential page reads
                waiting = np.concatenate([waiting, block])
                cosines = np.concatenate([cosines, self._index.exact_rows(block) @ self._query])
                self.rescored += len(block)
                pos += step
                step = n  # then the rest at once: a caller that reads on reads most
            # No row left unrescored can score above its int8 score plus the margin.
            ready = cosines >= (float(approx[pos]) + self._eps if pos < n else -math.inf)
            order = np.lexsort((waiting[ready], -cosines[ready]))  # best first, then by row
            out_rows, out_cosines = waiting[ready][order], cosines[ready][order]
            waiting, cosines = waiting[~ready], cosines[~ready]
            for row, cosine in zip(out_rows.tolist(), out_cosines.tolist(), strict=True):
                if cosine < floor or self.given == self._k:
                    # Under the floor: so is every row not given out (all score lower).
                    self.exhausted = True
                    return
                self.given += 1
                yield row, cosine
        self.exhausted = True

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every row and cosine, best first (reads what iteration has not yet)."""
        got = list(self)
        return (
            np.array([r for r, _ in got], dtype=np.intp),
            np.array([c for _, c in got], dtype=np.float32),
        )


def release_pages(matrix: np.ndarray) -> None:
    """Drop this process's mappings of a read-only memory map's pages (no-op otherwise)."""
    mapped = getattr(matrix, "_mmap", None)
    if isinstance(mapped, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)


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
