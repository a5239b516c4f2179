"""Request-body validation, per body: the declared bodies against an earlier revision's.

``python -m bench.bodies [--against REF] [--rounds N]`` times ``parse_ugc``, ``parse_ai``
and ``parse_disable`` of this checkout (bytes in, typed value out) on valid and invalid
bodies. With ``--against``, the same bodies go through that revision's parsers too
(``git show REF:edge/partner/{fields,geo,bodies}.py``, loaded as a private package, fed
``orjson.loads`` output as its routes did), the two alternating round by round in one
process so machine load hits both alike; the report is the median microseconds per body
and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from edge.errors import EdgeError
from edge.partner import bodies

POST = {
    "post_id": "post-8812",
    "message": "Looking for trail running shoes that grip on wet rock, any advice? " * 3,
    "created_at": "2026-05-01T12:30:00Z",
    "geo_target": {"zipcode": "94107", "state": "CA", "lat": 37.77, "lon": -122.42},
}
TURN = {
    "message_id": "msg-1",
    "content": "Here are three ways to plan a weekend hike near the city. " * 4,
    "conversation_id": "conv-9",
    "location": "US-CA",
    "prompt": "Where can I hike this weekend?",
}
PAIRS = [{"post_id": f"p-{i}", "ad_id": f"ad-{i}", "meta_data": {"why": "spam"}} for i in range(10)]
CASES: dict[str, tuple[str, Any]] = {
    "ugc, valid": ("parse_ugc", POST),
    "ugc, bad geo_target.lat": ("parse_ugc", {**POST, "geo_target": {"lat": 91, "lon": 0}}),
    "ai, valid": ("parse_ai", TURN),
    "disable, 10 pairs": ("parse_disable", PAIRS),
}


def _load_before(ref: str) -> Any:
    """``edge.partner.bodies`` as it was at ``ref``, imported as ``_before.bodies``."""
    root = Path(tempfile.mkdtemp(prefix="bench-bodies-")) / "_before"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name in ("fields", "geo", "bodies"):
        text = subprocess.run(
            ["git", "show", f"{ref}:edge/partner/{name}.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        text = text.replace("from edge.partner.fields ", "from _before.fields ")
        text = text.replace("from edge.partner.geo ", "from _before.geo ")
        (root / f"{name}.py").write_text(text)
    sys.path.insert(0, str(root.parent))
    return importlib.import_module("_before.bodies")


def _timer(parse: Callable[[Any], Any], arg: Any, n: int) -> float:
    """Microseconds per call of ``parse(arg)`` over ``n`` calls (refusals included)."""
    t0 = time.perf_counter()
    for _ in range(n):
        with contextlib.suppress(EdgeError):
            parse(arg)
    return (time.perf_counter() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bodies", description=__doc__)
    p.add_argument("--against", help="git revision whose parsers to compare with")
    p.add_argument("--rounds", type=int, default=15, help="alternating rounds (default 15)")
    p.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
    args = p.parse_args(argv)
    before = _load_before(args.against) if args.against else None
    print("| body | now (us) | before (us) | now / before |")
    print("|---|---|---|---|")
    for label, (func, data) in CASES.items():
        raw = orjson.dumps(data)
        now_parse = getattr(bodies, func)
        now_times: list[float] = []
        before_times: list[float] = []
        for _ in range(args.rounds):
            now_times.append(_timer(now_parse, raw, args.calls))
            if before is not None:
                old = getattr(before, func)
                # what the routes did before: parse the JSON, then walk it field by field
                before_times.append(_timer(lambda r, f=old: f(orjson.loads(r)), raw, args.calls))
        now = statistics.median(now_times)
        if before_times:
            was = statistics.median(before_times)
            print(f"| {label} | {now:.2f} | {was:.2f} | {now / was:.2f}x |")
        else:
            print(f"| {label} | {now:.2f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
