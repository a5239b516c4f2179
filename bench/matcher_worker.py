"""One catalogue size of section 3, in its own process pinned to the server core (so its
resident memory is that size's alone): ``python -m bench.matcher_worker ADS RUNS COUNT``.

Prints one JSON object: per run, the p50/p99 of the model's own forward pass (the floor) and
of the matcher's whole decision (embedding, safety, vector search, gates, ranking) for the
same texts, a 40-word post and a 10,000-character post; and the memory (resident and unique)
before and after the catalogue and its vectors were loaded. The vectors are written to a
vector cache file and mapped back, as ``Matcher.load`` does with the edge's cache folder.
"""

from __future__ import annotations

import os

# One BLAS thread, set before numpy loads, as the edge sets it (``edge/__init__.py``), so the
# worker measures the decision the edge makes; an operator's own value wins there and here.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from bench import synthetic
from bench.servers import SERVER_CPU, rss_mib, uss_mib
from bench.stats import percentile
from matcher import perf
from matcher.catalogue import parse_catalogue
from matcher.embeddings import CachedEmbedder, MiniLM, fix_mmap_threshold, trim_heap
from matcher.engine import Matcher
from matcher.geo import Gazetteer
from matcher.safety import SafetyClassifier
from matcher.state import ThreadState
from matcher.types import MatchRequest

_WRITE_MODEL_CACHE = (
    "import sys; from pathlib import Path; from matcher.embeddings import MiniLM; "
    "MiniLM(cache_dir=Path(sys.argv[1]))"
)
KINDS = {"post-40-words": {"words": 40}, "post-10000-chars": {"chars": 10_000}}


def main(ads: int, runs: int, count: int) -> dict:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > SERVER_CPU:
        os.sched_setaffinity(0, {SERVER_CPU})
    fix_mmap_threshold()  # as ``edge serve`` does before it loads anything
    pid = os.getpid()
    # The edge loads the model's rewritten graph from its cache folder; a first start
    # writes it there (and imports ``onnx`` to do so), so a child process does that here.
    model_cache = Path(tempfile.mkdtemp(prefix="bench-model-"))
    subprocess.run([sys.executable, "-c", _WRITE_MODEL_CACHE, str(model_cache)], check=True)
    model = MiniLM(threads=1, cache_dir=model_cache)
    rss_model = rss_mib(pid)
    uss_model = uss_mib(pid)
    t0 = time.perf_counter()
    catalogue = parse_catalogue(orjson.dumps(synthetic.catalogue_dict(ads)))
    cache = Path(tempfile.mkdtemp(prefix="bench-vectors-")) / "ad-vectors.npy"
    np.save(cache, synthetic.ad_vectors(model.embed, catalogue.placements))
    vectors = np.load(cache, mmap_mode="r")
    matcher = Matcher(
        catalogue,
        CachedEmbedder(model),
        vectors,
        gazetteer=Gazetteer(),
        safety=SafetyClassifier.load(),
    )
    del vectors
    trim_heap()  # as ``Matcher.load`` does after a load
    build_s = time.perf_counter() - t0
    rss_loaded = rss_mib(pid)
    now = time.time()
    out: dict = {
        "ads": ads,
        "build_s": build_s,
        "rss_model_mib": rss_model,
        "uss_model_mib": uss_model,
        "runs": [],
    }
    for r in range(runs):
        run: dict = {}
        for kind, shape in KINDS.items():
            n = count if "words" in shape else max(10, count // 3)
            texts = synthetic.posts(n, seed=10_000 * ads + 100 * r + len(kind), **shape)
            floor, full, outcomes = [], [], {}
            for i, text in enumerate(texts):
                a = time.perf_counter()
                model.embed([text])  # the floor: this text through the model alone
                b = time.perf_counter()
                request = MatchRequest(
                    product="ugc", content=text, post_id=f"p-{r}-{i}", thread_id=f"p-{r}-{i}"
                )
                result = matcher.decide(request, ThreadState(), now, {})
                c = time.perf_counter()
                floor.append((b - a) * 1000)
                full.append((c - b) * 1000)
                outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
            run[kind] = {
                "floor_p50": percentile(floor, 50),
                "floor_p99": percentile(floor, 99),
                "match_p50": percentile(full, 50),
                "match_p99": percentile(full, 99),
                "outcomes": outcomes,
            }
        out["runs"].append(run)
    out["rss_mib"] = rss_mib(pid)
    out["uss_mib"] = uss_mib(pid)
    out["rss_loaded_mib"] = rss_loaded
    matcher.close()
    cache.unlink()
    cache.parent.rmdir()
    out["perf"] = _matcher_perf(ads, model, runs, max(10, count // 4))
    return out


def _matcher_perf(ads: int, model: MiniLM, runs: int, count: int) -> dict:
    """The matcher's own helpers (``matcher.perf``) on its own synthetic catalogue (sandbox
    ad vectors plus noise, a fifth geo-targeted): one fixed 40-word post, repeated; floor
    and match alternate run by run like the main measurement."""
    m = perf.synthetic_matcher(ads, embedder=model)
    out: dict[str, list[float]] = {
        k: [] for k in ("floor_p50", "floor_p99", "match_p50", "match_p99")
    }
    try:
        for _ in range(runs):
            floor = perf.forward_pass_ms(model, runs=count)
            full = perf.match_ms(m, runs=count)
            out["floor_p50"].append(floor["p50_ms"])
            out["floor_p99"].append(floor["p99_ms"])
            out["match_p50"].append(full["p50_ms"])
            out["match_p99"].append(full["p99_ms"])
    finally:
        m.close()
    return out


if __name__ == "__main__":
    ads_arg, runs_arg, count_arg = (int(x) for x in sys.argv[1:4])
    sys.stdout.write(orjson.dumps(main(ads_arg, runs_arg, count_arg)).decode() + "\n")
