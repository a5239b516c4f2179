"""The Matcher: safety, relevance, eligibility, geo, suppression and ranking for one request.

``decide`` is the synchronous core (pure given its inputs: the request, a snapshot of the
thread's state, the clock and the spend); ``match`` wraps it with the state reads and
writes and runs the model work on the matcher's own single worker thread, never on the
caller's event loop.

Outcomes: ``no_match`` when the content is unsafe or nothing eligible is
relevant (with a growing retry window per post); ``empty`` when relevant, eligible ads
exist but none may be shown now (disabled in this thread, frequency-capped, out of budget);
``matched`` otherwise, best first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import hashlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from matcher.catalogue import Catalogue, load_catalogue
from matcher.ctr import CtrModel
from matcher.eligibility import EligibilityMasks, static_gate
from matcher.embeddings import (
    CachedEmbedder,
    Embedder,
    MiniLM,
    Sentences,
    encode_texts,
    normalise,
    trim_heap,
)
from matcher.explain import Explainer
from matcher.geo import Gazetteer, Location, has_targets, targets_match
from matcher.index import ad_text, build_index, cache_path, load_or_embed
from matcher.pacing import Pacer, Spend, as_spend
from matcher.ranking import Ranker, band_floor
from matcher.safety import SafetyClassifier, SafetyVerdict
from matcher.state import FREQUENCY_CAP, MatchState, ThreadState, next_window
from matcher.text import as_read, known_words
from matcher.types import Campaign, MatchRequest, MatchResult, Placement, ScoredAd

Lane = Literal["partner", "tag"]
LANES: tuple[Lane, ...] = ("partner", "tag")


def _lowest_cpu_priority() -> None:
    """Run the calling thread at nice 19 (Linux schedules threads one by one); elsewhere,
    or where not permitted, leave it as it is."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class MatchDeadlineExceeded(TimeoutError):
    """A queued match was dropped because its caller's deadline had passed."""


@dataclass(frozen=True, slots=True)
class MatcherConfig:
    relevance_floor: float = 0.5  # calibrated relevancy below which an ad is "not relevant"
    frequency_cap: int = FREQUENCY_CAP
    prompt_weight: float = 0.4  # AI turns: share of the user's prompt in the query vector
    candidates: int = 256  # most rows above the floor examined by the per-ad gates
    one_per_campaign: bool = True  # a response shows an advertiser once
    # Thompson sampling of pCTR/pCVR per request; False (deterministic): posterior means.
    explore: bool = False
    seed: int | None = None  # of the exploration draws (tests and the simulation fix it)
    # Partner jobs that queued while the model thread was busy go through one forward pass
    # together, up to this many texts; 1: one forward pass per job (see ``_PartnerBatches``).
    batch_texts: int = 1


