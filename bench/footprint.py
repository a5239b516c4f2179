"""Section 4: the tag's size (raw, gzip, brotli, against its budget), the edge's cold start
to healthy (first start on an empty cache, then restarts) and its resident memory."""

from __future__ import annotations

import tempfile
import urllib.request
from pathlib import Path

from bench import edge_env
from bench.options import Options, progress
from bench.report import Section, Table
from bench.servers import BareServer, PinnedEdge
from bench.stats import Spread
from tag.builder import BUDGET_BROTLI_BYTES, BUDGET_ORIGINS, build_tag

ENCODINGS = ("identity", "gzip", "br")


def _served_size(url: str, encoding: str) -> int | None:
    req = urllib.request.Request(url, headers={"Accept-Encoding": encoding})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
        served = resp.headers.get("Content-Encoding", "identity")
    return len(body) if served == encoding else None


def run(options: Options) -> Section:
    section = Section("tag", "4. Tag size, cold start and memory")
    _tag_sizes(section)
    _cold_start(section, options)
    return section


def _tag_sizes(section: Section) -> None:
    # The tag inlines the edge's base URL: sized at each address the budget is checked at,
    # the headline at the longest one it covers (the worst case).
    t = Table(["tag", "base URL", "raw bytes", "gzip bytes", "brotli bytes", "brotli budget"])
    for origin in sorted(BUDGET_ORIGINS, key=len):  # the longest last, for the headline
        build = build_tag(origin)
        sizes = build.sizes()
        verdict = "within" if sizes["br"] <= BUDGET_BROTLI_BYTES else "OVER"
        t.rows.append(
            [
                f"`/dea/tag.js` {build.version}",
                f"`{origin}` ({len(origin)} characters)",
                f"{sizes['raw']:,}",
                f"{sizes['gzip']:,}",
                f"{sizes['br']:,}",
                f"{BUDGET_BROTLI_BYTES:,} ({verdict})",
            ]
        )
    section.tables.append(t)
    section.headline.append(
        f"Browser tag: {section.figure('tag.brotli.longest', sizes['br'], '{:,.0f}')} bytes "
        f"brotli ({sizes['gzip']:,} gzip, {sizes['raw']:,} minified) with a "
        f"{len(origin)}-character edge base URL, budget {BUDGET_BROTLI_BYTES:,}."
    )


def _cold_start(section: Section, options: Options) -> None:
    runs = max(2, options.runs)
    tmp = Path(tempfile.mkdtemp(prefix="bench-start-"))
    first: list[float] = []
    again: list[float] = []
    rss: list[float] = []
    bare: list[float] = []
    served: dict[str, int | None] = {}
    for r in range(runs):
        # each run: a first start on an empty catalogue cache (ad vectors embedded), then a
        # restart that finds them in the cache
        cache = tmp / f"cache-{r}"
        for attempt, times in ((0, first), (1, again)):
            db = tmp / f"edge-{r}-{attempt}.db"
            settings = edge_env.edge_settings(EDGE_CACHE_DIR=str(cache))
            with PinnedEdge(db=db, settings=settings) as edge:
                times.append(edge.cold_start_s)
                rss.append(edge.rss_mib)
                if not served and edge_env.serves("/dea/tag.js", "get"):
                    for enc in ENCODINGS:
                        served[enc] = _served_size(edge.url + "/dea/tag.js", enc)
        with BareServer() as b:
            bare.append(b.cold_start_s)
        progress(
            f"cold start run {r + 1}/{runs}: edge {first[-1]:.2f} s first, {again[-1]:.2f} s "
            f"restart (rss {rss[-1]:.0f} MiB), bare {bare[-1]:.2f} s"
        )
    t = Table(["process", "spawn to healthy, s", "resident memory, MiB"])
    t.rows.append(
        [
            "edge, first start (empty embedding cache)",
            Spread.of(first).cell("{:.2f}"),
            Spread.of(rss[0::2]).cell("{:.0f}"),
        ]
    )
    t.rows.append(
        [
            "edge, restart (cache warm)",
            Spread.of(again).cell("{:.2f}"),
            Spread.of(rss[1::2]).cell("{:.0f}"),
        ]
    )
    t.rows.append(["bare ASGI app (reference)", Spread.of(bare).cell("{:.2f}"), ""])
    section.tables.append(t)
    section.notes.append(
        "The edge runs with its default demand (the bundled sandbox catalogue), pinned to "
        "one core; healthy means `/dea/health` answered 200 (model and catalogue loaded)."
    )
    if served:
        cells = ", ".join(
            f"{enc} {n:,} B" if n is not None else f"{enc} not served" for enc, n in served.items()
        )
        section.notes.append(f"`GET /dea/tag.js` over HTTP by Accept-Encoding: {cells}.")
    section.headline.append(
        f"Cold start to healthy: "
        f"{section.figure('start.warm_s', Spread.of(again).median, '{:.2f} s')} (first start "
        f"on an empty cache {section.figure('start.cold_s', Spread.of(first).median, '{:.2f} s')}"
        f"); resident memory {section.figure('start.rss', Spread.of(rss).median, '{:.0f} MiB')}."
    )
