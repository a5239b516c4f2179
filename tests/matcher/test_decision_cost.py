"""How the decision's arithmetic is computed: brand safety's products against a plain float64
reading of the same model, and the int8 scan's widening buffer under concurrent threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from matcher.index import SCAN_BLOCK, Int8Rows, VectorIndex, approx_scores, quantise
from matcher.safety import (
    CLASSES,
    DENSE,
    DIM,
    FEATURES,
    KNN_K,
    SafetyClassifier,
    ngram_vector,
)

TEXTS = (
    "Training for my first marathon and my knees ache after every long run.",
    "Any advice on cushioning or pacing before race day?",
    "I don't think anyone would notice if I was gone.",
    "The storm flattened half the town and people are still missing.",
    "Our rescue terrier is so fussy about what goes in his bowl.",
    "ok",
    "",
)


@pytest.fixture(scope="module")
def shipped() -> SafetyClassifier:
    return SafetyClassifier.load()


def _units(n: int, seed: int) -> np.ndarray:
    """n units shaped like ``unit_features`` rows: unit vector, unit peaks, unit inner-layer
    means, n-gram row."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, FEATURES), np.float32)
    for i in range(n):
        for a in range(0, DENSE, DIM):
            v = rng.standard_normal(DIM).astype(np.float32)
            out[i, a : a + DIM] = v / np.linalg.norm(v)
        out[i, DENSE:] = ngram_vector(TEXTS[i % len(TEXTS)])
    return out


def _reference_probabilities(clf: SafetyClassifier, x: np.ndarray) -> np.ndarray:
    """Each model's layers as written, in float64, probabilities averaged."""
    assert clf.models is not None
    total = np.zeros((len(x), len(CLASSES)))
    for layers in clf.models:
        h = x.astype(np.float64)
        for j, (w, b) in enumerate(layers):
            h = h @ w.astype(np.float64) + b
            if j < len(layers) - 1:
                h = np.maximum(h, 0.0)
        e = np.exp(h - h.max(axis=1, keepdims=True))
        total += e / e.sum(axis=1, keepdims=True)
    return total / len(clf.models)