class Matcher:
    """One loaded catalogue with its ad vectors, the model, the gazetteer and the safety model."""

    def __init__(
        self,
        catalogue: Catalogue,
        embedder: Embedder,
        ad_vectors: np.ndarray,
        *,
        gazetteer: Gazetteer | None = None,
        safety: SafetyClassifier | None = None,
        config: MatcherConfig | None = None,
    ) -> None:
        """Build over precomputed ``ad_vectors`` (rows in ``catalogue.placements`` order).

        This is how the bench builds 100k-ad matchers without embedding 100k texts.
        """
        if ad_vectors.shape != (len(catalogue), embedder.dim):
            raise ValueError(f"ad_vectors {ad_vectors.shape} do not fit {len(catalogue)} ads")
        self.catalogue = catalogue
        self.embedder = embedder
        self.ad_vectors = ad_vectors  # rows in catalogue order (a reload reuses them)
        self.index = build_index(ad_vectors)
        self.gazetteer = gazetteer
        self.safety = safety
        self.config = config or MatcherConfig()
        self.ranker = Ranker(catalogue.placements, self.config.relevance_floor)
        self.masks = EligibilityMasks(catalogue.placements)
        self.pacer = Pacer(catalogue.campaigns)
        # For ``demand_version``: the campaigns that may be held back without any spend, and
        # the hash of the part that changes only when a flight starts or ends.
        self._held_unspent = frozenset(
            c.id for c in catalogue.campaigns if self.pacer.holds_unspent(c)
        )
        self._live_part: tuple[tuple[str, ...], frozenset[str], Any] | None = None
        # Drawn from on the model threads (numpy's generators lock around each draw).
        self.rng = np.random.default_rng(self.config.seed)
        # One model thread per lane, so a partner request never queues behind page matches.
        # The tag lane yields: its thread runs at the lowest CPU priority, and a tag job
        # does not start while partner jobs are waiting or running (up to its deadline).
        self._executors = {
            "partner": cf.ThreadPoolExecutor(1, thread_name_prefix="matcher-partner"),
            "tag": cf.ThreadPoolExecutor(
                1, thread_name_prefix="matcher-tag", initializer=_lowest_cpu_priority
            ),
        }
        self._partner_busy = 0
        self._partner_idle = threading.Condition()
        self._batches = _PartnerBatches()
        known_words()  # read here, not by the model thread that meets the first disguised word

    @classmethod
    def load(
        cls,
        catalogue_path: Path | str | None = None,
        *,
        threads: int = 1,
        cache_dir: Path | None = None,
        embedder: Embedder | None = None,
        config: MatcherConfig | None = None,
        dma_table: Path | None = None,
    ) -> Matcher:
        """Everything from files: the catalogue (None: the bundled sandbox one), the model,
        ad vectors (from ``cache_dir`` when the same catalogue and model were seen before),
        the county->DMA table (None: the bundled one)."""
        catalogue = load_catalogue(catalogue_path)
        model = embedder or CachedEmbedder(MiniLM(threads=threads, cache_dir=cache_dir))
        texts = [ad_text(p.ad) for p in catalogue.placements]
        cache = cache_path(cache_dir, catalogue.content_hash, model.model_id) if cache_dir else None
        # Ad texts bypass the query LRU: they would only evict the posts it is there for.
        raw = model.inner if isinstance(model, CachedEmbedder) else model
        vectors, _ = load_or_embed(texts, raw.embed, model.dim, cache)
        del texts
        matcher = cls(
            catalogue,
            model,
            vectors,
            gazetteer=Gazetteer(dma_table, cache_dir=cache_dir),
            safety=SafetyClassifier.load(),
            config=config,
        )
        trim_heap()  # the catalogue parse and the index build leave free heap behind
        return matcher

    def with_catalogue(self, catalogue: Catalogue, cache_dir: Path | None = None) -> Matcher:
        """A matcher for another catalogue sharing this one's model, model thread, gazetteer,
        safety classifier and configuration (a hot reload). Ad vectors come from the cache
        when this catalogue was seen before, else they are embedded here: call it off the
        event loop. This matcher is left as it is, so matches already running finish on
        it."""
        model = self.embedder
        texts = [ad_text(p.ad) for p in catalogue.placements]
        cache = cache_path(cache_dir, catalogue.content_hash, model.model_id) if cache_dir else None
        raw = model.inner if isinstance(model, CachedEmbedder) else model
        known = {ad_text(p.ad): i for i, p in enumerate(self.catalogue.placements)}

        def embed_new(wanted: list[str]) -> np.ndarray:
            # An ad whose text did not change keeps its vector: only new texts are embedded.
            out = np.empty((len(wanted), model.dim), dtype=np.float32)
            new = [i for i, t in enumerate(wanted) if t not in known]
            for i, t in enumerate(wanted):
                if t in known:
                    out[i] = self.ad_vectors[known[t]]
            if new:
                out[new] = raw.embed([wanted[i] for i in new])
            return out

        vectors, _ = load_or_embed(texts, embed_new, model.dim, cache)
        fresh = Matcher(
            catalogue,
            model,
            vectors,
            gazetteer=self.gazetteer,
            safety=self.safety,
            config=self.config,
        )
        for executor in fresh._executors.values():
            executor.shutdown(wait=False)
        # The same model threads (one per lane), whichever catalogue asks. The tag lane's
        # yielding to partner jobs is counted per matcher, so for the moments both run it
        # sees only the new one's partner jobs.
        fresh._executors = self._executors
        fresh._batches = self._batches  # jobs of both matchers share the thread's batches
        return fresh

    @property
    def estimates(self) -> CtrModel:
        return self.ranker.estimates

    def set_estimates(self, model: CtrModel) -> None:
        """Swap in CTR/CVR estimates built from newer evidence (one reference assignment)."""
        self.ranker.estimates = model

    def close(self) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)

    # -- the async entry point ---------------------------------------------------------------

    async def match(
        self,
        request: MatchRequest,
        state: MatchState,
        now: float,
        spend: Spend | Mapping[str, float] | None = None,
        deadline: float | None = None,
        lane: Lane = "partner",
    ) -> MatchResult:
        """Read the thread's state, decide off the event loop, record what was decided.

        ``deadline`` (``time.monotonic()`` seconds): a job still queued for the model thread
        when it passes is dropped with ``MatchDeadlineExceeded`` instead of run, so a burst
        that times out its callers does not leave the thread computing answers nobody reads.
        """
        unit = request.post_id or request.turn_id
        window_id = request.window_id or request.post_id
        snapshot = await state.load(request.thread_id, window_id, unit, now)
        backoff = snapshot.backoff
        if window_id and backoff is not None and now < backoff.until:
            # Inside the window: the remaining seconds again, without a new match.
            return MatchResult(
                outcome="no_match",
                retry_after_seconds=max(1, math.ceil(backoff.until - now)),
                reason="backoff",
                explanation={
                    "outcome": "no_match",
                    "reason": "backoff",
                    "backoff": {
                        "misses": backoff.misses,
                        "until": backoff.until,
                        "last_reason": backoff.reason,
                    },
                }
                if request.explain
                else None,
            )
        spent = as_spend(spend)
        loop = asyncio.get_running_loop()
        job = self._decide_before if lane == "partner" else self._decide_after_partner
        if lane == "partner":
            self._partner_started()
        try:
            if lane == "partner" and self.config.batch_texts > 1:
                result = await self._batched(deadline, request, snapshot, now, spent)
            else:
                result = await loop.run_in_executor(
                    self._executors[lane], job, deadline, request, snapshot, now, spent
                )
        finally:
            if lane == "partner":
                self._partner_done()
        if result.outcome == "no_match":
            if window_id:
                window = next_window(
                    backoff,
                    now=now,
                    created_at=request.created_at,
                    demand=self.demand_version(now, spent),
                    reason=result.reason,
                )
                await state.record_miss(window_id, window, now)
                result = _with_retry(result, window.until - now)
        else:
            if window_id and backoff is not None:
                await state.clear_backoff(window_id)
            if result.ads and request.thread_id and unit:
                await state.record_served(
                    request.thread_id, unit, [s.placement.ad.id for s in result.ads], now
                )
        return result

    async def _batched(
        self,
        deadline: float | None,
        request: MatchRequest,
        state: ThreadState,
        now: float,
        spend: Spend,
    ) -> MatchResult:
        """A partner job through the batches: queued, then run by the model thread with the
        jobs queued beside it (their texts in one forward pass, then each decided alone)."""
        loop = asyncio.get_running_loop()
        job = _Job(self, deadline, request, state, now, spend, loop, loop.create_future())
        if self._batches.put(job):
            try:
                self._executors["partner"].submit(self._batches.drain, self.config.batch_texts)
            except RuntimeError:  # the model thread is shut down (``close``)
                self._batches.withdraw(job)
                raise
        return await job.future

    def _partner_started(self) -> None:
        with self._partner_idle:
            self._partner_busy += 1

    def _partner_done(self) -> None:
        with self._partner_idle:
            self._partner_busy -= 1
            if self._partner_busy == 0:
                self._partner_idle.notify_all()

    def _decide_after_partner(self, deadline: float | None, *args: Any) -> MatchResult:
        """A tag-lane job: first wait (on its own thread) until no partner job is pending."""
        with self._partner_idle:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._partner_idle.wait_for(lambda: self._partner_busy == 0, timeout=wait)
        return self._decide_before(deadline, *args)

    def _decide_before(self, deadline: float | None, *args: Any) -> MatchResult:
        if deadline is not None and time.monotonic() > deadline:
            raise MatchDeadlineExceeded("the caller's deadline passed while the job was queued")
        return self.decide(*args)

    def demand_version(self, now: float, spend: Spend | Mapping[str, float]) -> str:
        """Changes when the servable demand changes (new catalogue, flights, budgets, pacing):
        a hash of the catalogue, the campaigns live now and those of them held back by
        budget or pacing.

        It runs on the event loop after every no-match, so it costs the campaigns that have
        spent something, not the catalogue: a campaign with no spend is held back only when
        ``Pacer.holds_unspent`` says it may be (a zero budget, say), and the hash of the
        catalogue and the live campaigns is kept until a flight starts or ends."""
        live = self.masks.live_campaigns(now)
        part = self._live_part
        if part is None or part[0] is not live:
            head = hashlib.sha256(f"{self.catalogue.content_hash}|{','.join(live)}|".encode())
            part = self._live_part = (live, frozenset(live), head)
        spend = as_spend(spend)
        maybe = self._held_unspent.union(spend.total, spend.today).intersection(part[1])
        spent = sorted(
            cid for cid in maybe if self.pacer.gate(self.catalogue_campaign(cid), spend, now)
        )
        digest = part[2].copy()
        digest.update(",".join(spent).encode())
        return digest.hexdigest()[:16]

    def catalogue_campaign(self, cid: str) -> Campaign:
        return self.masks.campaign(cid)

    # -- the synchronous core ------------------------------------------------------------------

    def query_vectors(
        self, request: MatchRequest, encoded: Encoded | None = None
    ) -> tuple[list[str], np.ndarray, list[Sentences], np.ndarray]:
        """(texts, their vectors, their sentences, the query vector). AI turns weigh the
        prompt and the answer as two vectors, so a long answer does not drown a short
        question (or vice versa). Sentence vectors come from the same forward pass.
        ``encoded``: what ``encode_texts`` gave for ``request_texts(request)`` already (a
        batch's forward pass), used instead of encoding them again."""
        texts = request_texts(request)
        vectors, sentences = encoded or encode_texts(self.embedder, texts)
        if len(texts) == 1:
            return texts, vectors, sentences, vectors[0]
        w = self.config.prompt_weight
        return texts, vectors, sentences, normalise(w * vectors[0] + (1 - w) * vectors[1])

    def judge_safety(
        self, texts: list[str], vectors: np.ndarray, sentences: list[Sentences]
    ) -> list[SafetyVerdict]:
        """One verdict per text; for an AI turn the prompt (first) and the answer are judged
        together: either one unsafe means no ad, so a self-harm prompt gets none whatever the
        answer says, and each verdict names its part for the explanation."""
        assert self.safety is not None
        parts = ["content"] if len(texts) == 1 else ["prompt", "answer"]
        turns = None if len(texts) == 1 else {1: 0}
        verdicts = self.safety.judge(texts, vectors, sentences, self._encode, turns)
        return [replace(v, part=parts[i]) for i, v in enumerate(verdicts)]

    def _encode(self, texts: Sequence[str]) -> tuple[np.ndarray, list[Sentences]]:
        return encode_texts(self.embedder, texts)

    def decide(
        self,
        request: MatchRequest,
        state: ThreadState,
        now: float,
        spend: Spend | Mapping[str, float],
        encoded: Encoded | None = None,
    ) -> MatchResult:
        """``encoded``: the request's texts already through the model (see
        ``query_vectors``); the answer is the same either way."""
        ex = Explainer(request.explain)
        spend = as_spend(spend)
        texts, vectors, sentences, query = self.query_vectors(request, encoded)
        if self.safety is not None:
            verdicts = self.judge_safety(texts, vectors, sentences)
            ex.safety(verdicts, self.safety.thresholds)
            # The first text that blocked (an AI turn's prompt before its answer) names the
            # class and the evidence: an answer is read for self-harm only after a prompt that
            # shows some, and a warm sign-off ("Take care of yourself") can read as self-harm
            # itself, so it must not make a prompt's weak evidence strong.
            blocked = next((v for v in verdicts if not v.safe), None)
            if blocked is not None:
                return ex.result(
                    MatchResult(
                        outcome="no_match",
                        reason="unsafe",
                        unsafe_category=blocked.category,
                        unsafe_evidence=blocked.evidence,
                    )
                )
        live = self.masks.mask(request.product, now)
        if request.explain:  # exact scores of every ad; only explanations pay for this
            ex.static_gates(
                self.catalogue.placements,
                self.index.scores(query),
                request.product,
                now,
                static_gate,
                self.config.relevance_floor,
            )
        located: list[Location | None] = []  # resolved on first need, once per request
        k = self.config.candidates
        while True:
            found = self.index.candidates(query, live, self.ranker.cosine_floor, k)
            shown, held_back = self._gate(found, request, state, spend, now, located, ex)
            # All of the first k relevant ads gated out (say, geo-targeted elsewhere), and
            # more were above the floor: look further before calling it a miss. (With none
            # shown, the gates read every candidate, so ``found.given`` is their number.)
            if shown or found.given < k or k >= len(self.catalogue):
                break
            k *= 8
        if request.explain:
            ex.location(self._locate(request))
        ranked = self.ranker.order(shown, self.config.one_per_campaign, request.max_ads)
        ex.ranked(ranked, shown, self.estimates)
        if ranked:
            return ex.result(MatchResult(outcome="matched", ads=tuple(ranked)))
        if held_back:
            reason = max(held_back, key=held_back.__getitem__)
            return ex.result(MatchResult(outcome="empty", reason=reason))
        return ex.result(MatchResult(outcome="no_match", reason="no_relevant_demand"))

    def _gate(
        self,
        found: Iterable[tuple[int, float]],
        request: MatchRequest,
        state: ThreadState,
        spend: Spend,
        now: float,
        located: list[Location | None],
        ex: Explainer,
    ) -> tuple[list[ScoredAd], dict[str, int]]:
        """(ads that may be shown, count per gate that held relevant ads back), reading the
        (row, cosine) candidates best first and no further than the response needs."""
        shown: list[ScoredAd] = []
        held_back: dict[str, int] = {}
        best = _TopRanks(request.max_ads, self.config.one_per_campaign)
        rng = self.rng if self.config.explore else None
        paced: dict[str, str | None] = {}  # campaign id -> its pacing gate, for this request
        for row, cosine in found:
            relevancy = self.ranker.relevancy(cosine)
            if not request.explain and best.complete_above(relevancy):
                break  # rows come best first: nothing further can enter the top max_ads
            p = self.catalogue.placements[row]
            if not located and has_targets(p.ad_set.geo):
                located.append(self._locate(request))  # a lat/lon lookup is not free
            ok, why = targets_match(p.ad_set.geo, located[0] if located else None)
            if not ok:
                ex.gate(p, cosine, "geo", why)
                continue
            gate = self._dynamic_gate(p, state, spend, now, paced)
            if gate:
                held_back[gate] = held_back.get(gate, 0) + 1
                ex.gate(p, cosine, gate)
                continue
            scored = self.ranker.score(p, relevancy, rng)
            shown.append(scored)
            best.add(scored)
            ex.gate(p, cosine, None, why)
        return shown, held_back

    def _locate(self, request: MatchRequest) -> Location | None:
        if self.gazetteer is None or request.geo is None:
            return None
        return self.gazetteer.resolve(request.geo)

    def _dynamic_gate(
        self,
        p: Placement,
        state: ThreadState,
        spend: Spend,
        now: float,
        paced: dict[str, str | None],
    ) -> str | None:
        """The gate that holds this ad back for this request, if any. ``paced``: the pacing
        gate of each campaign met so far in the request (the same for all its ads)."""
        if p.ad.id in state.disabled:
            return "disabled_in_thread"
        if (
            state.served.get(p.ad.id, 0) >= self.config.frequency_cap
            and p.ad.id not in state.unit_ads  # a refresh of a unit that already has it
        ):
            return "frequency_capped"
        cid = p.campaign.id
        if cid not in paced:
            paced[cid] = self.pacer.gate(p.campaign, spend, now)
        return paced[cid]

    def check_safety(
        self, texts: list[str], turns: Mapping[int, int] | None = None
    ) -> list[SafetyVerdict]:
        """Safety verdicts for texts (the bench's precision/recall uses this); ``turns``: an
        AI turn's answer index -> its prompt's, judged together as ``decide`` does."""
        if self.safety is None:
            raise RuntimeError("this matcher was built without a safety classifier")
        vectors, sentences = encode_texts(self.embedder, texts)
        return self.safety.judge(texts, vectors, sentences, self._encode, turns)


