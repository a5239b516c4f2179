"""Vector search: exact, IVF (recall against exact), the choice between them, the disk cache."""

from __future__ import annotations

import numpy as np

from matcher.embeddings import normalise
from matcher.index import (
    SCAN_BLOCK,
    VectorIndex,
    approx_scores,
    build_index,
    cache_path,
    load_or_embed,
    quantise,
)
from matcher.ivf import IVFIndex


def clustered(n: int, dim: int = 64, centres: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = normalise(rng.standard_normal((centres, dim)).astype(np.float32))
    noise = rng.standard_normal((n, dim)).astype(np.float32) * 0.6 / np.sqrt(dim)
    return normalise(base[np.arange(n) % centres] + noise)


def test_exact_search_returns_live_rows_above_the_floor_best_first():
    vectors = normalise(np.eye(4, dtype=np.float32) + 0.1)
    index = VectorIndex(vectors)
    live = np.array([True, True, False, True])
    rows, scores = index.search(vectors[2], live, floor=0.0, k=10)
    assert 2 not in rows.tolist()
    assert list(scores) == sorted(scores, reverse=True)
    rows, _ = index.search(vectors[0], np.ones(4, bool), floor=0.99, k=10)
    assert rows.tolist() == [0]
    rows, _ = index.search(vectors[0], np.ones(4, bool), floor=-1.0, k=2)
    assert len(rows) == 2


def test_ivf_recall_against_exact():
    vectors = clustered(6000)
    exact, ivf = VectorIndex(vectors), IVFIndex(vectors)
    assert ivf.nprobe < ivf.nlist  # it really scans a subset
    rng = np.random.default_rng(1)
    queries = normalise(vectors[rng.choice(len(vectors), 50)] + 0.05)
    live = np.ones(len(vectors), bool)
    recalls = []
    for q in queries:
        want, _ = exact.search(q, live, 0.3, 10)
        got, got_scores = ivf.search(q, live, 0.3, 10)
        assert np.allclose(got_scores, vectors[got] @ q, atol=1e-5)  # scores are exact
        recalls.append(len(set(want) & set(got)) / max(1, len(want)))
    assert np.mean(recalls) >= 0.95


def test_build_index_switches_at_the_threshold():
    vectors = clustered(600)
    assert build_index(vectors, ivf_min_rows=1000).kind == "exact"
    assert build_index(vectors, ivf_min_rows=500).kind == "ivf"


def test_vector_cache_is_reused_and_keyed(tmp_path):
    calls = []

    def embed(texts):
        calls.append(len(texts))
        return normalise(np.random.default_rng(len(calls)).standard_normal((len(texts), 8)))

    f = cache_path(tmp_path, "cat-hash", "model-a")
    first, hit1 = load_or_embed(["a", "b"], embed, 8, f)
    second, hit2 = load_or_embed(["a", "b"], embed, 8, f)
    assert (hit1, hit2) == (False, True) and calls == [2]
    assert np.array_equal(first, second)
    assert cache_path(tmp_path, "cat-hash", "model-b") != f
    assert cache_path(tmp_path, "other", "model-a") != f
    # A cache of the wrong shape is ignored, not trusted.
    _, hit3 = load_or_embed(["a", "b", "c"], embed, 8, f)
    assert hit3 is False


def test_ivf_full_scores_are_in_catalogue_order():
    vectors = clustered(3000)
    q = vectors[17]
    assert np.allclose(IVFIndex(vectors).scores(q), vectors @ q, atol=1e-5)


def float32_search(vectors, q, live, floor, k):
    """The reference: a full float32 scan."""
    scores = vectors @ q
    keep = np.flatnonzero((scores >= floor) & live)
    keep = keep[np.argsort(-scores[keep], kind="stable")][:k]
    return keep, scores[keep]


def test_int8_scan_with_exact_rescoring_equals_a_float32_scan():
    vectors = clustered(5000, dim=384)
    index = VectorIndex(vectors)
    assert index.codes.dtype == np.int8 and index.codes.nbytes * 4 == vectors.nbytes
    rng = np.random.default_rng(3)
    live = rng.random(len(vectors)) > 0.1
    for q in normalise(vectors[rng.choice(len(vectors), 60)] + 0.05):
        for floor, k in ((0.3, 10), (0.6, 256), (-1.0, 5)):
            want_rows, want_scores = float32_search(vectors, q, live, floor, k)
            rows, scores = index.search(q, live, floor, k)
            assert set(rows.tolist()) == set(want_rows.tolist())
            assert np.allclose(scores, want_scores, atol=1e-5)  # exact, not int8, scores


def test_int8_scan_scores_every_row_across_its_blocks():
    vectors = clustered(3 * SCAN_BLOCK + 7, dim=384)  # whole blocks and a short last one
    codes, scales = quantise(vectors)
    q = vectors[5]
    want = (codes.astype(np.float64) @ q.astype(np.float64)) * scales
    got = approx_scores(codes, scales, q)
    assert got.dtype == np.float32 and got.shape == (len(vectors),)
    assert np.allclose(got, want, atol=1e-4)
    assert np.allclose(got, vectors @ q, atol=0.02)  # and near the exact cosines


def test_ivf_recall_at_10_with_int8_codes_matches_float32_ivf():
    """recall@10 against a float32 scan is the IVF's alone: the int8 codes lose nothing."""
    vectors = clustered(6000, dim=384)
    ivf = IVFIndex(vectors)
    live = np.ones(len(vectors), bool)
    rng = np.random.default_rng(4)
    for q in normalise(vectors[rng.choice(len(vectors), 40)] + 0.05):
        # what a float32 scan of the same probed clusters finds
        near = np.argpartition(-(ivf.centroids @ q), ivf.nprobe - 1)[: ivf.nprobe]
        probed = np.concatenate([ivf.perm[ivf.offsets[c] : ivf.offsets[c + 1]] for c in near])
        mask = np.zeros(len(vectors), bool)
        mask[probed] = True
        want, _ = float32_search(vectors, q, mask, 0.3, 10)
        got, _ = ivf.search(q, live, 0.3, 10)
        assert set(got.tolist()) == set(want.tolist())


def test_cached_vectors_are_a_read_only_memory_map(tmp_path):
    def embed(texts):
        return clustered(len(texts), dim=8)

    f = cache_path(tmp_path, "cat-hash", "model-a")
    fresh, _ = load_or_embed(["a", "b", "c"], embed, 8, f)
    again, hit = load_or_embed(["a", "b", "c"], embed, 8, f)
    assert hit and isinstance(fresh, np.memmap) and isinstance(again, np.memmap)
    assert not again.flags.writeable
    index = VectorIndex(again)
    assert index.matrix is again  # not copied into the process
    index.release()  # dropping the mapped pages keeps the data readable
    assert np.array_equal(index.matrix, embed(["a", "b", "c"]))
    # rescoring reads rows from the file, not the map: the same numbers
    rows = np.array([0, 2])
    assert np.array_equal(index.exact_rows(rows), embed(["a", "b", "c"])[rows])


def test_candidates_read_partly_are_the_best_of_a_float32_scan_and_rescore_few_rows():
    """The engine stops reading once the response is settled: the rows it reads are the
    float32 scan's best, in its order, and only about as many rows were scored exactly."""
    vectors = clustered(5000, dim=384)
    for index in (VectorIndex(vectors), IVFIndex(vectors)):
        rng = np.random.default_rng(5)
        live = rng.random(len(vectors)) > 0.1
        for q in normalise(vectors[rng.choice(len(vectors), 30)] + 0.05):
            whole_rows, whole_scores = index.search(q, live, 0.3, 256)
            assert np.all(np.diff(whole_scores) <= 0)  # best first across rescored blocks
            found = index.candidates(q, live, 0.3, 256)
            first = [pair for _, pair in zip(range(5), found, strict=False)]
            assert [r for r, _ in first] == whole_rows[:5].tolist()
            assert np.array_equal(np.float32([c for _, c in first]), whole_scores[:5])
            assert not found.exhausted and found.given == 5
            assert found.rescored < len(whole_rows)  # the rest was never read exactly
            if isinstance(index, VectorIndex) and index.kind == "exact":
                want_rows, want_scores = float32_search(vectors, q, live, 0.3, 5)
                assert set(r for r, _ in first) == set(want_rows.tolist())
                assert np.allclose([c for _, c in first], want_scores, atol=1e-5)


def test_candidates_read_to_the_end_are_the_search_and_equal_cosines_come_by_row():
    vectors = clustered(800, dim=384)
    vectors[10] = vectors[700] = vectors[300]  # three ads with the same vector
    index = VectorIndex(vectors)
    live = np.ones(len(vectors), bool)
    found = index.candidates(vectors[300], live, -1.0, 50)
    got = list(found)
    assert found.exhausted and found.given == len(got) == 50
    assert [r for r, _ in got[:3]] == [10, 300, 700]
    rows, scores = index.search(vectors[300], live, -1.0, 50)
    assert rows.tolist() == [r for r, _ in got] and scores.tolist() == [c for _, c in got]
