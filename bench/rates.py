"""Proportions with Wilson 95% intervals, and the checks of them against their goals, shared
by the benchmarks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``k / n``.

    >>> [round(x, 4) for x in wilson(0, 100)]
    [0.0, 0.037]
    >>> [round(x, 4) for x in wilson(92, 100)]
    [0.85, 0.9589]
    """
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    """``k`` of ``n``, with its interval.

    >>> Rate(92, 100).text()
    ' 92.0% [ 85.0,  95.9]'
    """

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def ci(self) -> tuple[float, float]:
        return wilson(self.k, self.n)

    def text(self) -> str:
        lo, hi = self.ci
        return f"{100 * self.value:5.1f}% [{100 * lo:5.1f}, {100 * hi:5.1f}]"

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.ci
        return {"k": self.k, "n": self.n, "rate": self.value, "ci95": [lo, hi]}


@dataclass(frozen=True)
class Check:
    """A figure held against its goal: whether it passed, and what was measured."""

    name: str
    passed: bool
    detail: str
