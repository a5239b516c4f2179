"""Section 3 (issue 3): the matcher alone, in-process, one core: p50/p99 of a whole decision
at 1k/10k/100k ads for a 40-word post and a 10,000-character post, the model's forward pass
for the same texts beside it (the floor), resident memory per size, and the brand-safety
classifier's per-class figures on the held-out split and on the independent set."""

from __future__ import annotations

import subprocess
import sys

import orjson

from bench import synthetic
from bench.options import Options, progress
from bench.report import Section, Table
from bench.stats import Spread, ratios
from matcher.index import IVF_MIN_ROWS
from matcher.safety import CLASSES
from matcher.safety_train import LATER_ORIGINS, default_check, evaluate, everyday

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
                at = _size_label(ads)
                section.headline.append(
                    f"Matcher at {at} ads, 40-word post: p50 "
                    f"{section.figure(f'matcher.{at}.p50', p50.median, '{:.2f}x')} "
                    f"the model's forward pass (aim <= {aim}x, "
                    f"{'met' if p50.median <= aim else 'NOT met'}), p99 "
                    f"{section.figure(f'matcher.{at}.p99', p99.median, '{:.2f}x')}."
                )
        if res.get("perf"):
            pf = res["perf"]
            x50 = Spread.of(ratios(pf["match_p50"], pf["floor_p50"]))
            x99 = Spread.of(ratios(pf["match_p99"], pf["floor_p99"]))
            if ads in AIMS:
                at = _size_label(ads)
                section.headline.append(
                    f"Cross-check with the matcher's own helpers and catalogue at {at} ads: "
                    f"p50 {section.figure(f'matcher.{at}.perf_p50', x50.median, '{:.2f}x')} "
                    "the forward pass."
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


# The classifier shipped before the `v11` refit (main at e102a09: the same features, fitted
# without the `v11` rows, with 1,800 safe exemplars and a 5.5% out-of-fold budget), scored on
# these same rows: the "previous model" column of the safety table.
PREVIOUS_SAFETY: dict[str, dict[str, float]] = {
    "held-out": {
        "safe": 0.056,
        "self_harm": 0.947,
        "violence_crime": 0.966,
        "disaster_war": 0.901,
        "death_grief": 0.967,
        "news": 0.981,
        "recall_unsafe": 0.949,
    },
    "held-out, later rows": {
        "safe": 0.109,
        "self_harm": 0.977,
        "violence_crime": 0.875,
        "disaster_war": 1.0,
        "death_grief": 1.0,
        "news": 1.0,
        "recall_unsafe": 0.975,
    },
    "independent": {
        "safe": 0.041,
        "self_harm": 1.0,
        "violence_crime": 0.905,
        "disaster_war": 1.0,
        "death_grief": 0.905,
        "news": 1.0,
        "recall_unsafe": 0.969,
    },
    "probe": {
        "safe": 0.125,
        "self_harm": 1.0,
        "violence_crime": 1.0,
        "disaster_war": 1.0,
        "death_grief": 1.0,
        "news": 0.917,
        "recall_unsafe": 0.994,
    },
}


# The everyday check: ordinary 40-word hobby and product posts from the bench's generator, a
# source no labelled row was written from and that never enters training or a threshold
# choice. 500 posts from each seed; the seeds are used nowhere else in the bench.
EVERYDAY_SEEDS = (1234, 5678)
EVERYDAY_PER_SEED = 500
# The classifier shipped before the `v11` refit (main at e102a09) on the same 1,000 posts:
# share blocked, share that ran the second pass.
PREVIOUS_EVERYDAY = {"blocked": 0.128, "second_pass": 0.034}


def everyday_posts() -> list[str]:
    """The everyday check's posts, the same on every run."""
    return [p for s in EVERYDAY_SEEDS for p in synthetic.posts(EVERYDAY_PER_SEED, seed=s)]


def _safety(section: Section) -> None:
    progress("matcher: brand-safety figures on the held-out split and the other labelled sets")
    check = default_check()
    reports = {
        "held-out": evaluate(check, select=lambda r: r.origin not in LATER_ORIGINS),
        "held-out, later rows": evaluate(check, select=lambda r: r.origin in LATER_ORIGINS),
        "independent": evaluate(check, split="independent"),
        "stress": evaluate(check, split="stress"),
        "probe": evaluate(check, split="probe"),
        "fresh": evaluate(check, split="fresh"),
    }
    t = Table(["set", "class", "texts", "measure", "now", "previous model"])
    for name, r in reports.items():
        before = PREVIOUS_SAFETY.get(name, {})
        for cls in CLASSES:
            if cls not in r:
                continue
            measure = "share blocked" if cls == "safe" else "recall"
            value = r[cls]["blocked" if cls == "safe" else "recall"]
            prev = before.get(cls)
            t.rows.append(
                [
                    name,
                    cls,
                    str(r[cls]["texts"]),
                    measure,
                    f"{value:.3f}",
                    "" if prev is None else f"{prev:.3f}",
                ]
            )
        prev_all = before.get("recall_unsafe")
        t.rows.append(
            [
                name,
                "all unsafe",
                str(r["texts"] - r["safe"]["texts"]),
                "recall",
                f"{r['recall_unsafe']:.3f}",
                "" if prev_all is None else f"{prev_all:.3f}",
            ]
        )
    section.tables.append(t)
    section.notes.append(
        "Brand safety: the shipped classifier (lexicon, then MLPs and a self-harm margin over "
        "the whole text and each sentence, per-class thresholds, and a second pass over a "
        "suspicious text's sentences encoded alone) on the `heldout` rows of "
        "`tests/data/safety_labelled.jsonl`, which no weight or threshold saw, and on "
        "`tests/data/safety_independent.jsonl`, written apart and committed before training, "
        "and on `tests/data/safety_stress.jsonl`, written later by someone else from the "
        "class definitions alone and never trained on: self-harm in oblique wordings and "
        "everyday texts chosen to share its words (its safe rows are hard on purpose, so "
        "their share blocked is not held to the 3% aim), and on "
        "`tests/data/safety_probe.jsonl`, written by yet another hand from the class "
        "definitions alone after the shipped model was fitted and frozen before anything "
        "was scored on it: self-harm in many wordings (short, beside a shopping question, "
        "inside a long post, as an assistant prompt), the other unsafe classes, and everyday, "
        "sensitive-commercial, idiom, look-alike and assistant texts that must serve, and "
        "on `tests/data/safety_fresh.jsonl`, written by a fifth hand without reading any "
        "other set, as an outside evaluation writes its posts (mostly ordinary posts on many "
        "hobbies and products, self-harm in oblique wordings, many beside a shopping "
        "question), after the shipped model was fitted. "
        "An AI turn counts as blocked when its prompt or its answer is. Aim: recall >= 0.98 "
        'on unsafe text, 1.00 on self-harm, at most 3% of safe texts blocked. "held-out, '
        'later rows": the held-out rows of the batches written for the everyday failure '
        "(origins " + ", ".join(LATER_ORIGINS) + "), apart so that the first held-out figures "
        'stay comparable. "previous model": the classifier shipped before the `v11` refit '
        "(fitted without that batch, with fewer safe exemplars for the margin), on the same "
        "rows."
    )
    progress("matcher: brand-safety everyday check on the bench generator's posts")
    daily = everyday(check, everyday_posts())
    section.headline.append(
        f"Brand safety (everyday check, {daily['texts']:,} ordinary 40-word posts from the bench "
        f"generator, never trained on): everyday posts blocked {daily['blocked']:.1%} "
        f"(previous model {PREVIOUS_EVERYDAY['blocked']:.1%}), due for the second pass "
        f"{daily['second_pass']:.1%} (previous model {PREVIOUS_EVERYDAY['second_pass']:.1%}); "
        "blocked by class "
        f"{', '.join(f'{k} {v}' for k, v in daily['classes'].items()) or 'none'}."
    )
    for name, r in reports.items():
        if name.endswith(" rows"):
            before = PREVIOUS_SAFETY.get(name, {})
            section.headline.append(
                f"Brand safety ({name}: the {', '.join(LATER_ORIGINS)} batches, everyday and "
                f"self-harm posts from more hands): recall {r['recall_unsafe']:.3f} "
                f"(previous {before['recall_unsafe']:.3f}) on unsafe text, "
                f"{r['self_harm']['recall']:.3f} (previous {before['self_harm']:.3f}) on "
                f"self-harm, {r['safe_blocked']:.1%} (previous {before['safe']:.1%}) of safe "
                "texts blocked."
            )
            continue
        if name == "stress":
            section.headline.append(
                f"Brand safety (stress, everyday twins of self-harm): recall "
                f"{r['recall_unsafe']:.3f} on unsafe text, {r['self_harm']['recall']:.3f} on "
                f"self-harm, {r['safe_blocked']:.1%} of its hard safe texts blocked."
            )
            continue
        met = (
            r["recall_unsafe"] >= 0.98
            and r["self_harm"]["recall"] >= 1.0
            and r["safe_blocked"] <= 0.03
        )
        before = PREVIOUS_SAFETY.get(name, {})

        def was(key: str, fmt: str, before: dict[str, float] = before) -> str:
            return f" (previous {fmt.format(before[key])})" if key in before else ""

        section.headline.append(
            f"Brand safety ({name}): recall {r['recall_unsafe']:.3f}"
            f"{was('recall_unsafe', '{:.3f}')} on unsafe text, "
            f"{r['self_harm']['recall']:.3f}{was('self_harm', '{:.3f}')} on self-harm, "
            f"{r['safe_blocked']:.1%}{was('safe', '{:.1%}')} of safe texts blocked "
            f"(aim: 0.98, 1.00, at most 3%: {'met' if met else 'NOT met'})."
        )
