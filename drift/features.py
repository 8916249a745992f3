"""Turn dynamics on the scale the baseline and the tests use, and a window's summary of them."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from drift.model import Turn

#: Features carried on a log scale (counts and durations are right-skewed).
LOG_FEATURES = frozenset({"user_tokens", "latency_ms"})


def transform(feature: str, value: float) -> float:
    """Map a raw dynamics value to the scale the baseline and tests use.

    >>> transform("latency_ms", 0.0), round(transform("user_tokens", 99.0), 4)
    (0.0, 4.6052)
    >>> transform("trust", 0.25)
    0.25
    """
    return math.log1p(value) if feature in LOG_FEATURES else value


def transform_turn(turn: Turn) -> tuple[float, ...]:
    """A turn's six dynamics in :data:`FEATURES` order, each through :func:`transform`.

    >>> from drift.model import FEATURES
    >>> t = Turn.neutral(1, user_tokens=99, latency_ms=0.0)
    >>> transform_turn(t) == tuple(transform(f, x) for f, x in zip(FEATURES, t.features()))
    True
    """
    return (turn.trust, turn.resonance_depth, turn.valence, float(turn.friction),
            math.log1p(turn.user_tokens), math.log1p(turn.latency_ms))


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Count, mean and sum of squared deviations per feature for one turn window.

    ``mean`` and ``m2`` are kept as arrays of doubles whatever sequence they are given as:
    a baseline holds up to 15 of these per user (5 sessions x 3 windows), and a tuple of
    Python floats costs 232 bytes for six values against 128 (docs/performance.md,
    "Per-user state"). They are never changed; the type says so (``Sequence``).
    """

    n: int
    mean: Sequence[float]
    m2: Sequence[float]

    def __post_init__(self) -> None:
        # Spelled out, not a loop over the two names: a session's end builds one per window.
        if type(self.mean) is not array:
            object.__setattr__(self, "mean", array("d", self.mean))
        if type(self.m2) is not array:
            object.__setattr__(self, "m2", array("d", self.m2))

    def __hash__(self) -> int:
        return hash((self.n, tuple(self.mean), tuple(self.m2)))

    @staticmethod
    def held(n: int, mean: array[float], m2: array[float]) -> WindowStats:
        """The stats of arrays of doubles already (a baseline's, read at every checkpoint):
        filled slot by slot, without the checks of ``__init__``.

        >>> WindowStats.held(2, array("d", [0.5]), array("d", [0.1])) == WindowStats(2, [0.5],
        ...                                                                           [0.1])
        True
        """
        stats: WindowStats = _NEW(WindowStats)
        _SET_N(stats, n)
        _SET_MEAN(stats, mean)
        _SET_M2(stats, m2)
        return stats

    @staticmethod
    def of(rows: np.ndarray) -> WindowStats:
        """Summarise an ``(n_turns, n_features)`` array.

        >>> w = WindowStats.of(np.array([[1.0, 0.0], [3.0, 1.0]]))
        >>> w.n, w.mean.tolist(), w.m2.tolist()
        (2, [2.0, 0.5], [2.0, 0.5])
        """
        n = int(rows.shape[0])
        mean = rows.mean(axis=0)
        m2 = ((rows - mean) ** 2).sum(axis=0)
        return WindowStats(n, mean.tolist(), m2.tolist())

    def restrict(self, idx: list[int]) -> WindowStats:
        """The same window over the features at ``idx`` only.

        >>> WindowStats(3, (1.0, 2.0, 3.0), (0.1, 0.2, 0.3)).restrict([2, 0])
        WindowStats(n=3, mean=array('d', [3.0, 1.0]), m2=array('d', [0.3, 0.1]))
        """
        if idx == list(range(len(self.mean))):
            return self
        return WindowStats(self.n, [self.mean[i] for i in idx], [self.m2[i] for i in idx])


_NEW = object.__new__
_SET_N, _SET_MEAN, _SET_M2 = (getattr(WindowStats, name).__set__ for name in ("n", "mean", "m2"))
