"""Section: batch while busy. ``POST /v1/ugc/process`` at 10k ads under 1, 4, 8 and 16
closed-loop clients, against one edge worker with ``EDGE_MATCH_BATCH`` off (1) and on,
run after run alternately; and the model's own cost per text at each batch size.

Both edges run at once on the server core with the same catalogue and vector cache (the
idle one costs nothing); each load run sends distinct posts with their own ``post_id``s,
so no query-cache hit and no no-match window short-cuts a request. CPU per request is the
edge process's user + system time over the run, divided by the requests answered.

``python -m bench.batching forward SIZES COUNT`` is the child that measures the forward
pass: pinned to the server core, ``COUNT`` 40-word posts through ``MiniLM.encode`` in
batches of each size, CPU time of the thread and minor page faults per text, printed as
one JSON object.

``python -m bench.batching open RATES ROUNDS SECONDS`` (not part of ``make bench``: minutes)
compares the two edges at equal offered load: posts arrive at random (Poisson) at each
rate in requests per second, each on a new connection, whatever the answers' speed; p50,
p99 and CPU per request per rate and edge, the edges alternating, the order swapped each
round.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson

from bench import edge_env, synthetic
from bench.load import LoadResult, run_load
from bench.options import Options, progress
from bench.report import Section, Table
from bench.servers import LOAD_CPU, SERVER_CPU, PinnedEdge
from bench.stats import Spread, percentile
from bench.ugc import PATH, _bodies, _issue_ugc_key, prepare

ADS = 10_000
CLIENTS = (1, 4, 8, 16)
BATCH_ON = 4  # EDGE_MATCH_BATCH of the "on" edge
MODES = {"off": 1, "on": BATCH_ON}
FORWARD_SIZES = (1, 2, 4, 8, 16)


def forward_cost(sizes: tuple[int, ...], count: int) -> dict[str, dict[str, float]]:
    """CPU ms and minor faults per text of ``MiniLM.encode`` at each batch size (the
    sizes interleaved pass by pass, the best of three passes), in this process."""
    from matcher.embeddings import MiniLM, fix_mmap_threshold

    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > SERVER_CPU:
        os.sched_setaffinity(0, {SERVER_CPU})
    fix_mmap_threshold()  # as ``edge serve`` does before it loads anything
    model = MiniLM(threads=1)
    texts = synthetic.posts(count, seed=4242, words=40)
    model.encode(texts[: max(sizes)])
    cpu: dict[int, list[float]] = {s: [] for s in sizes}
    faults: dict[int, list[float]] = {s: [] for s in sizes}
    for _ in range(3):
        for size in sizes:
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.thread_time()
            for start in range(0, count, size):
                model.encode(texts[start : start + size])
            cpu[size].append((time.thread_time() - t0) * 1000 / count)
            faults[size].append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / count)
    return {str(s): {"cpu_ms": min(cpu[s]), "faults": sorted(faults[s])[1]} for s in sizes}


def _forward_child(count: int) -> dict[str, dict[str, float]]:
    sizes = ",".join(str(s) for s in FORWARD_SIZES)
    out = subprocess.run(
        [sys.executable, "-m", "bench.batching", "forward", sizes, str(count)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, dict[str, float]] = orjson.loads(out)
    return result


def _one_run(edge: PinnedEdge, key: str, clients: int, seconds: float, tag: str) -> dict:
    posts = synthetic.posts(max(200, int(seconds * 120)), seed=zlib.crc32(tag.encode()))
    before = sum(edge.thread_cpu_s().values())
    res: LoadResult = run_load(
        edge.url + PATH,
        _bodies(posts, tag),
        headers={"X-API-Key": key, "Content-Type": "application/json"},
        connections=clients,
        seconds=seconds,
    )
    cpu = sum(edge.thread_cpu_s().values()) - before
    return {
        "rps": res.rps,
        "cpu_ms": cpu * 1000 / max(1, res.requests),
        "p50": res.p50_ms,
        "p99": res.p99_ms,
        "bad": res.non2xx + res.socket_errors,
    }


@contextlib.contextmanager
def _edges() -> Iterator[tuple[dict[str, PinnedEdge], dict[str, str]]]:
    """The off and on edges over one 10k-ad catalogue and vector cache, and their keys."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-batching-"))
    progress(f"batching: preparing {ADS:,} ads")
    catalogue_file, cache_dir = prepare(tmp, ADS)
    edges: dict[str, PinnedEdge] = {}
    keys: dict[str, str] = {}
    try:
        for mode, batch in MODES.items():
            db = tmp / f"edge-{mode}.db"
            keys[mode] = asyncio.run(_issue_ugc_key(db))
            settings = edge_env.edge_settings(
                EDGE_CATALOGUE=str(catalogue_file),
                EDGE_CACHE_DIR=str(cache_dir),
                EDGE_MATCH_BATCH=str(batch),
            )
            edges[mode] = PinnedEdge(db=db, settings=settings).start()
        yield edges, keys
    finally:
        for edge in edges.values():
            edge.stop()


