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

from edge.app import create_app
from edge.settings import Settings


@dataclass(frozen=True, slots=True)
class BenchAd:
    """The ad the benchmark's impression tokens name."""

    ad_id: str = "bench-ad"
    campaign_id: str = "bench-campaign"
    publisher_id: str = "bench-pub"


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
    }
    if signing_key:
        env["EDGE_SIGNING_KEY"] = signing_key
    env.update(extra)
    return env


def bench_ad() -> BenchAd:
    return BenchAd()


def count_impressions(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT count(*) FROM impressions").fetchone()[0]
    finally:
        conn.close()
