"""The arithmetic behind every BENCHMARKS.md cell."""

import pytest

from bench.report import Section, Table, render
from bench.stats import Spread, percentile, ratios


def test_percentile_interpolates_between_ranks():
    xs = [10.0, 20.0, 30.0, 40.0]
    assert percentile(xs, 0) == 10.0
    assert percentile(xs, 50) == 25.0
    assert percentile(xs, 100) == 40.0
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_spread_cell_shows_median_and_range():
    s = Spread.of([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.runs) == (2.0, 1.0, 3.0, 3)
    assert s.cell("{:.1f}") == "2.0 (1.0-3.0)"
    assert Spread.of([5.0]).cell("{:.0f}") == "5"


def test_ratios_pair_runs_and_refuse_unequal_lists():
    assert ratios([2.0, 9.0], [1.0, 3.0]) == [2.0, 3.0]
    with pytest.raises(ValueError):
        ratios([1.0], [1.0, 2.0])


def test_report_has_machine_lines_headline_and_tables():
    section = Section("x", "1. X", intro="why", headline=["fast"], notes=["n"])
    section.tables.append(Table(["a", "b"], [["1", "2"]]))
    text = render([section], settings_line="Settings: test", machine=["- Commit: abc"])
    assert "- Commit: abc" in text and "- Settings: test" in text
    assert "## Headline\n\n- fast" in text
    assert "| a | b |\n|---|---|\n| 1 | 2 |" in text
