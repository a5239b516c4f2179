"""A rerun of the bench keeps the report's hand-written subsections and shows each headline
figure's previous value."""

import json

import pytest

from bench.report import Previous, Section, Table, render

KEPT = """<!-- kept: tail-step -->
### The tail, before -> after

| figure | before | after |
|---|---|---|
| p99 / floor | 1.33 | 1.25 |
<!-- /kept -->"""


def run(ratio: float, rps: float) -> list[Section]:
    """The sections one bench run would produce (two, as in a partial run)."""
    ugc = Section("ugc", "2. UGC", intro="paired runs")
    ugc.tables.append(Table(["ads", "p99 / floor"], [["10k", f"{ratio:.2f}"]]))
    ugc.headline.append(
        f"UGC at 10k ads: p99 {ugc.figure('ugc.10k.p99', ratio, '{:.2f}x')} the floor; "
        f"{ugc.figure('ugc.10k.rps', rps, '{:.0f}')} req/s."
    )
    ingest = Section("ingest", "1. Ingest", notes=["generated note"])
    ingest.headline.append(f"Ingest: {ingest.figure('ingest.ratio', 0.1, '{:.2f}x')} bare.")
    return [ingest, ugc]


def report(sections: list[Section], previous: Previous | None = None) -> str:
    return render(
        sections,
        settings_line="Settings: test",
        machine=["- Commit: abc"],
        previous=previous,
        date="2026-11-26 15:00",
        commit="abc",
    )


def by_hand(text: str, section_heading: str, block: str) -> str:
    """``text`` with ``block`` written by hand at the end of the section under the heading."""
    head, rest = text.split(section_heading, 1)
    end = rest.find("\n## ")
    end = rest.find("\n<!-- bench-figures") if end < 0 else end
    return head + section_heading + rest[:end].rstrip() + "\n\n" + block + "\n" + rest[end:]


def test_first_run_shows_figures_without_previous_values_and_records_them():
    text = report(run(1.33, 50))
    assert "- UGC at 10k ads: p99 1.33x the floor; 50 req/s." in text
    assert "previous" not in text.split("## 1.")[0]
    figures = Previous.parse(text).figures
    assert figures["ugc.10k.p99"]["text"] == "1.33x"
    assert figures["ugc.10k.p99"]["value"] == pytest.approx(1.33)
    assert figures["ugc.10k.rps"] == {
        "value": 50,
        "text": "50",
        "date": "2026-11-26 15:00",
        "commit": "abc",
    }


def test_rerun_shows_the_old_headline_value_as_previous():
    first = report(run(1.33, 50))
    second = report(run(1.25, 52), Previous.parse(first))
    assert "- UGC at 10k ads: p99 1.25x (previous 1.33x) the floor; 52 (previous 50) req/s." in (
        second
    )
    assert "- Ingest: 0.10x (previous 0.10x) bare." in second
    # and the new run's figures are what the run after it will call previous
    assert Previous.parse(second).figures["ugc.10k.p99"]["text"] == "1.25x"


def test_rerun_keeps_a_kept_block_under_its_section():
    first = by_hand(report(run(1.33, 50)), "## 2. UGC", KEPT)
    second = report(run(1.25, 52), Previous.parse(first))
    assert second.count("### The tail, before -> after") == 1
    ugc = second.split("## 2. UGC", 1)[1].split("<!-- bench-figures", 1)[0]
    assert KEPT in ugc
    assert ugc.index("| 10k | 1.25 |") < ugc.index(KEPT)  # after the generated text
    # a third run keeps it again, once
    third = report(run(1.2, 53), Previous.parse(second))
    assert third.count(KEPT) == 1 and "1.20x (previous 1.25x)" in third


def test_kept_blocks_keep_their_order_and_sections():
    other = KEPT.replace("tail-step", "lane").replace("The tail", "The lane")
    text = by_hand(by_hand(report(run(1.33, 50)), "## 2. UGC", KEPT), "## 1. Ingest", other)
    text = by_hand(text, "## 2. UGC", KEPT.replace("tail-step", "second"))
    rerun = report(run(1.3, 50), Previous.parse(text))
    ingest, ugc = rerun.split("## 2. UGC", 1)
    assert other in ingest and KEPT not in ingest
    assert ugc.index("<!-- kept: tail-step -->") < ugc.index("<!-- kept: second -->")


def test_a_partial_run_carries_figures_and_blocks_of_sections_it_did_not_run():
    full = by_hand(report(run(1.33, 50)), "## 1. Ingest", KEPT)
    only_ugc = report(run(1.3, 51)[1:], Previous.parse(full))
    assert KEPT in only_ugc.split("## Kept notes of sections not in this report", 1)[1]
    assert Previous.parse(only_ugc).figures["ingest.ratio"]["text"] == "0.10x"
    # the next full run puts the block back under its own section
    again = report(run(1.3, 51), Previous.parse(only_ugc))
    assert KEPT in again.split("## 1. Ingest", 1)[1].split("## 2. UGC", 1)[0]
    assert "Kept notes" not in again


def test_the_figures_comment_cannot_be_closed_by_a_figure():
    section = Section("x", "1. X")
    section.headline.append(f"odd: {section.figure('x.odd', 1.0, '{:.0f} --> <!--')}")
    text = report([section])
    block = text.split("<!-- bench-figures", 1)[1]
    assert block.count("-->") == 1
    assert Previous.parse(text).figures["x.odd"]["text"] == "1 --> <!--"


def test_an_unclosed_kept_block_is_refused():
    with pytest.raises(ValueError, match="not closed"):
        Previous.parse("<!-- kept: x -->\n### lost\n")


def test_the_checked_in_report_parses_and_marks_its_hand_written_subsections():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "BENCHMARKS.md").read_text()
    previous = Previous.parse(text)
    assert previous.kept, "BENCHMARKS.md marks no hand-written subsection"
    for blocks in previous.kept.values():
        for block in blocks:
            assert "\n### " in "\n" + block.split("\n", 1)[1]
    # the generator writes no subsections: every one in the file is hand-written, so a
    # rerun would drop any that is not marked
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    kept = [line for bs in previous.kept.values() for b in bs for line in b.splitlines()]
    assert [h for h in headings if h not in kept] == []
    json.dumps(previous.figures)  # plain JSON values
    assert previous.figures
