"""Section 2: ``POST /v1/ugc/process`` over HTTP at 1k/10k/100k ads, against the embedding
model's own forward pass for the same texts on the same core (the floor).

The edge serves a synthetic catalogue file (``bench/synthetic.py``) whose ad vectors are
written beforehand into the edge's own vector cache (``EDGE_CACHE_DIR``, keyed by the
catalogue's content hash and the model id, as ``Matcher.load`` reads it), so a 100k-ad edge
starts without embedding 100k texts and serves exactly as it would in production. Every
request is a distinct 40-word post with its own ``post_id``: no embedding-cache hit, no
backoff short-cut.
"""

from __future__ import annotations

import asyncio
import http.client
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import orjson

from bench import edge_env, synthetic
from bench.load import LoadResult, run_load
from bench.options import Options, progress
from bench.report import Section, Table
from bench.servers import PinnedEdge
from bench.stats import Spread, percentile, ratios
from matcher.safety_train import Check, default_check

PATH = "/v1/ugc/process"
THROUGHPUT_CONNECTIONS = 4
# When wrk stops, the edge still finishes the requests its connections had in flight (up to
# one per connection, ~15 ms each on one core); a latency run started at once queues its
# first post behind them (50-70 ms here). The latency runs measure service time, so each
# starts this long after the load before it, and sends a few posts first that are not
# measured (a new connection's first post).
SETTLE_S = 1.0
WARM_UP_POSTS = 5
# p99 over the floor by catalogue size, HTTP included
AIM_P99 = {10_000: 1.3, 100_000: 1.5}


def _label(ads: int) -> str:
    return f"{ads // 1000}k"


async def _issue_ugc_key(db: Path) -> str:
    from edge.keys import Keyring
    from edge.store.sqlite import SQLiteStore

    store = SQLiteStore(db)
    await store.open()
    try:
        key, _ = await Keyring(store, time.time, 5).issue("production", "ugc", "bench")
        return key
    finally:
        await store.close()