def _reference_margin(harm: np.ndarray, safe: np.ndarray, x: np.ndarray) -> np.ndarray:
    v = x[:, :DIM].astype(np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    near = [
        np.sort(v @ side.astype(np.float64).T, axis=1)[:, -KNN_K:].mean(axis=1)
        for side in (harm, safe)
    ]
    return (near[0] - near[1] + 1.0) / 2.0


def test_probabilities_match_the_layers_read_in_float64(shipped: SafetyClassifier) -> None:
    x = _units(12, seed=1)
    got = shipped.probabilities(x)
    assert got.dtype == np.float32 and got.shape == (12, len(CLASSES))
    assert np.abs(got - _reference_probabilities(shipped, x)).max() < 2e-6


def test_knn_margin_matches_the_nearest_exemplars_read_in_float64(
    shipped: SafetyClassifier,
) -> None:
    assert shipped.exemplars is not None
    harm, safe = shipped.exemplars
    x = _units(9, seed=2)
    got = shipped.knn_margin(x)
    assert got.dtype == np.float32
    assert np.abs(got - _reference_margin(harm, safe, x)).max() < 1e-6
    # A unit that is an exemplar itself finds it at cosine 1.
    on = np.zeros((1, FEATURES), np.float32)
    on[0, :DIM] = harm[0]
    assert np.abs(shipped.knn_margin(on) - _reference_margin(harm, safe, on)).max() < 1e-6


def test_a_units_numbers_do_not_depend_on_the_units_beside_it(shipped: SafetyClassifier) -> None:
    x = _units(7, seed=3)
    x[2, DENSE:] = 0.0  # a unit without any n-gram between two with some
    together_p, together_m = shipped.probabilities(x), shipped.knn_margin(x)
    for i in range(len(x)):
        alone = x[i : i + 1]
        assert np.abs(shipped.probabilities(alone)[0] - together_p[i]).max() < 1e-6
        assert abs(float(shipped.knn_margin(alone)[0] - together_m[i])) < 1e-6


def test_exemplars_keep_their_sides_and_rows() -> None:
    rng = np.random.default_rng(4)
    harm, safe = (rng.standard_normal((n, DIM)).astype(np.float32) for n in (5, 8))
    harm /= np.linalg.norm(harm, axis=1, keepdims=True)
    safe /= np.linalg.norm(safe, axis=1, keepdims=True)
    clf = SafetyClassifier(None, exemplars=(harm, safe))
    assert clf.exemplars is not None
    kept_harm, kept_safe = clf.exemplars
    assert np.array_equal(kept_harm, harm) and np.array_equal(kept_safe, safe)
    x = _units(4, seed=7)
    x[0, :DIM] = harm[3]
    assert np.abs(clf.knn_margin(x) - _reference_margin(harm, safe, x)).max() < 1e-6


def _scan_reference(codes: np.ndarray, scales: np.ndarray, q: np.ndarray) -> np.ndarray:
    out = np.empty(len(codes), np.float32)
    for a in range(0, len(codes), SCAN_BLOCK):
        np.matmul(codes[a : a + SCAN_BLOCK].astype(np.float32), q, out=out[a : a + SCAN_BLOCK])
    return out * scales


def test_scan_gives_the_same_scores_for_any_row_count_and_width() -> None:
    rng = np.random.default_rng(5)
    for n, dim in ((1, DIM), (SCAN_BLOCK - 1, DIM), (SCAN_BLOCK + 3, DIM), (1500, 16), (9, DIM)):
        x = rng.standard_normal((n, dim)).astype(np.float32)
        codes, scales = quantise(x)
        q = rng.standard_normal(dim).astype(np.float32)
        assert np.array_equal(approx_scores(codes, scales, q), _scan_reference(codes, scales, q))


def test_concurrent_scans_on_two_threads_do_not_mix_their_blocks() -> None:
    # The partner and tag lanes scan on their own threads at the same time; each widens its
    # codes into its own buffer.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4 * SCAN_BLOCK, DIM)).astype(np.float32)
    codes, scales = quantise(x)
    queries = rng.standard_normal((2, DIM)).astype(np.float32)
    expected = [_scan_reference(codes, scales, q) for q in queries]
    wrong: list[int] = []
    start = threading.Barrier(2)

    def scan(k: int) -> None:
        start.wait()
        for _ in range(150):
            if not np.array_equal(approx_scores(codes, scales, queries[k]), expected[k]):
                wrong.append(k)

    threads = [threading.Thread(target=scan, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_int8_rows_give_products_within_their_bound() -> None:
    rng = np.random.default_rng(8)
    for n, dim in ((1, 3), (5, DIM), (700, DIM), (40, 17)):
        rows = rng.standard_normal((n, dim)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        rows[0, 0] = 0.0  # a zero component and, below, a query equal to a row
        queries = rng.standard_normal((4, dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        queries[1] = rows[-1]
        queries[2] = 0.0  # a zero query: every product 0, exactly
        approx, bound = Int8Rows.of(rows).scores(queries)
        exact = queries.astype(np.float64) @ rows.T.astype(np.float64)
        assert approx.shape == (4, n) and bound.shape == (4,)
        assert (np.abs(approx - exact) <= bound[:, None]).all()
        assert not approx[2].any()
        # The bound is a worst case, not a guess: a few hundredths for unit vectors here.
        assert (bound < 0.05).all()

    # The worst case for the query's rounding: one large component sets its step, and every
    # small one rounds down by almost half a step, against rows of equal positive parts.
    rows = np.full((3, DIM), 1.0, np.float32)
    rows[1, 0] = rows[2, 1] = 2.0
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    query = np.zeros((1, DIM), np.float32)
    query[0, 0] = 1.0
    query[0, 1:] = 2.49 / 127.0  # 2.49 steps: coded as 2
    approx, bound = Int8Rows.of(rows).scores(query)
    exact = query.astype(np.float64) @ rows.T.astype(np.float64)
    assert (np.abs(approx - exact) > 0.02).all()
    assert (np.abs(approx - exact) <= bound[:, None]).all()


def test_knn_margin_finds_the_nearest_exemplars_among_near_ties() -> None:
    # Many exemplars within the int8 codes' rounding of each other: the margin still takes
    # the exact three nearest, as the float products of all of them do.
    rng = np.random.default_rng(9)
    base = rng.standard_normal(DIM).astype(np.float32)
    harm = base + 0.01 * rng.standard_normal((300, DIM)).astype(np.float32)
    safe = -base + 0.01 * rng.standard_normal((300, DIM)).astype(np.float32)
    harm /= np.linalg.norm(harm, axis=1, keepdims=True)
    safe /= np.linalg.norm(safe, axis=1, keepdims=True)
    clf = SafetyClassifier(None, exemplars=(harm, safe))
    x = _units(6, seed=10)
    x[:3, :DIM] = harm[:3] + 0.001
    got = clf.knn_margin(x)
    assert np.abs(got - _reference_margin(harm, safe, x)).max() < 1e-6


def test_exact_index_search_equals_a_float32_scan_when_the_query_rounds_coarser_than_rows() -> None:
    # The scan codes the query as well as the rows, and the rescoring margin covers both
    # roundings. Here the rows' codes are exact (every component +-c) and one large query
    # component makes the query's step ~20 times the rows': the query's rounding is nearly
    # all of the error, and the rows found must still be a float32 scan's.
    rng = np.random.default_rng(11)
    rows = rng.choice(np.array([-1.0, 1.0], np.float32), size=(3000, DIM)) / np.sqrt(DIM)
    rows = rows.astype(np.float32)
    index = VectorIndex(rows)
    live = np.ones(len(rows), bool)
    for seed in range(5):
        query = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        query[0] = 25.0
        query /= np.linalg.norm(query)
        exact = rows @ query
        for quantile, k in ((0.5, 3000), (0.9, 100)):
            floor = float(np.quantile(exact, quantile))
            want = np.flatnonzero(exact >= floor)
            want = want[np.argsort(-exact[want], kind="stable")][:k]
            got, cosines = index.search(query, live, floor, k)
            assert set(got.tolist()) == set(want.tolist())
            assert np.allclose(cosines, exact[got], atol=1e-6)


def test_the_integer_product_graph_is_the_one_the_onnx_package_builds():
    # The graph is written as protobuf bytes so that a start never imports ``onnx``; this
    # holds those bytes to the package's own builder and checker.
    import onnx
    from onnx import TensorProto, helper

    from matcher.index import _matmul_integer_model

    rows_t = np.random.default_rng(3).integers(-127, 128, (8, 5), dtype=np.int8)
    built = onnx.load_from_string(_matmul_integer_model(rows_t))
    onnx.checker.check_model(built, full_check=True)
    want = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMulInteger", ["a", "rows", "zero"], ["y"])],
            "int8_rows",
            [helper.make_tensor_value_info("a", TensorProto.UINT8, ["q", 8])],
            [helper.make_tensor_value_info("y", TensorProto.INT32, ["q", 5])],
            initializer=[
                helper.make_tensor("rows", TensorProto.INT8, [8, 5], rows_t.tobytes(), raw=True),
                helper.make_tensor(
                    "zero", TensorProto.UINT8, [], np.uint8(128).tobytes(), raw=True
                ),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
        ir_version=8,
    )
    want.opset_import[0].ClearField("domain")  # "" is the default domain, written or not
    assert built == want