Encoded = tuple[np.ndarray, list[Sentences]]  # vectors and sentences of a request's texts


def request_texts(request: MatchRequest) -> list[str]:
    """The texts a request embeds and judges, as a reader reads them (``as_read``): its
    content, and before it an AI turn's prompt."""
    if _has_prompt(request):
        return [as_read(request.prompt or ""), as_read(request.content)]
    return [as_read(request.content)]


def _has_prompt(request: MatchRequest) -> bool:
    return bool(request.product == "ai" and request.prompt and request.prompt.strip())


@dataclass(slots=True)
class _Job:
    """One partner match waiting for the model thread, and where its answer goes."""

    matcher: Matcher
    deadline: float | None
    request: MatchRequest
    state: ThreadState
    now: float
    spend: Spend
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[MatchResult]

    def settle(self, result: MatchResult | None, error: BaseException | None = None) -> None:
        """Hand the answer to the caller's event loop (a caller that gave up takes none)."""

        def give() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)  # type: ignore[arg-type]

        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile reads nothing
            self.loop.call_soon_threadsafe(give)


@dataclass(slots=True)
class _PartnerBatches:
    """Batch while busy: partner jobs that arrive while the model thread is working queue
    here; when it is free it takes every queued job (up to ``batch_texts`` texts, in
    arrival order), runs their texts through one ``encode`` call (the model groups similar
    lengths into one forward pass, so padding stays small), then decides each job alone,
    in arrival order, with its own texts' vectors. A job that finds the thread idle starts
    at once: nothing waits for company. Every text is cut to the model's token window, so
    ``batch_texts`` also bounds the tokens of a pass."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    queued: deque[_Job] = field(default_factory=deque)
    running: bool = False  # a drain is submitted to the model thread or running there

    def put(self, job: _Job) -> bool:
        """Queue ``job``; True when the caller must start a drain on the model thread."""
        with self.lock:
            self.queued.append(job)
            start, self.running = not self.running, True
        return start

    def withdraw(self, job: _Job) -> None:
        """Take back the job whose drain could not be started (the queue held only it)."""
        with self.lock:
            with contextlib.suppress(ValueError):
                self.queued.remove(job)
            self.running = False

    def take(self, batch_texts: int) -> list[_Job]:
        """The oldest queued jobs with at most ``batch_texts`` texts (always at least one
        job); none left ends the drain."""
        with self.lock:
            taken: list[_Job] = []
            texts = 0
            while self.queued:
                more = 1 + _has_prompt(self.queued[0].request)  # no text is read under the lock
                if taken and texts + more > batch_texts:
                    break
                taken.append(self.queued.popleft())
                texts += more
            if not taken:
                self.running = False
            return taken

    def drain(self, batch_texts: int) -> None:
        """On the model thread: batches until the queue is empty."""
        try:
            self._drain(batch_texts)
        except BaseException:
            with self.lock:  # the next job starts a new drain for what is still queued
                self.running = False
            raise

    def _drain(self, batch_texts: int) -> None:
        while jobs := self.take(batch_texts):
            live = []
            for job in jobs:
                if job.deadline is not None and time.monotonic() > job.deadline:
                    job.settle(None, MatchDeadlineExceeded("the caller's deadline passed"))
                elif not job.future.cancelled():
                    live.append(job)
            if not live:
                continue
            try:
                encoded = _encode_together(live)
            except Exception as exc:
                for job in live:
                    job.settle(None, exc)
                continue
            for job, enc in zip(live, encoded, strict=True):
                try:
                    result = job.matcher.decide(job.request, job.state, job.now, job.spend, enc)
                except Exception as exc:
                    job.settle(None, exc)
                else:
                    job.settle(result)


def _encode_together(jobs: list[_Job]) -> list[Encoded]:
    """Every job's texts through one ``encode_texts`` call, split back per job. Jobs of a
    catalogue reload's old and new matcher share the model, so the first job's serves all."""
    per_job = [request_texts(job.request) for job in jobs]
    vectors, sentences = encode_texts(jobs[0].matcher.embedder, [t for ts in per_job for t in ts])
    out: list[Encoded] = []
    at = 0
    for texts in per_job:
        out.append((vectors[at : at + len(texts)], sentences[at : at + len(texts)]))
        at += len(texts)
    return out


class _TopRanks:
    """What is known of the response so far, to stop examining candidates early.

    Candidates come most relevant first. Once ``k`` distinct campaigns (or ads) may be
    shown, a candidate below the top band (``band_floor`` of the most relevant one) is
    ordered by relevancy after all of them, and so is every later one.
    """

    def __init__(self, k: int, per_campaign: bool) -> None:
        self.k = k
        self.per_campaign = per_campaign
        self._keys: set[str] = set()
        self._top = -1.0
        self._floor = -1.0

    def add(self, s: ScoredAd) -> None:
        self._keys.add(s.placement.campaign.id if self.per_campaign else s.placement.ad.id)
        if s.relevancy_score > self._top:
            self._top = s.relevancy_score
            self._floor = band_floor(self._top)

    def complete_above(self, relevancy: float) -> bool:
        return len(self._keys) >= self.k and relevancy < self._floor


def _with_retry(result: MatchResult, seconds: float) -> MatchResult:
    return replace(result, retry_after_seconds=max(1, math.ceil(seconds)))
