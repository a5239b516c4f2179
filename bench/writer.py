"""The SQLite writer alone: CPU time per impression of a group commit, without the server.

``python bench/writer.py [--tree DIR] [--warm N] [--batches N] [--ads N] [--keys KIND]
[--rate R] [--delay S] [--versus KEYS[:MIGRATION]]`` stores ``--warm`` impressions first (the
dedupe-key index grows with the table, and its pages are what a commit writes), then commits
``--batches`` batches of 32 impressions through ``_Writer._commit`` on this thread, each with
fresh dedupe keys (a token id and a tag impression id), its billing row and the counter bumps
``edge.ledger`` hands the store, settled through asyncio futures as the edge's writes are.

Beacons arrive at ``--rate`` per second (a clock of the bench's own). ``--keys timed`` makes
both ids as the edge and the tag make them now, starting with the time they were made: the
tag's id when the beacon is sent, the token's id when the token was issued, up to
``--delay`` seconds before its beacon (uniformly; 0: in the order the beacons come). ``--keys
random`` makes them as they were made before (random throughout). ``--versus`` adds a second
database whose batches alternate with the first's in this process (paired figures): its ids
made as KEYS, with only the migrations named before MIGRATION applied (``random:0310`` is the
keys and schema before time-ordered ids and billing rows keyed by impression).

It prints the thread's CPU time per impression (median and mean of the batches, user and
system) and the read and write system calls per batch. ``--tree`` runs another checkout's
``edge`` (compare two commits by running each in turn, several times, alternating).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
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


class _Side:
    """One database and its writer, fed batches of ``keys`` impressions; ``before``: only
    the migrations named before it are applied (the schema of an older release)."""

    def __init__(
        self, keys: str, before: str | None, ads: int, rate: float, delay: float, total: int
    ) -> None:
        from edge.store import migrations
        from edge.store.sqlite import SQLiteStore, connect

        self.keys, self.before, self.ads, self.rate, self.delay = keys, before, ads, rate, delay
        self.start = time.time() - total / rate
        self.n = 0
        self.per: list[float] = []
        self.user = self.system = 0.0
        self.reads = self.writes = 0
        store = SQLiteStore(os.path.join(tempfile.mkdtemp(prefix="edge-writer-bench-"), "e.db"))
        shipped = migrations.migration_files
        if before is not None:
            migrations.migration_files = lambda backend="sqlite": [
                m for m in shipped(backend) if m[0] < before
            ]
        try:
            store.open_blocking()  # migrations, then the batches run here instead of its thread
        finally:
            migrations.migration_files = shipped
        writer = store._writer
        assert writer is not None
        writer.stop()
        writer.join()
        conn = connect(store.path, factory=type(writer._conn))
        assert isinstance(conn, type(writer._conn))  # what the factory makes
        writer._conn = conn
        self.writer = writer
        # Jobs carry asyncio futures, as the edge's writes do: a batch settles them with one
        # callback onto this loop, run after the batch, outside the time measured.
        self.loop = asyncio.new_event_loop()

    def _keys(self, at: float) -> tuple[str, str]:
        if self.keys == "random":
            return f"tok:{secrets.token_urlsafe(12)}", f"iid:{secrets.token_hex(16)}"
        # The token was issued up to ``delay`` seconds before its beacon; the tag's id is
        # made when the beacon is sent.
        issued = at - random.uniform(0, self.delay)
        token_id = f"{int(issued * 1_000_000):013x}{secrets.token_urlsafe(12)}"
        return f"tok:{token_id}", f"iid:{_tag_impression_id(at)}"

    def jobs(self, count: int) -> list[Any]:
        from edge import ledger
        from edge.counters import with_days
        from edge.ledger import billing_usd, impression_counts
        from edge.store.events import Impression, _save_impression
        from edge.store.sqlite import _Job

        counts_of_day = getattr(ledger, "impression_counts_of_day", None)
        out = []
        for i in range(self.n, self.n + count):
            ad = i % self.ads
            at = self.start + i / self.rate  # beacons arrive at ``rate`` per second
            imp = Impression(
                kind="url",
                dedupe_keys=self._keys(at),
                env="production",
                ad_id=f"ad-{ad:05d}",
                campaign_id=f"cmp-{ad % 50:03d}",
                at=at,
                publisher_id=f"pub-{ad % 5}",
                slot_id="bench-slot",
                cpm_usd=2.5,
            )
            billed = billing_usd(imp)
            # The bumps as the edge hands them: one shared tuple per ad and day where the
            # ledger has that form (older trees: a list per impression).
            counts = (
                counts_of_day(imp, billed)
                if counts_of_day is not None
                else with_days(impression_counts(imp, billed), imp.at)
            )
            job = _Job(_save_impression, (imp, billed, counts), None, self.loop)
            job.afuture = self.loop.create_future()
            out.append(job)
        self.n += count
        return out

    def commit(self, batch: list[Any]) -> None:
        self.writer._commit(batch)

    def settle(self, batch: list[Any]) -> None:
        while not all(j.afuture.done() for j in batch):
            self.loop.run_until_complete(asyncio.sleep(0))
        if not all(j.afuture.result() is True for j in batch):
            raise RuntimeError("a fresh impression was not counted")

    def warm(self, count: int) -> None:
        for _ in range(count // _WARM_BATCH):
            batch = self.jobs(_WARM_BATCH)
            self.commit(batch)
            self.settle(batch)

    def measure(self) -> None:
        batch = self.jobs(BATCH)
        r0, c0, t0 = resource.getrusage(resource.RUSAGE_THREAD), _syscalls(), time.thread_time()
        self.writer._commit(batch)
        t1, c1, r1 = time.thread_time(), _syscalls(), resource.getrusage(resource.RUSAGE_THREAD)
        self.per.append((t1 - t0) / BATCH * 1e6)
        self.user += r1.ru_utime - r0.ru_utime
        self.system += r1.ru_stime - r0.ru_stime
        self.reads += c1[0] - c0[0]
        self.writes += c1[1] - c0[1]
        self.settle(batch)

    def figures(self) -> dict[str, float]:
        self.writer._conn.close()
        self.loop.close()
        batches = len(self.per)
        return {
            "median_us": statistics.median(self.per),
            "mean_us": statistics.fmean(self.per),
            "user_us": self.user / batches / BATCH * 1e6,
            "system_us": self.system / batches / BATCH * 1e6,
            "reads_per_batch": self.reads / batches,
            "writes_per_batch": self.writes / batches,
        }


def run(
    warm: int,
    batches: int,
    ads: int = 1,
    sides: Sequence[tuple[str, str | None]] = (("timed", None),),
    rate: float = 2000,
    delay: float = 0,
) -> list[dict[str, float]]:
    """The figures of each side ``(keys, before)``, their batches taken in turn."""
    total = warm + batches * BATCH
    made = [_Side(keys, before, ads, rate, delay, total) for keys, before in sides]
    for side in made:
        side.warm(warm)
    for _ in range(batches):
        for side in made:
            side.measure()
    return [side.figures() for side in made]


def _line(label: str, r: dict[str, float]) -> str:
    return (
        f"{label}: writer CPU {r['median_us']:.1f} us/impression median"
        f" ({r['mean_us']:.1f} mean; user {r['user_us']:.1f}, system {r['system_us']:.1f}),"
        f" {r['reads_per_batch']:.0f} reads and {r['writes_per_batch']:.0f} writes per batch"
        f" of {BATCH}"
    )


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
    parser.add_argument(
        "--versus",
        metavar="KEYS[:MIGRATION]",
        help="also a second database, its batches taken in turn with the first: its ids made"
        " as KEYS, and only the migrations named before MIGRATION applied (e.g. random:0310,"
        " the keys and schema before those changed)",
    )
    args = parser.parse_args()
    tree = args.tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.abspath(tree))
    sides: list[tuple[str, str | None]] = [(args.keys, None)]
    if args.versus:
        keys, _, before = args.versus.partition(":")
        sides.insert(0, (keys, before or None))
    results = run(args.warm, args.batches, args.ads, sides, args.rate, args.delay)
    print(f"{os.path.abspath(tree)}, delay {args.delay:g} s, load {os.getloadavg()[0]:.1f}")
    for (keys, before), r in zip(sides, results, strict=True):
        print(_line(f"  {keys} keys" + (f", schema before {before}" if before else ""), r))


if __name__ == "__main__":
    main()
