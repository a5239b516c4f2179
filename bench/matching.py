"""Section 3 (issue 3): the matcher alone, in-process, one core: p50/p99 of a whole decision
at 1k/10k/100k ads for a 40-word post and a 10,000-character post, the model's forward pass
for the same texts beside it (the floor), resident memory per size, and the brand-safety
classifier's precision and recall on the held-out split of the labelled set."""

from __future__ import annotations

import subprocess
import sys

import orjson

from bench.options import Options, progress
from bench.report import Section, Table
from bench.stats import Spread, ratios
from matcher.index import IVF_MIN_ROWS
from matcher.safety_train import evaluate

AIMS = {10_000: 1.3, 100_000: 1.5}  # issue 3: matcher p50 within this many floors


def _size_label(ads: int) -> str:
    return f"{ads // 1000}k" if ads >= 1000 else str(ads)


def run(options: Options) -> Section:
    section = Section(
        "matcher",
        "3. Matcher alone: decision latency against the model's forward pass",
        intro=(
            "`Matcher.decide` (embedding with the token window, safety, vector search: exact "
            f"below {IVF_MIN_ROWS:,} ads, the IVF index from there up; eligibility, geo and "
            "suppression gates, ranking) timed "
            "in-process on one core, each text right after the model's own forward pass for "
            "the same text (`MiniLM.embed`, the floor). Synthetic catalogues "
            "(`bench/synthetic.py`): real topic embeddings plus noise, so searches find "
            "relevant ads as with real demand. Ratios are per-run p50/p50 and p99/p99."
        ),
    )
    count = 40 if options.quick else 120
    t = Table(
        [
            "ads",
            "post",
            "floor p50 ms",
            "floor p99 ms",
            "match p50 ms",
            "match p99 ms",
            "p50 / floor",
            "p99 / floor",
            "outcomes",
        ]
    )
    mem = Table(
        [
            "ads",
            "resident memory, MiB",
            "unique memory, MiB",
            "the model alone, MiB (unique)",
            "catalogue build s",
        ]
    )
    cross = Table(["ads", "floor p50 ms", "match p50 ms", "p50 / floor", "p99 / floor"])
    for ads in options.sizes:
        progress(f"matcher: {ads:,} ads, {options.runs} runs of {count} posts")
        proc = subprocess.run(
            [sys.executable, "-m", "bench.matcher_worker", str(ads), str(options.runs), str(count)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            section.notes.append(f"{ads:,} ads: the worker failed: {proc.stderr[-800:]}")
            continue
        res = orjson.loads(proc.stdout.strip().splitlines()[-1])
        for kind in res["runs"][0]:
            rows = [r[kind] for r in res["runs"]]
            outcomes: dict[str, int] = {}
            for row in rows:
                for k, v in row["outcomes"].items():
                    outcomes[k] = outcomes.get(k, 0) + v
            p50 = Spread.of(ratios([x["match_p50"] for x in rows], [x["floor_p50"] for x in rows]))
            p99 = Spread.of(ratios([x["match_p99"] for x in rows], [x["floor_p99"] for x in rows]))
            t.rows.append(
                [
                    _size_label(ads),
                    kind,
                    Spread.of([x["floor_p50"] for x in rows]).cell(),
                    Spread.of([x["floor_p99"] for x in rows]).cell(),
                    Spread.of([x["match_p50"] for x in rows]).cell(),
                    Spread.of([x["match_p99"] for x in rows]).cell(),
                    p50.cell("{:.2f}"),
                    p99.cell("{:.2f}"),
                    ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
                ]
            )
            if kind == "post-40-words" and ads in AIMS:
                aim = AIMS[ads]
                section.headline.append(
                    f"Matcher at {_size_label(ads)} ads, 40-word post: p50 {p50.median:.2f}x "
                    f"the model's forward pass (aim <= {aim}x, "
                    f"{'met' if p50.median <= aim else 'NOT met'}), p99 {p99.median:.2f}x."
                )
        if res.get("perf"):
            pf = res["perf"]
            x50 = Spread.of(ratios(pf["match_p50"], pf["floor_p50"]))
            x99 = Spread.of(ratios(pf["match_p99"], pf["floor_p99"]))
            if ads in AIMS:
                section.headline.append(
                    f"Cross-check with the matcher's own helpers and catalogue at "
                    f"{_size_label(ads)} ads: p50 {x50.median:.2f}x the forward pass."
                )
            cross.rows.append(
                [
                    _size_label(ads),
                    Spread.of(pf["floor_p50"]).cell(),
                    Spread.of(pf["match_p50"]).cell(),
                    x50.cell("{:.2f}"),
                    x99.cell("{:.2f}"),
                ]
            )
        mem.rows.append(
            [
                _size_label(ads),
                f"{res['rss_mib']:.0f}",
                f"{res['uss_mib']:.0f}",
                f"{res['rss_model_mib']:.0f} ({res['uss_model_mib']:.0f})",
                f"{res['build_s']:.1f}",
            ]
        )
        progress(
            f"matcher: {ads:,} ads done, rss {res['rss_mib']:.0f} MiB, uss {res['uss_mib']:.0f} MiB"
        )
    section.tables += [t, mem]
    if cross.rows:
        section.tables.append(cross)
        section.notes.append(
            "Cross-check (last table): the matcher's own `matcher.perf` helpers "
            "(`synthetic_matcher`, `forward_pass_ms`, `match_ms`) on their synthetic "
            "catalogue (sandbox ad vectors plus noise, a fifth of the ad sets geo-targeted), "
            "one fixed 40-word post, floor and match runs alternating, in the same process."
        )
    section.notes.append(
        "Resident memory is the whole worker process (model, gazetteer, safety model, "
        "catalogue, ad vectors, matcher tables) after the runs; unique memory is its private "
        "pages (`/proc/PID/smaps_rollup`), what one more worker would cost. The ad vectors "
        "are seeded into a vector cache file and mapped back, as the edge loads them."
    )
    _safety(section)
    return section


def _safety(section: Section) -> None:
    progress("matcher: brand-safety precision/recall on the held-out split")
    r = evaluate()
    t = Table(
        [
            "held-out texts",
            "unsafe",
            "precision",
            "recall",
            "safe texts blocked",
            "false positives",
            "false negatives",
        ]
    )
    t.rows.append(
        [
            str(r["texts"]),
            str(r["unsafe"]),
            f"{r['precision']:.3f}",
            f"{r['recall']:.3f}",
            f"{r['safe_blocked']:.3f}",
            str(r["false_positives"]),
            str(r["false_negatives"]),
        ]
    )
    section.tables.append(t)
    section.notes.append(
        "Brand safety: the shipped classifier (lexicon + logistic regression on MiniLM "
        "vectors) scored on the `heldout` rows of `tests/data/safety_labelled.jsonl`, which "
        "neither its weights nor its threshold saw. Aim: recall >= 0.97 with at most 0.05 "
        "of safe texts blocked."
    )
    met = r["recall"] >= 0.97 and r["safe_blocked"] <= 0.05
    section.headline.append(
        f"Brand safety (held-out): recall {r['recall']:.3f}, precision {r['precision']:.3f}, "
        f"{r['safe_blocked']:.1%} of safe texts blocked (aim: recall >= 0.97 with at most "
        f"5% blocked, {'met' if met else 'NOT met'})."
    )
