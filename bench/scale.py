"""Section 6: scaling out. Throughput with 1 and 2 workers on this machine (impression
beacons on SQLite, and ``/v1/ugc/process`` at 10k ads), and beacon ingest on PostgreSQL
with two edge nodes next to SQLite with one, in the same run.

Servers are not pinned here (two workers need both cores), so the load generator shares
the cores with them: the figures are ratios between configurations measured alternately in
one run, never absolutes.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import threading
from pathlib import Path

from bench import edge_env, synthetic
from bench.ingest import mint_bodies
from bench.load import LoadResult, run_load
from bench.options import Options, progress
from bench.report import Section, Table
from bench.servers import PinnedEdge
from bench.stats import Spread, ratios
from bench.ugc import _bodies, _issue_ugc_key, prepare
from edge.signing import Signer

IMPRESSION = "/dea/url/impression"
UGC = "/v1/ugc/process"
CONNECTIONS = 32
UGC_CONNECTIONS = 8
UGC_ADS = 10_000


def _split_load(
    urls: list[str], bodies: list[list[bytes]], headers: dict[str, str], seconds: float
) -> LoadResult:
    """One load generator per URL at once, each with its own bodies; summed. (Each list is
    minted on its own: a token is bound to the client its place in the list sends it from.)"""
    results: list[LoadResult | None] = [None] * len(urls)

    def go(i: int) -> None:
        results[i] = run_load(
            urls[i],
            bodies[i],
            headers=headers,
            connections=CONNECTIONS // len(urls),
            seconds=seconds,
            clients_every=edge_env.BEACONS_PER_CLIENT,
        )

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r for r in results if r is not None]
    return LoadResult(
        requests=sum(r.requests for r in done),
        seconds=max(r.seconds for r in done),
        non2xx=sum(r.non2xx for r in done),
        socket_errors=sum(r.socket_errors for r in done),
        p50_ms=max(r.p50_ms for r in done),
        p99_ms=max(r.p99_ms for r in done),
        tool=done[0].tool,
    )


def workers_edge(
    db: Path, key: str, workers: int, catalogue_file: Path, cache_dir: Path
) -> tuple[str, dict[str, str]]:
    """A partner key issued in ``db`` and the settings of an edge with ``workers`` workers
    serving the catalogue from its vector cache."""
    ugc_key = asyncio.run(_issue_ugc_key(db))
    settings = edge_env.edge_settings(
        signing_key=key,
        EDGE_WORKERS=str(workers),
        EDGE_CATALOGUE=str(catalogue_file),
        EDGE_CACHE_DIR=str(cache_dir),
    )
    return ugc_key, settings


def run(options: Options) -> Section:
    section = Section(
        "scale",
        "6. Scaling out: workers on one machine, PostgreSQL nodes",
        intro=(
            "Impression beacons (`POST /dea/url/impression`, each a unique signed token, "
            f"committed before the answer) at {CONNECTIONS} connections, and "
            f"`/v1/ugc/process` at {UGC_ADS:,} ads with {UGC_CONNECTIONS} connections and "
            "distinct posts, with 1 and then 2 worker processes (`EDGE_WORKERS`) on SQLite; "
            "then beacon ingest with two edge nodes (one worker each) on one PostgreSQL 15 "
            "(fsync on) next to one SQLite node. Configurations alternate within each run; "
            "nothing is pinned, so the load generator shares the two cores."
        ),
    )
    from tests.pgserver import PostgresServer  # the tests' throwaway server (Debian's 15)

    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    ad = edge_env.bench_ad(synthetic_catalogue=True)  # the edge serves prepare()'s
    json_headers = {"Content-Type": "application/json"}
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    catalogue_file, cache_dir = prepare(tmp, UGC_ADS)
    beacons: dict[str, list[LoadResult]] = {"sqlite-1": [], "sqlite-2": [], "pg-2nodes": []}
    ugc: dict[int, list[LoadResult]] = {1: [], 2: []}
    pg = PostgresServer(fsync=True)
    try:
        for r in range(options.runs):
            for workers in (1, 2) if r % 2 == 0 else (2, 1):
                db = tmp / f"w{workers}-{r}.db"
                ugc_key, settings = workers_edge(db, key, workers, catalogue_file, cache_dir)
                with PinnedEdge(db=db, settings=settings, cpu=None) as edge:
                    res = run_load(
                        edge.url + IMPRESSION,
                        mint_bodies(signer, 40_000, ad),
                        headers=edge_env.BEACON_HEADERS,
                        connections=CONNECTIONS,
                        seconds=options.seconds,
                        clients_every=edge_env.BEACONS_PER_CLIENT,
                    )
                    beacons[f"sqlite-{workers}"].append(res)
                    posts = synthetic.posts(400, seed=7000 + 10 * r + workers)
                    ures = run_load(
                        edge.url + UGC,
                        _bodies(posts, f"scale-{r}-{workers}"),
                        headers={**json_headers, "X-API-Key": ugc_key},
                        connections=UGC_CONNECTIONS,
                        seconds=options.seconds,
                    )
                    ugc[workers].append(ures)
                progress(
                    f"scale run {r + 1}/{options.runs}, {workers} worker(s): beacons "
                    f"{res.rps:,.0f} req/s, ugc {ures.rps:,.1f} req/s"
                )
            url = pg.new_database()
            settings = edge_env.edge_settings(signing_key=key)
            with (
                PinnedEdge(db=url, settings=settings, cpu=None) as a,
                PinnedEdge(db=url, settings=settings, cpu=None) as b,
            ):
                res = _split_load(
                    [a.url + IMPRESSION, b.url + IMPRESSION],
                    [mint_bodies(signer, 20_000, ad) for _ in range(2)],
                    edge_env.BEACON_HEADERS,
                    options.seconds,
                )
            beacons["pg-2nodes"].append(res)
            progress(f"scale run {r + 1}/{options.runs}, PostgreSQL 2 nodes: {res.rps:,.0f} req/s")
    finally:
        pg.close()

    t = Table(["configuration", "beacons req/s", "p99 ms", "non-2xx"])
    for name, label in (
        ("sqlite-1", "SQLite, 1 worker"),
        ("sqlite-2", "SQLite, 2 workers"),
        ("pg-2nodes", "PostgreSQL, 2 nodes x 1 worker"),
    ):
        rs = beacons[name]
        t.rows.append(
            [
                label,
                Spread.of([x.rps for x in rs]).cell("{:,.0f}"),
                Spread.of([x.p99_ms for x in rs]).cell("{:.1f}"),
                str(sum(x.non2xx + x.socket_errors for x in rs)),
            ]
        )
    two_one = Spread.of(
        ratios([x.rps for x in beacons["sqlite-2"]], [x.rps for x in beacons["sqlite-1"]])
    )
    pg_sqlite = Spread.of(
        ratios([x.rps for x in beacons["pg-2nodes"]], [x.rps for x in beacons["sqlite-1"]])
    )
    t.rows.append(["**ratio 2 workers / 1 (beacons)**", two_one.cell("{:.2f}"), "", ""])
    t.rows.append(["**ratio PostgreSQL 2 nodes / SQLite 1**", pg_sqlite.cell("{:.2f}"), "", ""])
    section.tables.append(t)

    u = Table(["workers", f"/v1/ugc/process req/s ({UGC_ADS:,} ads)", "p99 ms", "non-2xx"])
    for workers in (1, 2):
        rs = ugc[workers]
        u.rows.append(
            [
                str(workers),
                Spread.of([x.rps for x in rs]).cell("{:.1f}"),
                Spread.of([x.p99_ms for x in rs]).cell("{:.0f}"),
                str(sum(x.non2xx + x.socket_errors for x in rs)),
            ]
        )
    ugc_ratio = Spread.of(ratios([x.rps for x in ugc[2]], [x.rps for x in ugc[1]]))
    u.rows.append(["**ratio 2 / 1**", ugc_ratio.cell("{:.2f}"), "", ""])
    section.tables.append(u)
    section.headline.append(
        f"Scale-out: 2 workers / 1 = "
        f"{section.figure('scale.ugc_workers', ugc_ratio.median, '{:.2f}x')} on "
        f"/v1/ugc/process, {section.figure('scale.beacon_workers', two_one.median, '{:.2f}x')} "
        f"on beacons; PostgreSQL 2 nodes / SQLite 1 = "
        f"{section.figure('scale.pg_sqlite', pg_sqlite.median, '{:.2f}x')} on beacons."
    )
    return section