async def _open_loop(edge: PinnedEdge, key: str, rate: float, seconds: float, tag: str) -> dict:
    """Poisson arrivals at ``rate`` per second for ``seconds``, each post on its own
    connection; latency from the arrival to the last byte of the answer."""
    posts = synthetic.posts(int(rate * seconds * 2) + 50, seed=zlib.crc32(tag.encode()))
    rng = random.Random(zlib.crc32(tag.encode()))
    latencies: list[float] = []
    bad = 0

    async def one(i: int) -> None:
        nonlocal bad
        body = orjson.dumps({"post_id": f"{tag}-{i}", "message": posts[i]})
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: {edge.host}\r\nX-API-Key: {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        began = time.perf_counter()
        reader, writer = await asyncio.open_connection(edge.host, edge.port)
        try:
            writer.write(head.encode() + body)
            status = await reader.readline()
            await reader.read()  # to the end: the edge closes after the answer
        finally:
            writer.close()
        latencies.append((time.perf_counter() - began) * 1000)
        bad += b" 200 " not in status

    tasks = []
    at = time.perf_counter()
    end = at + seconds
    while (at := at + rng.expovariate(rate)) < end:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        tasks.append(asyncio.ensure_future(one(len(tasks))))
    await asyncio.gather(*tasks)
    return {
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "requests": len(latencies),
        "bad": bad,
    }


def open_loop(rates: list[float], rounds: int, seconds: float) -> None:
    """Print, per rate and edge, the rounds' p50/p99 and CPU per request (see the module)."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > LOAD_CPU:
        os.sched_setaffinity(0, {LOAD_CPU})
    seen: dict[tuple[float, str], list[dict]] = {}
    with _edges() as (edges, keys):
        for r in range(rounds):
            for rate in rates:
                for mode in list(MODES) if r % 2 == 0 else list(reversed(MODES)):
                    before = sum(edges[mode].thread_cpu_s().values())
                    res = asyncio.run(
                        _open_loop(edges[mode], keys[mode], rate, seconds, f"o{mode}-{r}-{rate}")
                    )
                    cpu = sum(edges[mode].thread_cpu_s().values()) - before
                    res["cpu_ms"] = cpu * 1000 / max(1, res["requests"])
                    seen.setdefault((rate, mode), []).append(res)
                    progress(
                        f"open loop {rate:g}/s {mode} round {r + 1}/{rounds}: p50 "
                        f"{res['p50']:.0f} p99 {res['p99']:.0f} ms, {res['cpu_ms']:.1f} CPU "
                        f"ms/req, {res['requests']} requests, {res['bad']} not 200, load "
                        f"{os.getloadavg()[0]:.1f}"
                    )
    for (rate, mode), runs in sorted(seen.items()):
        print(
            f"{rate:g}/s {mode}: p50 {Spread.of([x['p50'] for x in runs]).cell('{:.0f}')} ms, "
            f"p99 {Spread.of([x['p99'] for x in runs]).cell('{:.0f}')} ms, CPU "
            f"{Spread.of([x['cpu_ms'] for x in runs]).cell()} ms/req"
        )


def run(options: Options) -> Section:
    section = Section(
        "batching",
        "3b. Batch while busy: /v1/ugc/process under concurrency",
        intro=(
            f"One edge worker pinned to one core, {ADS // 1000}k ads, distinct 40-word "
            f"posts; `wrk` with N connections (closed loop: each sends its next post when "
            f"the last is answered). Off: `EDGE_MATCH_BATCH=1`; on: `EDGE_MATCH_BATCH="
            f"{BATCH_ON}` (posts that queued while the model was busy share one forward "
            "pass). The two edges run alternately, the order swapped each round; each cell "
            "is the median of the rounds. CPU ms per request: the edge's user + system time "
            "over the run."
        ),
    )
    from edge.settings import Settings

    if not edge_env.serves(PATH, "post") or "match_batch" not in Settings.__dataclass_fields__:
        section.notes.append("Not measured: this commit's edge has no EDGE_MATCH_BATCH.")
        return section
    rounds = max(1, options.runs // 2)  # full: 2, quick: 1, ``--runs 12``: 6
    seconds = max(2.0, options.seconds * 0.6)
    modes = MODES
    figures: dict[tuple[str, int], list[dict]] = {}
    load = os.getloadavg()
    with _edges() as (edges, keys):
        for r in range(rounds):
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for clients in CLIENTS:
                for mode in order:
                    res = _one_run(
                        edges[mode], keys[mode], clients, seconds, f"{mode}-{r}-{clients}"
                    )
                    figures.setdefault((mode, clients), []).append(res)
                    progress(
                        f"batching {mode} c{clients} round {r + 1}/{rounds}: "
                        f"{res['rps']:.1f} req/s, {res['cpu_ms']:.1f} CPU ms/req, "
                        f"p50 {res['p50']:.0f} p99 {res['p99']:.0f} ms"
                    )
    load_after = os.getloadavg()
    progress("batching: forward pass per batch size")
    forward = _forward_child(32 if options.quick else 64)

    def med(mode: str, clients: int, what: str) -> float:
        return Spread.of([x[what] for x in figures[(mode, clients)]]).median

    table = Table(
        [
            "clients",
            "req/s off",
            "req/s on",
            "CPU ms/req off",
            "CPU ms/req on",
            "p50 ms off",
            "p50 ms on",
            "p99 ms off",
            "p99 ms on",
            "non-2xx",
        ]
    )
    for clients in CLIENTS:
        table.rows.append(
            [
                str(clients),
                *(f"{med(m, clients, 'rps'):.1f}" for m in modes),
                *(f"{med(m, clients, 'cpu_ms'):.1f}" for m in modes),
                *(f"{med(m, clients, 'p50'):.0f}" for m in modes),
                *(f"{med(m, clients, 'p99'):.0f}" for m in modes),
                str(sum(x["bad"] for m in modes for x in figures[(m, clients)])),
            ]
        )
    fwd = Table(["texts per forward pass", "CPU ms per text", "minor faults per text"])
    for size, cost in forward.items():
        fwd.rows.append([size, f"{cost['cpu_ms']:.2f}", f"{cost['faults']:.0f}"])
    section.tables += [table, fwd]
    c = 8
    gain = med("on", c, "rps") / med("off", c, "rps")
    p99 = med("on", c, "p99") / med("off", c, "p99")
    cpu = med("on", c, "cpu_ms") / med("off", c, "cpu_ms")
    one = forward["1"]["cpu_ms"]
    best = min(forward.values(), key=lambda x: x["cpu_ms"])["cpu_ms"]
    section.headline.append(
        f"Batch while busy (`EDGE_MATCH_BATCH={BATCH_ON}` against 1) at {c} clients, "
        f"{ADS // 1000}k ads: req/s "
        f"{section.figure('batching.c8.rps', gain, '{:.2f}x')}, CPU per request "
        f"{section.figure('batching.c8.cpu', cpu, '{:.2f}x')}, p99 "
        f"{section.figure('batching.c8.p99', p99, '{:.2f}x')}; the forward pass alone: "
        f"{section.figure('batching.forward', best / one, '{:.2f}x')} the CPU per text "
        "at its best batch size."
    )
    section.notes += [
        f"Load average (1 min) before / after the load runs: {load[0]:.1f} / {load_after[0]:.1f}.",
        "Closed loop favours batching: a faster edge is also offered more. At equal offered "
        "load (`python -m bench.batching open 20,28,34 3 12`, minutes) see docs/decisions.md, "
        '"Batch while busy": why the edge ships with it off.',
        "Forward pass: 40-word posts through `MiniLM.encode` in a child process pinned to the "
        "server core while the edges were stopped; CPU time of its thread, best of three "
        "interleaved passes.",
    ]
    return section


if __name__ == "__main__":
    if sys.argv[1:2] == ["open"]:
        open_loop([float(x) for x in sys.argv[2].split(",")], int(sys.argv[3]), float(sys.argv[4]))
    elif sys.argv[1:2] == ["forward"]:
        sizes_arg = tuple(int(s) for s in sys.argv[2].split(","))
        sys.stdout.write(orjson.dumps(forward_cost(sizes_arg, int(sys.argv[3]))).decode() + "\n")
