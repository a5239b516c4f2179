"""Vector search: exact, IVF (recall against exact), the choice between them, the disk cache."""

from __future__ import annotations

import numpy as np

from matcher.embeddings import normalise
from matcher.index import VectorIndex, build_index, cache_path, load_or_embed
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
