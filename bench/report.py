"""The sections' results and BENCHMARKS.md: machine, date, commit, one table per section.

A rerun replaces the generated text but keeps two things from the file it replaces:

- Hand-written subsections, each between ``<!-- kept: NAME -->`` and ``<!-- /kept -->``,
  re-emitted after the generated text of the section they were under (the generator marks
  each section with ``<!-- section: KEY -->`` under its heading). A block whose section is
  not in the new report goes to a closing "Kept notes" section rather than being lost.
- The headline figures: every run writes them as JSON in one ``<!-- bench-figures ... -->``
  comment, and the next run shows each one's previous value beside its new one. Figures
  this run did not measure are carried over, so a partial run loses none.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

KEPT_OPEN = re.compile(r"^<!-- kept: ([\w.-]+) -->\s*$")
KEPT_CLOSE = "<!-- /kept -->"
SECTION_MARK = re.compile(r"^<!-- section: ([\w.-]+) -->\s*$")
FIGURES_OPEN = "<!-- bench-figures"
FIGURES_CLOSE = "-->"
FIGURE_REF = re.compile(r"\{figure:([\w.-]+)\}")


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [
            "| " + " | ".join(self.headers) + " |",
            "|" + "|".join("---" for _ in self.headers) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Figure:
    value: float
    text: str  # as the report shows it, unit included


@dataclass
class Previous:
    """What a rerun keeps from the report it replaces."""

    kept: dict[str, list[str]] = field(default_factory=dict)  # section key -> blocks
    figures: dict[str, dict[str, object]] = field(default_factory=dict)  # key -> JSON entry

    @classmethod
    def read(cls, path: Path) -> Previous:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return cls()
        return cls.parse(text)

    @classmethod
    def parse(cls, text: str) -> Previous:
        previous = cls()
        section = ""  # a block above every section marker has no section
        block: list[str] | None = None
        lines = text.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if block is not None:
                block.append(line)
                if line.strip() == KEPT_CLOSE:
                    previous.kept.setdefault(section, []).append("\n".join(block))
                    block = None
            elif m := KEPT_OPEN.match(line):
                block = [line]
            elif m := SECTION_MARK.match(line):
                section = m.group(1)
            elif line.startswith(FIGURES_OPEN):
                body = []
                i += 1
                while i < len(lines) and lines[i].strip() != FIGURES_CLOSE:
                    body.append(lines[i])
                    i += 1
                previous.figures = json.loads("\n".join(body)).get("figures", {})
            i += 1
        if block is not None:
            raise ValueError(f"a kept block is not closed with {KEPT_CLOSE}: {block[0]}")
        return previous


@dataclass
class Section:
    key: str
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # one-line figures worth repeating at the top of the report (and in the README); a
    # figure in a line is written as ``figure(...)``'s reference, so it shows its previous value
    headline: list[str] = field(default_factory=list)
    figures: dict[str, Figure] = field(default_factory=dict)

    def figure(self, key: str, value: float, fmt: str = "{:.2f}") -> str:
        """Record a headline figure (``key`` unique in the report, stable between runs) and
        return the reference to put in a headline line in its place."""
        self.figures[key] = Figure(value, fmt.format(value))
        return "{figure:" + key + "}"

    def markdown(self) -> str:
        parts = [f"## {self.title}", "", f"<!-- section: {self.key} -->", ""]
        if self.intro:
            parts += [self.intro, ""]
        for table in self.tables:
            parts += [table.markdown(), ""]
        parts += [f"- {note}" for note in self.notes]
        return "\n".join(parts).rstrip() + "\n"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def commit_id() -> str:
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    return commit


def machine_lines(commit: str, date: dt.datetime) -> list[str]:
    mem = "unknown"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return [
        f"- Date: {date:%Y-%m-%d %H:%M} UTC",
        f"- Commit: {commit}",
        f"- Machine: {_cpu_model()}, {os.cpu_count()} cores, {mem} RAM, "
        f"{platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}; load average at the start "
        f"(1/5/15 min): {_load_average()}",
    ]


def _headline_line(line: str, figures: dict[str, Figure], previous: Previous) -> str:
    def one(m: re.Match[str]) -> str:
        key = m.group(1)
        text = figures[key].text
        old = previous.figures.get(key)
        return f"{text} (previous {old['text']})" if old else text

    return FIGURE_REF.sub(one, line)


def _figures_block(
    figures: dict[str, Figure], previous: Previous, *, date: str, commit: str
) -> list[str]:
    entries = dict(previous.figures)  # what this run did not measure is carried over
    for key, f in figures.items():
        entries[key] = {"value": f.value, "text": f.text, "date": date, "commit": commit}
    # one figure per line, so a rerun's diff shows which figures moved; "--" may not occur
    # inside an HTML comment, so JSON's own escape stands for its second dash
    rows = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(entries.items())]
    body = '{"figures": {\n' + ",\n".join(rows) + "\n}}"
    return [
        "",
        FIGURES_OPEN + " (machine-readable headline figures; the next run shows them as previous)",
        body.replace("--", "-\\u002d"),
        FIGURES_CLOSE,
    ]


def render(
    sections: list[Section],
    *,
    settings_line: str,
    machine: list[str],
    previous: Previous | None = None,
    date: str = "",
    commit: str = "",
) -> str:
    """The report; ``previous``: what the file it replaces held (``Previous.read``)."""
    previous = previous or Previous()
    figures = {k: f for s in sections for k, f in s.figures.items()}
    out = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`.venv/bin/python -m bench`); a rerun replaces it except",
        "the hand-written subsections between `<!-- kept: NAME -->` and `<!-- /kept -->`.",
        "Every figure is the median of several runs with the range (min-max) in brackets.",
        "Absolute numbers depend on the machine and on what else runs on it; the ratios are",
        "measured side by side in the same run, on the same core, and are the figures to",
        "compare between machines.",
        "",
        *machine,
        f"- {settings_line}",
        "",
    ]
    headline = [_headline_line(line, figures, previous) for s in sections for line in s.headline]
    if headline:
        out += ["## Headline", "", *(f"- {line}" for line in headline), ""]
    for s in sections:
        out.append(s.markdown())
        for block in previous.kept.get(s.key, []):
            out += [block, ""]
    shown = {s.key for s in sections}
    orphans = {key: blocks for key, blocks in previous.kept.items() if key not in shown}
    if orphans:
        out += ["## Kept notes of sections not in this report", ""]
        for key, blocks in orphans.items():
            # "none": blocks that were above every section stay apart on the next rerun too
            out += [f"<!-- section: {key or 'none'} -->", "", *(f"{b}\n" for b in blocks)]
    out += _figures_block(figures, previous, date=date, commit=commit)
    return "\n".join(out).rstrip() + "\n"
