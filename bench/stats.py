"""Medians, percentiles and the "median (min-max)" cells of the report."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` (0..100) of ``values``."""
    if not values:
        raise ValueError("percentile of nothing")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Spread:
    """The median of several runs and the range they fell in."""

    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread of no runs")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def cell(self, fmt: str = "{:.1f}") -> str:
        if self.runs == 1:
            return fmt.format(self.median)
        return f"{fmt.format(self.median)} ({fmt.format(self.low)}-{fmt.format(self.high)})"


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-run ratios of paired measurements (run i of one against run i of the other)."""
    return [n / d for n, d in zip(numerators, denominators, strict=True) if d]
