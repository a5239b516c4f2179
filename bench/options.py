"""What a bench run was asked for, and its progress lines (stderr)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

_T0 = time.monotonic()


@dataclass(frozen=True, slots=True)
class Options:
    runs: int = 5  # runs per figure; the median and range are reported
    seconds: float = 5.0  # duration of one load run
    quick: bool = False
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)  # catalogue sizes (ads)
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, *, quick: bool, runs: int | None, seconds: float | None) -> Options:
        if quick:
            return cls(runs=runs or 2, seconds=seconds or 2.0, quick=True)
        return cls(runs=runs or 5, seconds=seconds or 5.0)

    def describe(self) -> str:
        mode = "quick mode (fewer, shorter runs: indicative only)" if self.quick else "full run"
        return f"Settings: {mode}; {self.runs} runs per figure, load runs of {self.seconds:g} s"


def progress(message: str) -> None:
    print(f"[bench {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)
