"""The re-attunement score's numbers, compiled: the twin of
:func:`drift.reattune.score_reattunement`, float for float.

The compiled part takes what the reference loops over: the rolling windows' standardized
gaps until one is within tolerance, the whole early window's gap and its kernel, and the
trust kernel. Column sums run row after row (:func:`drift.sums.column_means`), squares are
summed in :func:`drift.sums.array_sum`'s order, and ``exp`` and ``pow`` are the C
library's, which Python calls. The parts are combined by the reference's own
:func:`drift.reattune.reattune_quality`. Arguments the compiled part does not take as the
reference would (no rows, rows of another width, a zero deviation) go to the reference.
``tests/drift/test_kernel_reattune.py`` holds the two equal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from drift.kernel.floats import array_sum, c_exp, c_pow
from drift.kernel.jit import compiled
from drift.model import DriftConfig
from drift.reattune import ReattuneScore, Rows, reattune_quality, tolerance
from drift.reattune import score_reattunement as reference


@compiled("f8(f8[:, ::1], i8, i8, f8[::1], f8[::1], i8, f8[::1])")
def _mean_square_gap(rows: npt.NDArray[np.float64], start: int, stop: int,
                     late: npt.NDArray[np.float64], sd: npt.NDArray[np.float64],
                     late_turns: int, gap: npt.NDArray[np.float64]) -> float:
    """The mean square of :func:`drift.reattune.standardized_gap` of ``rows[start:stop]``;
    the gap is left in ``gap``."""
    n = stop - start
    k = late.shape[0]
    scale = math.sqrt(1.0 / n + 1.0 / late_turns)
    squares = np.empty(k)
    for j in range(k):
        total = rows[start, j]
        for r in range(start + 1, stop):
            total = total + rows[r, j]
        gap[j] = (total / n - late[j]) / (sd[j] * scale)
        squares[j] = gap[j] * gap[j]
    mean_square: float = array_sum(squares) / k
    return mean_square


@compiled("f8(f8, f8)")
def _kernel(mean_square_gap: float, limit: float) -> float:
    """``exp(-0.5 * max(0.0, mean_square_gap - limit))`` as Python computes it."""
    excess = mean_square_gap - limit
    return c_exp(-0.5 * max(0.0, excess))  # numba's max is Python's, NaN and zeros alike


@compiled("i8(f8[:, ::1], f8[::1], f8[::1], i8, i8, f8, f8, i8, f8[::1])")
def _parts(rows: npt.NDArray[np.float64], late: npt.NDArray[np.float64],
           sd: npt.NDArray[np.float64], late_turns: int, window: int, limit: float,
           limit_one: float, trust_index: int, out: npt.NDArray[np.float64]) -> int:
    """The turn the rolling mean first comes within tolerance (-1 for never); ``out``
    gets the closeness, then the trust kernel (with ``trust_index`` >= 0)."""
    turns = rows.shape[0]
    gap = np.empty(late.shape[0])
    reached = -1
    for end in range(window, turns + 1):
        if _mean_square_gap(rows, end - window, end, late, sd, late_turns, gap) <= limit:
            reached = end
            break
    out[0] = _kernel(_mean_square_gap(rows, 0, turns, late, sd, late_turns, gap), limit)
    if trust_index >= 0:
        out[1] = _kernel(c_pow(gap[trust_index], 2.0), limit_one)
    return reached


# The reference's signature on purpose (drift.reattune.ReattuneScoring).
def score_reattunement(early: Rows, late_profile: Sequence[float], turn_sd: Sequence[float],
                       trust_index: int | None, semantic: float | None, config: DriftConfig
                       ) -> ReattuneScore:
    """What :func:`drift.reattune.score_reattunement` returns for the same arguments.

    >>> cfg = DriftConfig()
    >>> late, sd = [0.7, 0.6], [0.1, 0.1]
    >>> rows = [[0.4, 0.3], [0.6, 0.5], [0.7, 0.6], [0.7, 0.6], [0.7, 0.6]]
    >>> score_reattunement(rows, late, sd, 0, 0.5, cfg) == reference(rows, late, sd, 0, 0.5, cfg)
    True
    >>> score_reattunement(np.array(rows), late, sd, 0, 0.5, cfg) == reference(rows, late, sd, 0,
    ...                                                                        0.5, cfg)
    True
    """
    turns, k = len(early), len(late_profile)
    window = min(config.reattune_window, turns)
    late_turns = config.late_profile_turns
    given = early if isinstance(early, np.ndarray) else None  # the kernel's rows, as they are
    if (window < 1 or late_turns < 1 or k < 1 or len(turn_sd) != k
            or not (trust_index is None or 0 <= trust_index < k)
            or (given.shape != (turns, k) if given is not None
                else any(len(r) != k for r in early))
            or not all(turn_sd)):
        return reference(early if given is None else given.tolist(), late_profile, turn_sd,
                         trust_index, semantic, config)
    level = config.reattune_tolerance_level
    out = np.zeros(2)
    rows = given if given is not None else np.array(early, dtype=np.float64).reshape(turns, k)
    reached = _parts(np.ascontiguousarray(rows, dtype=np.float64),
                     np.array(late_profile, dtype=np.float64),
                     np.array(turn_sd, dtype=np.float64), late_turns, window,
                     tolerance(k, level), tolerance(1, level),
                     -1 if trust_index is None else trust_index, out)
    closeness, trust = out.tolist()
    return reattune_quality(turns, window, None if reached < 0 else reached, closeness,
                            None if trust_index is None else trust, semantic, config)
