"""Section 1: beacon ingest. ``POST /dea/url/impression`` with durable storage against a bare
ASGI app answering 204, both served by the same uvicorn configuration on the same core,
loaded from the other core, alternately in the same run.

Every edge request carries its own freshly signed impression token and impression id, so
each one is a real, counted, fsynced impression (no replay short-cut) from a browser's user
agent, four from each public client address, bound to its client as a match binds it, valid
and billed; the stored, valid and billed counts
are checked against the acknowledged count at the end.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from pathlib import Path

import orjson

from bench import edge_env
from bench.load import LoadResult, client_address, run_load
from bench.options import Options, progress
from bench.report import Section, Table
from bench.servers import BareServer, PinnedEdge
from bench.stats import Spread, ratios
from edge.beacons import issue_impression_token
from edge.ivt import network_binding
from edge.signing import Signer

PATH = "/dea/url/impression"
CONNECTIONS = 32  # enough to saturate one core; group commit gets full batches
MINT_MARGIN = 1.5  # tokens minted per edge run: margin x (the previous run's requests)


def tag_impression_id(at: float) -> str:
    """An impression id as the tag makes it (tag/src/util.js ``uid``): the page's clock in
    milliseconds in base 36, then four random 32-bit numbers, joined by "-"."""
    ms, digits = int(at * 1000), ""
    while ms:
        ms, d = divmod(ms, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + digits
    return "-".join([digits, *(str(secrets.randbits(32)) for _ in range(4))])


def mint_bodies(
    signer: Signer,
    count: int,
    ad: edge_env.BenchAd,
    clients_every: int = edge_env.BEACONS_PER_CLIENT,
) -> list[bytes]:
    """``count`` beacon bodies, each with a fresh token and impression id. Each token is bound
    to the client the load generators send its body from (``client_address``, the bench's
    browser user agent), as the match that placed the ad binds it; ``clients_every`` must be
    the one the load is run with (0: tokens bound to no client)."""
    # Issued one after the other, as a page's placements are before their beacons.
    bodies = []
    for i in range(count):
        now = time.time()
        binding = (
            network_binding(signer, client_address(i, clients_every), edge_env.BROWSER_UA)
            if clients_every
            else None
        )
        token, _ = issue_impression_token(
            signer,
            surface="url",
            env="production",
            ad_id=ad.ad_id,
            campaign_id=ad.campaign_id,
            now=now,
            publisher_id=ad.publisher_id,
            cpm_usd=ad.cpm_usd,
            slot_id="bench-slot",
            client=binding,
        )
        body = {
            "impression_token": token,
            "impression_id": tag_impression_id(now),
            "v": "bench",
            "visible_ratio": 0.75,
            "visible_ms": 1000,
        }
        bodies.append(orjson.dumps(body))
    return bodies


def _cpu_per_request(
    before: dict[str, float], server: PinnedEdge, res: LoadResult
) -> dict[str, float]:
    """CPU microseconds per request of a run, by thread ("main" is the event loop)."""
    after = server.thread_cpu_s()
    n = max(1, res.requests)
    per = {k: (v - before.get(k, 0.0)) * 1e6 / n for k, v in after.items()}
    per["total"] = sum(per.values())
    return per


def run(options: Options) -> Section:
    section = Section(
        "ingest",
        "1. Beacon ingest: /dea/url/impression against a bare ASGI app",
        intro=(
            "Both servers run under uvicorn (uvloop, httptools, no access log) pinned to one "
            "core; `wrk` (or the Python fallback) loads them from the other core. The edge "
            "answers only after the impression is committed to SQLite (WAL, "
            "`synchronous=FULL`, group commit); each request carries a unique signed token "
            "and impression id. Throughput is at "
            f"{CONNECTIONS} connections; latency is also measured with one connection "
            "(service time, one fsync per request)."
        ),
    )
    if not edge_env.serves(PATH, "post"):
        section.notes.append(f"Not measured: this commit's edge does not serve POST {PATH}.")
        return section

    key = secrets.token_urlsafe(32)
    signer = Signer(key.encode())
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    db = tmp / "edge.db"
    ad = edge_env.bench_ad()
    headers = edge_env.BEACON_HEADERS
    results: dict[str, dict[str, list[LoadResult]]] = {
        name: {"sat": [], "one": []} for name in ("bare", "starlette", "edge")
    }
    to_mint = 20_000
    cpu: dict[str, list[dict[str, float]]] = {name: [] for name in results}
    with (
        BareServer() as bare,
        BareServer("starlette_app") as framework,
        PinnedEdge(db=db, settings=edge_env.edge_settings(signing_key=key)) as edge,
    ):
        servers = {"bare": bare, "starlette": framework, "edge": edge}
        progress("ingest: warming up the three servers")
        unique_acked = 0  # edge answers 2xx to a token it had not seen before
        for name, server in servers.items():
            warm = mint_bodies(signer, 2000, ad)
            res = run_load(
                server.url + PATH,
                warm,
                headers=headers,
                connections=CONNECTIONS,
                seconds=1,
                clients_every=edge_env.BEACONS_PER_CLIENT,
            )
            if name == "edge":
                unique_acked += min(res.requests - res.non2xx, len(warm))
                # enough unique tokens for a run at the warm-up's pace, with a margin
                to_mint = max(to_mint, int(res.rps * options.seconds * MINT_MARGIN))
        for r in range(options.runs):
            order = ("bare", "starlette", "edge")
            order = order if r % 2 == 0 else order[::-1]
            for name in order:
                for mode, conns, secs in (
                    ("sat", CONNECTIONS, options.seconds),
                    ("one", 1, max(1.0, options.seconds / 2)),
                ):
                    bodies = mint_bodies(signer, to_mint if mode == "sat" else 5000, ad)
                    cpu_before = servers[name].thread_cpu_s()
                    res = run_load(
                        servers[name].url + PATH,
                        bodies,
                        headers=headers,
                        connections=conns,
                        seconds=secs,
                        clients_every=edge_env.BEACONS_PER_CLIENT,
                    )
                    results[name][mode].append(res)
                    if mode == "sat":
                        cpu[name].append(_cpu_per_request(cpu_before, servers[name], res))
                    if name == "edge":
                        unique_acked += min(res.requests - res.non2xx, len(bodies))
                    if name == "edge" and mode == "sat":
                        to_mint = max(to_mint, int(res.requests * MINT_MARGIN))
                    if res.requests > len(bodies) and name == "edge":
                        section.notes.append(
                            f"Run {r + 1} ({mode}) sent {res.requests - len(bodies)} replays "
                            "(more requests than minted tokens); replays are not counted."
                        )
                    progress(
                        f"ingest run {r + 1}/{options.runs} {name:4} {mode}: "
                        f"{res.rps:,.0f} req/s p50 {res.p50_ms:.2f} ms p99 {res.p99_ms:.2f} ms"
                        f" non-2xx {res.non2xx}"
                    )
        edge_rss = edge.rss_mib
    stored, invalid, billed = edge_env.impression_tally(db)
    tool = results["edge"]["sat"][0].tool

    t = Table(
        [
            "server",
            "req/s",
            "p50 ms",
            "p99 ms",
            "p50 ms, 1 conn",
            "p99 ms, 1 conn",
            "CPU us/req",
            "non-2xx",
        ]
    )
    for name, label in (
        ("bare", "bare ASGI app, 204"),
        ("starlette", "Starlette, one route, 204 (reference)"),
        ("edge", f"edge {PATH}"),
    ):
        sat, one = results[name]["sat"], results[name]["one"]
        t.rows.append(
            [
                label,
                Spread.of([x.rps for x in sat]).cell("{:,.0f}"),
                Spread.of([x.p50_ms for x in sat]).cell("{:.2f}"),
                Spread.of([x.p99_ms for x in sat]).cell("{:.2f}"),
                Spread.of([x.p50_ms for x in one]).cell("{:.2f}"),
                Spread.of([x.p99_ms for x in one]).cell("{:.2f}"),
                Spread.of([c["total"] for c in cpu[name]]).cell("{:.0f}"),
                str(sum(x.non2xx + x.socket_errors for x in sat + one)),
            ]
        )
    ratio = Spread.of(
        ratios([x.rps for x in results["edge"]["sat"]], [x.rps for x in results["bare"]["sat"]])
    )
    t.rows.append(["**ratio edge / bare (req/s)**", ratio.cell("{:.2f}"), *[""] * 6])
    framework_ratio = Spread.of(
        ratios(
            [x.rps for x in results["starlette"]["sat"]], [x.rps for x in results["bare"]["sat"]]
        )
    )
    t.rows.append(["ratio Starlette / bare (req/s)", framework_ratio.cell("{:.2f}"), *[""] * 6])
    section.tables.append(t)
    cpu_ratio = Spread.of(
        ratios([c["total"] for c in cpu["bare"]], [c["total"] for c in cpu["edge"]])
    )

    def edge_cpu(part: str) -> float:
        return Spread.of([c.get(part, 0.0) for c in cpu["edge"]]).median

    section.notes += [
        f"Load generator: {tool}"
        + (
            " (a Python generator saturates early: the ratio is a lower bound)"
            if tool == "python"
            else " 4.1, one thread on the other core"
        )
        + ".",
        f"Aim: ratio >= 0.5. Measured {ratio.median:.2f} "
        f"({'met' if ratio.median >= 0.5 else 'NOT met'}); the framework alone (one "
        f"Starlette route) reaches {framework_ratio.median:.2f}.",
        f"Durability check: {stored:,} impressions stored for {unique_acked:,} acknowledged "
        f"first-time beacons ({'none lost' if stored >= unique_acked else 'SOME LOST'}); "
        f"{stored - invalid:,} of them valid and {billed:,} billed. Each beacon comes with a "
        f"browser's user agent, from a public US client address of its own for every "
        f"{edge_env.BEACONS_PER_CLIENT} (X-Forwarded-For from the trusted loopback proxy), "
        "carries a token bound to that client and user agent, and bills its CPM: the path "
        "of a browser's beacon, with its client's geofence verdict, binding check, rate, "
        "billing, spend and counters.",
        f"Edge resident memory after the runs: {edge_rss:.0f} MiB.",
        "CPU us/req: CPU time of the server process per request at saturation (from "
        "/proc; less disturbed by other load on the machine than req/s). The edge's: event "
        f"loop {edge_cpu('main'):.0f} us, other threads (SQLite writer, readers) "
        f"{edge_cpu('threads'):.0f} us; bare over edge by CPU time: {cpu_ratio.median:.2f}.",
    ]
    rps = Spread.of([x.rps for x in results["edge"]["sat"]]).median
    section.headline.append(
        f"Beacon ingest (durable): {section.figure('ingest.rps', rps, '{:,.0f}')} req/s on one "
        f"core, {section.figure('ingest.ratio', ratio.median, '{:.2f}x')} a bare ASGI app "
        f"(aim >= 0.5); bare over edge by CPU time "
        f"{section.figure('ingest.cpu_ratio', cpu_ratio.median, '{:.2f}x')}."
    )
    return section
