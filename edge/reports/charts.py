"""Line charts as inline SVG, drawn in Python: no script, no inline style, no CDN.

Every colour, width and dash comes from the page's stylesheet through class names
(``series-0`` ... ``series-7``, ``plan``), so the page works under a CSP that allows only
same-origin styles. A missing value (a rate on a day with no denominator) breaks the line
instead of drawing a false zero. Each point carries a ``<title>``, which browsers show as a
tooltip without any script.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from edge.reports.daily import MONEY_DECIMALS

WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28
SERIES_CLASSES = 8


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    css: str  # class of the line and its points: "series-N" or "plan"
    values: Sequence[float | None]  # one per day


def percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def usd(value: float) -> str:
    """Dollars to the micro-dollar money is kept to, at least to the cent: "$0.00398",
    "$1.00398", "$1,500.00" (never a sub-cent spend rounded away)."""
    whole, _, fraction = f"{value:,.{MONEY_DECIMALS}f}".partition(".")
    return f"${whole}.{fraction.rstrip('0').ljust(2, '0')}"


def series_class(i: int) -> str:
    return f"series-{i % SERIES_CLASSES}"


def line_chart(
    title: str,
    days: Sequence[str],
    series: Sequence[Series],
    *,
    y_max: float,
    y_label: Callable[[float], str],
) -> str:
    """An SVG line chart of ``series`` over ``days`` (x) from 0 to ``y_max`` (y), rounded up
    to a round number so the four gridlines fall on readable values."""
    top = nice_ceiling(y_max)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(days) - 1, 1)

    def x(i: int) -> float:
        return LEFT + i * step

    def y(v: float) -> float:
        return TOP + plot_h * (1 - min(max(v / top, 0.0), 1.0))

    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for k in range(5):  # gridlines and y labels at 0, 1/4 ... of the top
        tick = top * k / 4
        yy = y(tick)
        out.append(
            f'<line class="grid" x1="{LEFT}" y1="{yy:.1f}" x2="{WIDTH - RIGHT}" y2="{yy:.1f}"/>'
        )
        out.append(
            f'<text class="y-label" x="{LEFT - 6}" y="{yy + 4:.1f}">{escape(y_label(tick))}</text>'
        )
    last = len(days) - 1
    for i, day in enumerate(days):  # a label each week, and the last day (room kept for it)
        if i == last or (i % 7 == 0 and last - i >= 4):
            out.append(f'<text class="x-label" x="{x(i):.1f}" y="{HEIGHT - 8}">{day[5:]}</text>')
    for s in series:
        css = escape(s.css)
        for run in _runs(s.values):
            points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in run)
            if len(run) > 1:
                out.append(f'<polyline class="line {css}" points="{points}"/>')
        for i, value in enumerate(s.values):
            if value is not None:
                tip = f"{s.label}, {days[i]}: {y_label(value)}"
                out.append(
                    f'<circle class="point {css}" cx="{x(i):.1f}" cy="{y(value):.1f}" r="3">'
                    f"<title>{escape(tip)}</title></circle>"
                )
    out.append("</svg>")
    return "\n".join(out)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 4, 5 or 8 times a power of ten that is at least ``value``
    (each divides into four readable gridlines); 1 for nothing."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 4, 5, 8, 10):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


def _runs(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """The unbroken stretches of values, with their day index."""
    runs: list[list[tuple[int, float]]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((i, v))
    return [r for r in runs if r]


def legend(series: Sequence[Series]) -> str:
    items = "".join(
        f'<li><span class="swatch {escape(s.css)}"></span>{escape(s.label)}</li>' for s in series
    )
    return f'<ul class="legend">{items}</ul>'
