"""The SQLite writer alone: CPU time per impression of a group commit, without the server.

``python bench/writer.py [--tree DIR] [--warm N] [--batches N] [--ads N] [--keys KIND]`` stores
``--warm`` impressions first (the dedupe-key index grows with the table, and its pages are what
a commit writes), then commits ``--batches`` batches of 32 impressions through
``_Writer._commit`` on this thread, each with fresh dedupe keys (a token id and a tag
impression id), its billing row and the counter bumps ``edge.ledger`` hands the store.
Beacons arrive at ``--rate`` per second (a clock of the bench's own). ``--keys timed`` makes
both ids as the edge and the tag make them now, starting with the time they were made: the
tag's id when the beacon is sent, the token's id when the token was issued, up to
``--delay`` seconds before its beacon (uniformly; 0: in the order the beacons come). ``--keys
random`` makes them as they were made before (random throughout). It prints the thread's CPU
time per impression (median and mean of the batches, user and system) and the read and write
system calls per batch. ``--tree`` runs another checkout's ``edge`` (compare two commits by
running each in turn, several times, alternating).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import random
import resource
import secrets
import statistics
import sys
import tempfile
import time
from typing import Any

BATCH = 32
_WARM_BATCH = 512


def _syscalls() -> tuple[int, int]:
    with open("/proc/thread-self/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


def _tag_impression_id(at: float) -> str:
    # bench.ingest.tag_impression_id, copied: this script runs another checkout's packages.
    ms, digits = int(at * 1000), ""
    while ms:
        ms, d = divmod(ms, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + digits
    return "-".join([digits, *(str(secrets.randbits(32)) for _ in range(4))])


def run(
    warm: int, batches: int, ads: int, keys: str = "timed", rate: float = 2000, delay: float = 0
) -> dict[str, float]:
    from edge.counters import with_days
    from edge.ledger import billing_usd, impression_counts
    from edge.store.events import Impression, _save_impression
    from edge.store.sqlite import SQLiteStore, _Job, connect

    start = time.time() - (warm + batches * BATCH) / rate

    def timed_keys(at: float) -> tuple[str, str]:
        # The token was issued up to ``delay`` seconds before its beacon; the tag's id is
        # made when the beacon is sent.
        issued = at - random.uniform(0, delay)
        token_id = f"{int(issued * 1_000_000):013x}{secrets.token_urlsafe(12)}"
        return f"tok:{token_id}", f"iid:{_tag_impression_id(at)}"

    def random_keys(at: float) -> tuple[str, str]:
        return f"tok:{secrets.token_urlsafe(12)}", f"iid:{secrets.token_hex(16)}"

    make_keys = timed_keys if keys == "timed" else random_keys

    def job(i: int) -> Any:
        ad = i % ads
        at = start + i / rate  # beacons arrive at ``rate`` per second
        imp = Impression(
            kind="url",
            dedupe_keys=make_keys(at),
            env="production",
            ad_id=f"ad-{ad:05d}",
            campaign_id=f"cmp-{ad % 50:03d}",
            at=at,
            publisher_id=f"pub-{ad % 5}",
            slot_id="bench-slot",
            cpm_usd=2.5,
        )
        billed = billing_usd(imp)
        counts = with_days(impression_counts(imp, billed), imp.at)
        return _Job(_save_impression, (imp, billed, counts), cf.Future())

    folder = tempfile.mkdtemp(prefix="edge-writer-bench-")
    store = SQLiteStore(os.path.join(folder, "edge.db"))
    store.open_blocking()  # migrations, then the batches run here instead of its thread
    writer = store._writer
    assert writer is not None
    writer.stop()
    writer.join()
    writer._conn = connect(store.path, factory=type(writer._conn))
    n = 0
    for _ in range(warm // _WARM_BATCH):
        writer._commit([job(n + k) for k in range(_WARM_BATCH)])
        n += _WARM_BATCH
    per: list[float] = []
    user = system = 0.0
    reads = writes = 0
    for _ in range(batches):
        batch = [job(n + k) for k in range(BATCH)]
        n += BATCH
        r0, c0, t0 = resource.getrusage(resource.RUSAGE_THREAD), _syscalls(), time.thread_time()
        writer._commit(batch)
        t1, c1, r1 = time.thread_time(), _syscalls(), resource.getrusage(resource.RUSAGE_THREAD)
        per.append((t1 - t0) / BATCH * 1e6)
        user += r1.ru_utime - r0.ru_utime
        system += r1.ru_stime - r0.ru_stime
        reads += c1[0] - c0[0]
        writes += c1[1] - c0[1]
        if not all(j.future.result() is True for j in batch):
            raise RuntimeError("a fresh impression was not counted")
    writer._conn.close()
    return {
        "median_us": statistics.median(per),
        "mean_us": statistics.fmean(per),
        "user_us": user / batches / BATCH * 1e6,
        "system_us": system / batches / BATCH * 1e6,
        "reads_per_batch": reads / batches,
        "writes_per_batch": writes / batches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", help="checkout whose edge package to run (default: this one)")
    parser.add_argument("--warm", type=int, default=100_000, help="impressions stored first")
    parser.add_argument("--batches", type=int, default=600, help="batches of 32 measured")
    parser.add_argument("--ads", type=int, default=1, help="distinct ads (1: as bench ingest)")
    parser.add_argument(
        "--keys", choices=("timed", "random"), default="timed", help="how the ids are made"
    )
    parser.add_argument("--rate", type=float, default=2000, help="beacons per second")
    parser.add_argument(
        "--delay", type=float, default=0, help="most seconds from a token's issue to its beacon"
    )
    args = parser.parse_args()
    tree = args.tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.abspath(tree))
    r = run(args.warm, args.batches, args.ads, args.keys, args.rate, args.delay)
    print(
        f"{os.path.abspath(tree)} ({args.keys} keys, delay {args.delay:g} s): writer CPU"
        f" {r['median_us']:.1f} us/impression median"
        f" ({r['mean_us']:.1f} mean; user {r['user_us']:.1f}, system {r['system_us']:.1f}),"
        f" {r['reads_per_batch']:.0f} reads and {r['writes_per_batch']:.0f} writes per batch"
        f" of {BATCH}; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
