"""Batch while busy: partner matches queued behind the model share one forward pass, and
every answer is the one the same request gets alone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from matcher import Matcher, MemoryState
from matcher.embeddings import CachedEmbedder, Sentences
from matcher.engine import MatchDeadlineExceeded, MatcherConfig
from matcher.types import MatchRequest, MatchResult

DATA = Path(__file__).resolve().parent.parent / "data"
NOW = 1.79e9


class CountingEmbedder:
    """The real model, recording how many texts each ``encode`` call was given."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.model_id = inner.model_id  # type: ignore[attr-defined]
        self.dim = inner.dim  # type: ignore[attr-defined]
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(len(texts))
        out: np.ndarray = self.inner.embed(texts)  # type: ignore[attr-defined]
        return out

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, list[Sentences]]:
        self.calls.append(len(texts))
        out: tuple[np.ndarray, list[Sentences]] = self.inner.encode(texts)  # type: ignore[attr-defined]
        return out


def _twin(shared: Matcher, batch_texts: int) -> tuple[Matcher, CountingEmbedder]:
    """A matcher like ``shared`` (same catalogue, vectors, gazetteer, safety) with an empty
    query cache of its own, so every text really goes through the model."""
    inner = shared.embedder.inner if isinstance(shared.embedder, CachedEmbedder) else None
    assert inner is not None
    counting = CountingEmbedder(inner)
    twin = Matcher(
        shared.catalogue,
        CachedEmbedder(counting),
        shared.ad_vectors,
        gazetteer=shared.gazetteer,
        safety=shared.safety,
        config=MatcherConfig(batch_texts=batch_texts),
    )
    return twin, counting


def _requests() -> list[MatchRequest]:
    cases = json.loads((DATA / "relevance_cases.json").read_text())["cases"]
    texts = [c["text"] for c in cases]
    lines = (DATA / "safety_independent.jsonl").read_text().splitlines()
    texts += [json.loads(line)["text"] for line in lines[::3]]  # safe and unsafe, all kinds
    reqs = [
        MatchRequest(product="ugc", content=t, post_id=f"p-{i}", thread_id=f"p-{i}", explain=True)
        for i, t in enumerate(texts)
    ]
    # AI turns: two texts each, the prompt and the answer
    for i in range(0, 24, 3):
        reqs.append(
            MatchRequest(
                product="ai",
                prompt=texts[i],
                content=texts[i + 1],
                turn_id=f"t-{i}",
                thread_id=f"t-{i}",
                explain=True,
            )
        )
    return reqs


async def _all_at_once(m: Matcher, reqs: list[MatchRequest]) -> list[MatchResult]:
    state = MemoryState()
    async with asyncio.timeout(120):  # a job the batches lost would wait forever
        return await asyncio.gather(*(m.match(r, state, NOW, {}) for r in reqs))


def test_batched_answers_are_the_unbatched_ones(shared_matcher: Matcher) -> None:
    reqs = _requests()
    alone, _ = _twin(shared_matcher, 1)
    batched, counting = _twin(shared_matcher, 8)
    try:
        expected = asyncio.run(_all_at_once(alone, reqs))
        got = asyncio.run(_all_at_once(batched, reqs))
    finally:
        alone.close()
        batched.close()
    assert max(counting.calls) > 1  # batches did form
    outcomes = {r.outcome for r in expected}
    assert {"matched", "no_match"} <= outcomes
    assert any(r.reason == "unsafe" for r in expected)
    for want, have in zip(expected, got, strict=True):
        assert have == want  # outcome, reason, the ads with their scores
        assert have.explanation == want.explanation  # safety verdicts, gates, estimates


def test_vectors_of_a_batch_are_those_of_each_text_alone(shared_matcher: Matcher) -> None:
    inner = shared_matcher.embedder.inner  # type: ignore[attr-defined]
    texts = [r.content for r in _requests()[:48]]
    together, sentences = inner.encode(texts)
    for i, text in enumerate(texts):
        alone, alone_sentences = inner.encode([text])
        np.testing.assert_allclose(together[i], alone[0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(
            sentences[i].vectors, alone_sentences[0].vectors, rtol=0, atol=1e-6
        )
        np.testing.assert_allclose(sentences[i].peaks, alone_sentences[0].peaks, rtol=0, atol=1e-6)
        assert sentences[i].texts == alone_sentences[0].texts


def test_a_lone_match_goes_through_at_once_and_batches_stay_bounded(
    shared_matcher: Matcher,
) -> None:
    m, counting = _twin(shared_matcher, 4)
    reqs = [r for r in _requests() if r.product == "ugc"][:30]
    try:
        asyncio.run(_all_at_once(m, reqs[:1]))
        assert counting.calls == [1]  # nothing waited for company
        counting.calls.clear()
        asyncio.run(_all_at_once(m, reqs[1:]))
    finally:
        m.close()
    # safety's second pass encodes a post's sentences on its own call: count only the posts
    posts = [n for n in counting.calls if n > 1]
    assert posts and max(counting.calls) <= 4


def test_a_batched_job_queued_past_its_deadline_is_dropped_not_run(
    shared_matcher: Matcher,
) -> None:
    m, counting = _twin(shared_matcher, 8)

    async def go() -> MatchResult:
        return await m.match(
            MatchRequest(product="ugc", content="my pup won't touch his kibble", post_id="late"),
            MemoryState(),
            NOW,
            {},
            deadline=time.monotonic() - 1,
        )

    try:
        with pytest.raises(MatchDeadlineExceeded):
            asyncio.run(go())
    finally:
        m.close()
    assert counting.calls == []


def test_a_failing_decision_fails_its_own_job_only(
    shared_matcher: Matcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, _ = _twin(shared_matcher, 8)
    decide = m.decide

    def flaky(request: MatchRequest, *args: object) -> MatchResult:
        if request.post_id == "p-3":
            raise RuntimeError("broken")
        return decide(request, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(m, "decide", flaky)
    reqs = [r for r in _requests() if r.product == "ugc"][:8]

    async def go() -> list[MatchResult | BaseException]:
        state = MemoryState()
        return await asyncio.gather(
            *(m.match(r, state, NOW, {}) for r in reqs), return_exceptions=True
        )

    try:
        got = asyncio.run(go())
    finally:
        m.close()
    assert isinstance(got[3], RuntimeError)
    assert all(isinstance(g, MatchResult) for i, g in enumerate(got) if i != 3)


def test_a_batched_match_after_close_fails_like_an_unbatched_one(shared_matcher: Matcher) -> None:
    request = MatchRequest(product="ugc", content="my pup won't touch his kibble", post_id="x")
    for batch in (1, 8):
        m, _ = _twin(shared_matcher, batch)
        m.close()
        with pytest.raises(RuntimeError):
            asyncio.run(m.match(request, MemoryState(), NOW, {}))
        assert not m._batches.running and not m._batches.queued