def prepare(tmp: Path, ads: int) -> tuple[Path, Path]:
    """(catalogue file, cache dir) with the ad vectors already in the edge's cache."""
    from matcher.catalogue import load_catalogue
    from matcher.embeddings import MiniLM
    from matcher.index import cache_path

    catalogue_file = synthetic.write_catalogue(tmp / f"catalogue-{ads}.json", ads)
    cache_dir = tmp / "cache"
    catalogue = load_catalogue(catalogue_file)  # the edge's own loader: the same hash
    model = MiniLM(threads=1, cache_dir=cache_dir)  # the edge then finds its graph there
    vectors = synthetic.ad_vectors(model.embed, catalogue.placements)
    target = cache_path(cache_dir, catalogue.content_hash, model.model_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    np.save(target, vectors, allow_pickle=False)
    return catalogue_file, cache_dir


def _bodies(texts: list[str], tag: str) -> list[bytes]:
    return [
        orjson.dumps({"post_id": f"{tag}-{i}", "message": text}) for i, text in enumerate(texts)
    ]


class FloorProcess:
    """``bench.floor_server``: the model alone on the server core, one text at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.floor_server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the floor process did not start")

    def embed_ms(self, text: str) -> float:
        self.proc.stdin.write(orjson.dumps(text).decode() + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def paired_run(
    url: str, key: str, floor: FloorProcess, texts: list[str], tag: str, warm_up: int = 0
) -> dict:
    """Each text through the floor, then through the edge (one keep-alive connection);
    p50/p99 of both and the answers seen. ``warm_up``: the first texts are sent but not
    measured."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    floors, https, non2xx = [], [], 0
    try:
        for i, text in enumerate(texts[:warm_up]):
            conn.request(
                "POST", PATH, orjson.dumps({"post_id": f"{tag}-w{i}", "message": text}), headers
            )
            conn.getresponse().read()
        texts = texts[warm_up:]
        for i, text in enumerate(texts):
            floors.append(floor.embed_ms(text))
            body = orjson.dumps({"post_id": f"{tag}-{i}", "message": text})
            a = time.perf_counter()
            conn.request("POST", PATH, body, headers)
            resp = conn.getresponse()
            resp.read()
            https.append((time.perf_counter() - a) * 1000)
            non2xx += not 200 <= resp.status < 300
    finally:
        conn.close()
    return {
        "p50": percentile(https, 50),
        "p99": percentile(https, 99),
        "floor_p50": percentile(floors, 50),
        "floor_p99": percentile(floors, 99),
        "non2xx": non2xx,
        "ms": https,
    }


def first_pass_tail(runs: list[dict], texts: list[list[str]], check: Check) -> list[dict]:
    """Per run: the share of posts due for the brand-safety second pass (their sentences
    encoded alone: one more forward pass) and the p99 over the other posts against the
    run's floor p99, so the table shows how much of the tail that pass holds.

    ``check`` judges each post alone, as the edge judged it (a batch of one), after the
    edge has stopped."""
    out = []
    for res, posts in zip(runs, texts, strict=True):
        due = [check([t])[0].second_pass for t in posts]
        settled = [ms for ms, d in zip(res["ms"], due, strict=True) if not d]
        out.append(
            {
                "due": sum(due) / max(len(due), 1),
                "p99_ratio": percentile(settled, 99) / res["floor_p99"] if settled else 0.0,
            }
        )
    return out


def _outcomes(url: str, key: str, texts: list[str]) -> dict[str, int]:
    """What the edge answers for a few posts: matched, empty or no-match (a sanity check)."""
    seen: dict[str, int] = {}
    for i, text in enumerate(texts):
        req = urllib.request.Request(
            url + PATH,
            data=orjson.dumps({"post_id": f"sanity-{i}", "message": text}),
            headers={"X-API-Key": key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = orjson.loads(resp.read())
        kind = (
            "no_match"
            if "no_ad_retry_after_seconds" in body
            else ("matched" if body.get("ads") else "empty")
        )
        seen[kind] = seen.get(kind, 0) + 1
    return seen


def run(options: Options) -> Section:
    section = Section(
        "ugc",
        "2. /v1/ugc/process against the model's forward pass",
        intro=(
            "The edge (uvicorn, one worker, model on one thread) pinned to one core with a "
            "synthetic catalogue of each size; clients on the other core. Latency: one "
            f"keep-alive connection, {SETTLE_S:.0f} s after the load before it has stopped "
            f"and after {WARM_UP_POSTS} posts that are not measured, each post first through "
            "the model alone (the floor, a "
            "separate process on the server core while the edge is idle), then through the "
            "edge, so every request is paired with the floor of its own text moments apart; "
            "it includes HTTP, auth, rate limit, validation, the matcher, state writes and "
            f"JSON. Throughput: `wrk` with {THROUGHPUT_CONNECTIONS} connections."
        ),
    )
    if not edge_env.serves(PATH, "post"):
        section.notes.append(f"Not measured: this commit's edge does not serve POST {PATH}.")
        return section
    lat = Table(
        [
            "ads",
            "p50 ms",
            "p99 ms",
            "floor p50 ms",
            "floor p99 ms",
            "p50 / floor",
            "p99 / floor",
            "second pass",
            "p99 / floor, first pass only",
            "req/s",
            "non-2xx",
            "resident MiB",
            "start s",
        ]
    )
    outcome_notes = []
    per_run = max(30, int(options.seconds * 16))  # distinct posts per latency run
    check: Check | None = None  # loaded once, after the first edge has stopped
    for ads in options.sizes:
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-ugc-{ads}-"))
        progress(f"ugc: preparing {ads:,} ads (catalogue file, cached vectors)")
        catalogue_file, cache_dir = prepare(tmp, ads)
        db = tmp / "edge.db"
        key = asyncio.run(_issue_ugc_key(db))
        headers = {"X-API-Key": key, "Content-Type": "application/json"}
        settings = edge_env.edge_settings(
            EDGE_CATALOGUE=str(catalogue_file), EDGE_CACHE_DIR=str(cache_dir)
        )
        one: list[dict] = []
        sent: list[list[str]] = []
        many: list[LoadResult] = []
        floor = FloorProcess()
        with PinnedEdge(db=db, settings=settings) as edge:
            progress(f"ugc: {ads:,}-ad edge healthy in {edge.cold_start_s:.1f} s")
            seen = _outcomes(edge.url, key, synthetic.posts(20, seed=99))
            outcome_notes.append(
                f"{_label(ads)}: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
            )
            for r in range(options.runs):
                posts = synthetic.posts(WARM_UP_POSTS + per_run, seed=1000 * ads + r)
                time.sleep(SETTLE_S)
                res = paired_run(edge.url, key, floor, posts, f"lat-{r}", WARM_UP_POSTS)
                one.append(res)
                sent.append(posts[WARM_UP_POSTS:])
                more = synthetic.posts(per_run * 8, seed=1000 * ads + 500 + r)
                many.append(
                    run_load(
                        edge.url + PATH,
                        _bodies(more, f"tput-{r}"),
                        headers=headers,
                        connections=THROUGHPUT_CONNECTIONS,
                        seconds=options.seconds,
                    )
                )
                progress(
                    f"ugc {ads:,} run {r + 1}/{options.runs}: p50 {res['p50']:.1f} ms "
                    f"p99 {res['p99']:.1f} ms (floor {res['floor_p50']:.1f}/"
                    f"{res['floor_p99']:.1f} ms), {many[-1].rps:.1f} req/s"
                )
            rss = edge.rss_mib
            start_s = edge.cold_start_s or 0.0
        floor.close()
        progress(f"ugc: {ads:,} ads, which posts were due for the brand-safety second pass")
        check = check or default_check()
        tail = first_pass_tail(one, sent, check)
        due = Spread.of([x["due"] for x in tail])
        settled = Spread.of([x["p99_ratio"] for x in tail])
        p50 = Spread.of(ratios([x["p50"] for x in one], [x["floor_p50"] for x in one]))
        p99 = Spread.of(ratios([x["p99"] for x in one], [x["floor_p99"] for x in one]))
        lat.rows.append(
            [
                _label(ads),
                Spread.of([x["p50"] for x in one]).cell(),
                Spread.of([x["p99"] for x in one]).cell(),
                Spread.of([x["floor_p50"] for x in one]).cell(),
                Spread.of([x["floor_p99"] for x in one]).cell(),
                p50.cell("{:.2f}"),
                p99.cell("{:.2f}"),
                Spread.of([100 * x["due"] for x in tail]).cell("{:.1f}%"),
                settled.cell("{:.2f}"),
                Spread.of([x.rps for x in many]).cell("{:.1f}"),
                str(sum(x["non2xx"] for x in one) + sum(x.non2xx + x.socket_errors for x in many)),
                f"{rss:.0f}",
                f"{start_s:.1f}",
            ]
        )
        if ads in AIM_P99:
            at, aim = _label(ads), AIM_P99[ads]
            rps = Spread.of([x.rps for x in many]).median
            section.headline.append(
                f"/v1/ugc/process at {at} ads over HTTP: p99 "
                f"{section.figure(f'ugc.{at}.p99', p99.median, '{:.2f}x')} the model's own "
                f"forward pass (aim <= {aim}x, {'met' if p99.median <= aim else 'NOT met'}), "
                f"p50 {section.figure(f'ugc.{at}.p50', p50.median, '{:.2f}x')}; without the "
                f"{due.median:.1%} of posts due for the brand-safety second pass, p99 "
                f"{section.figure(f'ugc.{at}.p99_first_pass', settled.median, '{:.2f}x')}; "
                f"{section.figure(f'ugc.{at}.rps', rps, '{:.0f}')} req/s on one core; "
                f"edge resident memory {section.figure(f'ugc.{at}.rss', rss, '{:.0f} MiB')}."
            )
    section.tables.append(lat)
    section.notes += [
        "Start s: spawn to healthy with the catalogue file parsed and the cached vectors "
        "loaded; resident MiB: the edge process after the runs.",
        "Second pass: the share of each run's posts that the brand-safety first pass let "
        "through but found suspicious, so their sentences were encoded alone (one more "
        "forward pass); judged again after the runs, one post at a time as the edge judged "
        "them. p99 / floor, first pass only: the p99 of the other posts of the run against "
        "the same floor p99: what the tail would be if no post paid that pass.",
        "Answers to 20 sanity posts per size: " + "; ".join(outcome_notes) + ".",
    ]
    return section
