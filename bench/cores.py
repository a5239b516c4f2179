"""Throughput by worker count on a machine with many cores: ``python -m bench.cores``.

Not a section of ``make bench``: on a two-core machine the load generator and the workers
share the cores, so ``bench.scale`` can only compare 1 and 2 workers. Here the load
generator (``wrk``, one thread per load core) has cores of its own, and the edge's worker
processes (``EDGE_WORKERS``) share the rest: the edge is started on exactly as many cores as
it has workers, so each row asks "what does one more core running one more worker buy".

Two loads, as in ``bench.scale``: durable impression beacons (each a unique signed token,
committed to the one SQLite database before the answer) and ``/v1/ugc/process`` at 10k ads
with distinct posts. Worker counts alternate in order between runs. The result is a
Markdown table on stdout (or ``--output``) with each count's throughput and its ratio to
one worker, median and range over the runs.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from pathlib import Path

from bench import edge_env, synthetic
from bench.ingest import mint_bodies
from bench.load import LoadResult, have_wrk, run_load
from bench.options import progress
from bench.report import Table
from bench.scale import workers_edge
from bench.servers import PinnedEdge
from bench.stats import Spread, ratios
from bench.ugc import _bodies, prepare
from edge.signing import Signer

IMPRESSION = "/dea/url/impression"
UGC = "/v1/ugc/process"
UGC_ADS = 10_000
BEACON_CONNECTIONS_PER_WORKER = 32
UGC_CONNECTIONS_PER_WORKER = 4
# Unique beacons and distinct posts per worker: more than one worker serves in a run, so
# no token comes round twice (a repeat is a cheaper, deduplicated answer) and no post hits
# the embedding cache.
BEACONS_PER_WORKER = 80_000
POSTS_PER_WORKER = 400


def _counts(cores: int, load_cores: int) -> list[int]:
    room = cores - load_cores
    counts, n = [], 1
    while n <= room:
        counts.append(n)
        n *= 2
    if counts and counts[-1] != room:
        counts.append(room)
    return counts


def _parse(argv: list[str] | None) -> argparse.Namespace:
    cores = os.cpu_count() or 1
    p = argparse.ArgumentParser(prog="python -m bench.cores", description=__doc__)
    p.add_argument(
        "--load-cores",
        type=int,
        default=max(1, cores // 4),
        help="cores (and wrk threads) for the load generator, from core 0 (default: a quarter)",
    )
    p.add_argument(
        "--workers",
        default="",
        help="comma-separated worker counts (default: 1, 2, 4, ... up to the cores left)",
    )
    p.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    p.add_argument("--seconds", type=float, default=5.0, help="one load run (default 5)")
    p.add_argument("--output", type=Path, help="write the Markdown here instead of stdout")
    args = p.parse_args(argv)
    if not 1 <= args.load_cores < cores:
        p.error(f"--load-cores must leave a core for the edge (this machine has {cores})")
    try:
        args.counts = (
            [int(x) for x in args.workers.split(",")]
            if args.workers
            else _counts(cores, args.load_cores)
        )
    except ValueError:
        p.error("--workers takes whole numbers separated by commas, e.g. 1,2,4")
    if not args.counts or min(args.counts) < 1 or max(args.counts) > cores - args.load_cores:
        p.error(f"worker counts must be 1..{cores - args.load_cores} on this machine")
    if args.runs < 1 or args.seconds <= 0:
        p.error("--runs must be at least 1 and --seconds positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not have_wrk():
        print("bench.cores needs wrk on PATH (the Python generator cannot load many cores)")
        return 2
    load_cpus = set(range(args.load_cores))
    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    ad = edge_env.bench_ad(synthetic_catalogue=True)  # the edge serves prepare()'s
    json_headers = {"Content-Type": "application/json"}
    tmp = Path(tempfile.mkdtemp(prefix="bench-cores-"))
    progress(f"{os.cpu_count()} cores: load on {sorted(load_cpus)}, workers {args.counts}")
    catalogue_file, cache_dir = prepare(tmp, UGC_ADS)
    # Each configuration starts on a fresh database and a fresh edge, so one set of unique
    # beacons and distinct posts serves them all (a worker count takes its share).
    most = max(args.counts)
    progress(f"minting {BEACONS_PER_WORKER * most:,} beacons")
    all_beacons = mint_bodies(signer, BEACONS_PER_WORKER * most, ad)
    all_posts = synthetic.posts(POSTS_PER_WORKER * most, seed=9000)
    beacons: dict[int, list[LoadResult]] = {n: [] for n in args.counts}
    ugc: dict[int, list[LoadResult]] = {n: [] for n in args.counts}
    for r in range(args.runs):
        order = args.counts if r % 2 == 0 else list(reversed(args.counts))
        for workers in order:
            db = tmp / f"w{workers}-{r}.db"
            ugc_key, settings = workers_edge(db, key, workers, catalogue_file, cache_dir)
            edge_cpus = set(range(args.load_cores, args.load_cores + workers))
            with PinnedEdge(db=db, settings=settings, cpu=edge_cpus) as edge:
                res = run_load(
                    edge.url + IMPRESSION,
                    all_beacons[: BEACONS_PER_WORKER * workers],
                    headers=edge_env.BEACON_HEADERS,
                    clients_every=edge_env.BEACONS_PER_CLIENT,
                    connections=max(args.load_cores, BEACON_CONNECTIONS_PER_WORKER * workers),
                    seconds=args.seconds,
                    cpus=load_cpus,
                )
                beacons[workers].append(res)
                ures = run_load(
                    edge.url + UGC,
                    _bodies(all_posts[: POSTS_PER_WORKER * workers], f"cores-{r}-{workers}"),
                    headers={**json_headers, "X-API-Key": ugc_key},
                    connections=max(args.load_cores, UGC_CONNECTIONS_PER_WORKER * workers),
                    seconds=args.seconds,
                    cpus=load_cpus,
                )
                ugc[workers].append(ures)
            progress(
                f"run {r + 1}/{args.runs}, {workers} worker(s): beacons {res.rps:,.0f} req/s "
                f"(p99 {res.p99_ms:.1f} ms), ugc {ures.rps:,.1f} req/s (p99 {ures.p99_ms:.0f} ms)"
            )
    table = _table(args.counts, beacons, ugc)
    text = (
        f"{os.cpu_count()} cores, load generator (wrk, {args.load_cores} threads) on "
        f"{args.load_cores} of them, each worker count on as many cores; {args.runs} runs of "
        f"{args.seconds:g} s, median (range).\n\n{table.markdown()}\n"
    )
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _table(
    counts: list[int], beacons: dict[int, list[LoadResult]], ugc: dict[int, list[LoadResult]]
) -> Table:
    t = Table(
        [
            "workers (= cores)",
            "beacons req/s",
            f"/ {counts[0]} worker(s)",
            "beacon p99 ms",
            f"/v1/ugc/process req/s ({UGC_ADS:,} ads)",
            f"/ {counts[0]} worker(s)",
            "ugc p99 ms",
            "errors",
        ]
    )
    one_b = [x.rps for x in beacons[counts[0]]]
    one_u = [x.rps for x in ugc[counts[0]]]
    for n in counts:
        b, u = beacons[n], ugc[n]
        t.rows.append(
            [
                str(n),
                Spread.of([x.rps for x in b]).cell("{:,.0f}"),
                Spread.of(ratios([x.rps for x in b], one_b)).cell("{:.2f}"),
                Spread.of([x.p99_ms for x in b]).cell("{:.1f}"),
                Spread.of([x.rps for x in u]).cell("{:.1f}"),
                Spread.of(ratios([x.rps for x in u], one_u)).cell("{:.2f}"),
                Spread.of([x.p99_ms for x in u]).cell("{:.0f}"),
                str(sum(x.non2xx + x.socket_errors for x in (*b, *u))),
            ]
        )
    return t


if __name__ == "__main__":
    raise SystemExit(main())
