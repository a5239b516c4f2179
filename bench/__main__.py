"""``python -m bench [--quick] [--only SECTION ...] [--runs N] [--output FILE]``."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import sys
import traceback
from pathlib import Path

from bench.options import Options, progress
from bench.report import Previous, Section, commit_id, machine_lines, render

FULL_REPORT = Path("BENCHMARKS.md")
PARTIAL_REPORT = Path("var/bench/BENCHMARKS.md")
# section key -> module with ``run(options) -> Section``, in report order
SECTIONS = {
    "ingest": "bench.ingest",
    "ugc": "bench.ugc",
    "matcher": "bench.matching",
    "batching": "bench.batching",
    "tag": "bench.footprint",
    "ranking": "bench.money",
    "scale": "bench.scale",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer and shorter runs (a smoke test)")
    p.add_argument(
        "--only",
        action="append",
        choices=sorted(SECTIONS),
        metavar="SECTION",
        help=f"run only this section (repeatable): {', '.join(SECTIONS)}",
    )
    p.add_argument("--runs", type=int, help="runs per figure (default 5, quick 2)")
    p.add_argument("--seconds", type=float, help="length of one load run (default 5, quick 2)")
    p.add_argument(
        "--output",
        type=Path,
        help=f"report file (default {FULL_REPORT} for a full run, {PARTIAL_REPORT} for "
        "--quick or --only, so a partial run never replaces the full report)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.output is None:
        args.output = PARTIAL_REPORT if (args.quick or args.only) else FULL_REPORT
    args.output.parent.mkdir(parents=True, exist_ok=True)
    options = Options.make(quick=args.quick, runs=args.runs, seconds=args.seconds)
    options.extra["report_dir"] = str(args.output.parent)  # where a section's plots go
    # before the runs: the commit and load they started from
    commit, date = commit_id(), dt.datetime.now(dt.UTC)
    machine = machine_lines(commit, date)
    # read once, before the first write below replaces the file: its hand-written
    # subsections and its headline figures (shown as previous values)
    previous = Previous.read(args.output)
    if (os.cpu_count() or 1) < 2:
        progress("one core only: server and load generator will share it (ratios still hold)")
    sections: list[Section] = []
    failed = []
    for key in args.only or list(SECTIONS):
        progress(f"section {key}: starting")
        try:
            section = importlib.import_module(SECTIONS[key]).run(options)
        except Exception as exc:  # one broken section must not lose the others' figures
            traceback.print_exc()
            failed.append(key)
            section = Section(key, f"{key}: failed", notes=[f"The section failed: {exc!r}"])
        sections.append(section)
        progress(f"section {key}: done")
        # write after every section so an interrupted run keeps what it measured
        report = render(
            sections,
            settings_line=options.describe(),
            machine=machine,
            previous=previous,
            date=f"{date:%Y-%m-%d %H:%M}",
            commit=commit,
        )
        args.output.write_text(report)
    progress(f"wrote {args.output}")
    if failed:
        progress(f"failed sections: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
