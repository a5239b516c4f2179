"""The floor beside the edge: a process pinned to the server core that embeds each text it
reads (one JSON string per stdin line) through the model alone and answers the ms it took.

Run by section 2 between requests to the edge, so each request is paired with the floor of
the same text measured moments apart on the same core (slow drifts of a shared machine
cancel out of the ratio).
"""

from __future__ import annotations

import os
import sys
import time

import orjson

from bench.servers import SERVER_CPU
from matcher.embeddings import MiniLM


def main() -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > SERVER_CPU:
        os.sched_setaffinity(0, {SERVER_CPU})
    model = MiniLM(threads=1)
    model.embed(["warm up the session"])
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        text = orjson.loads(line)
        a = time.perf_counter()
        model.embed([text])
        sys.stdout.write(f"{(time.perf_counter() - a) * 1000:.4f}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
