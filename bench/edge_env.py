"""What the benchmarks need from the edge: which routes this commit serves, the settings a
benchmarked edge runs with, and the database read back afterwards."""

from __future__ import annotations

import dataclasses
import sqlite3
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from starlette.routing import Route

from bench import synthetic
from edge.app import create_app
from edge.settings import Settings


@dataclass(frozen=True, slots=True)
class BenchAd:
    """The ad the benchmark's impression tokens name: a CPM ad of a campaign in the
    benchmarked edge's live catalogue (without budget or a large one), so that each valid
    impression bills (a billing row, spend and the billed counters, as in production): one
    of a campaign the live catalogue lacks bills nothing. The default is the bundled
    catalogue's. No publisher: a token naming one the bench's database does not hold is
    judged invalid."""

    ad_id: str = "ad-gps-watch"
    campaign_id: str = "cmp-stride"
    publisher_id: str | None = None
    cpm_usd: float = 2.5


# What a browser's beacon carries: a browser's user agent (with none, or a crawler's, the
# beacon is judged invalid and skips the client's rate, billing and spend).
BROWSER_UA = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
BEACON_HEADERS = {"Content-Type": "application/json", "User-Agent": BROWSER_UA}
# Beacons per client address: a page with a few ad slots (the per-client rate allows 5 in
# 5 minutes). Load generators send each group of this many beacons from its own address,
# through X-Forwarded-For from the loopback proxy the benchmarked edge trusts.
BEACONS_PER_CLIENT = 4


@cache
def _served(env: str) -> frozenset[tuple[str, str]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-routes-"))
    settings = dataclasses.replace(Settings(), env=env, db=tmp / "edge.db", cache_dir=tmp)
    app = create_app(settings)  # routes only: no lifespan, no model load
    pairs = set()
    for route in app.routes:
        if isinstance(route, Route):
            for method in route.methods or ():
                pairs.add((route.path, method.lower()))
    return frozenset(pairs)


def serves(path: str, method: str, env: str = "production") -> bool:
    """Whether this commit's edge has the route (so a section can say "not measured")."""
    return (path, method.lower()) in _served(env)


def edge_settings(signing_key: str = "", **extra: str) -> dict[str, str]:
    """EDGE_* variables of a benchmarked edge: loopback allowed, no access log, no rate
    limit in the way of the load (the rate limiter itself stays in the request path)."""
    env = {
        "EDGE_ALLOW_PRIVATE_IPS": "1",
        "EDGE_ACCESS_LOG": "0",
        "EDGE_LOG_LEVEL": "warning",
        "EDGE_RATE_LIMIT_UGC": "1000000/1s",
        "EDGE_RATE_LIMIT_AI": "1000000/1s",
        "EDGE_RATE_LIMIT_AD_MANAGER": "1000000/1s",
        # the load generator stands in for the clients' proxy: X-Forwarded-For names them
        "EDGE_TRUSTED_PROXIES": "127.0.0.1/32",
    }
    if signing_key:
        env["EDGE_SIGNING_KEY"] = signing_key
    env.update(extra)
    return env


def bench_ad(synthetic_catalogue: bool = False) -> BenchAd:
    """The bench ad of the catalogue the benchmarked edge serves: the bundled one, or with
    ``synthetic_catalogue`` ``bench.synthetic``'s (its odd campaigns are CPM ones)."""
    if synthetic_catalogue:
        return BenchAd(ad_id=f"ad-{synthetic.ADS_PER_CAMPAIGN}", campaign_id="cmp-1")
    return BenchAd()


def count_impressions(db: Path) -> int:
    return impression_tally(db)[0]


def impression_tally(db: Path) -> tuple[int, int, int]:
    """(impressions stored, of which judged invalid, billing rows) in a bench database."""
    conn = sqlite3.connect(db)
    try:
        stored, invalid = conn.execute(
            "SELECT count(*), count(invalid_reason) FROM impressions"
        ).fetchone()
        billed = conn.execute("SELECT count(*) FROM billing_events").fetchone()[0]
        return stored, invalid, billed
    finally:
        conn.close()
