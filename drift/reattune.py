"""Re-attunement quality: how closely a session re-joins the prior session's late profile."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy import special

from drift.evolve import fast_init
from drift.model import DriftConfig
from drift.sums import array_sum, column_means, left_sum


@fast_init
@dataclass(frozen=True, slots=True)
class ReattuneScore:
    """``quality`` in [0, 1]; ``turns_to_baseline`` is None when never within tolerance."""

    quality: float
    turns_to_baseline: int | None
    convergence: float
    semantic_consistency: float | None
    trust_continuity: float | None


Rows = Sequence[Sequence[float]]
ReattuneScoring = Callable[[Rows, Sequence[float], Sequence[float], "int | None",
                            "float | None", DriftConfig], "ReattuneScore"]
"""How a re-attunement is scored: :func:`score_reattunement`, or a function held equal to it
(the compiled kernel's twin)."""


def standardized_gap(rows: Rows, late: Sequence[float], turn_sd: Sequence[float],
                     late_turns: int) -> list[float]:
    """Per-feature gap of the mean of ``rows`` from ``late``, in standard errors.

    The standard error counts the noise of both means: ``sd * sqrt(1/n + 1/late_turns)``,
    so a session from the same process gives gaps of about one. Plain floats: a
    re-attunement looks at a handful of numbers, where a NumPy call costs more than the
    arithmetic (the values are those of the NumPy expression, which a test holds).

    >>> standardized_gap([[1.0], [1.0]], [0.0], [1.0], 2)
    [1.0]
    """
    scale = math.sqrt(1.0 / len(rows) + 1.0 / late_turns)
    return [(m - float(l)) / (float(s) * scale)
            for m, l, s in zip(column_means(rows), late, turn_sd, strict=True)]


def _mean_square(gap: Sequence[float]) -> float:
    return array_sum([g * g for g in gap]) / len(gap)


def turns_to_baseline(rows: Rows, late: Sequence[float], turn_sd: Sequence[float],
                      late_turns: int, window: int, level: float) -> int | None:
    """First turn at which the rolling ``window``-turn mean is within tolerance of ``late``.

    Within tolerance: the mean squared standardized gap is below the ``level``
    quantile of its distribution for a session from the same process
    (chi-square with one degree of freedom per feature, divided by their number).

    >>> late, sd = [0.0, 0.0], [1.0, 1.0]
    >>> rows = [[4.0, 4.0], [3.0, 3.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    >>> turns_to_baseline(rows, late, sd, 3, 3, 0.95)
    4
    >>> turns_to_baseline([[5.0, 5.0]] * 5, late, sd, 3, 3, 0.95) is None
    True
    """
    limit = tolerance(len(late), level)
    for end in range(window, len(rows) + 1):
        if _mean_square(standardized_gap(rows[end - window:end], late, turn_sd,
                                         late_turns)) <= limit:
            return end
    return None


@functools.lru_cache(maxsize=64)
def tolerance(features: int, level: float) -> float:
    """The ``level`` quantile of the mean squared standardized gap of a same-process session.

    The quantile is ``scipy.stats.chi2.ppf(level, features)``, computed as that method
    computes it (``2 * gammaincinv(features / 2, level)``) without importing
    ``scipy.stats``, a third of a worker's start-up imports.

    >>> round(tolerance(1, 0.95), 3), round(tolerance(6, 0.95), 3)
    (3.841, 2.099)
    """
    return float(2 * special.gammaincinv(features / 2, level)) / features


def _kernel(mean_square_gap: float, limit: float) -> float:
    """1 within tolerance, then a Gaussian decay in the excess gap."""
    return math.exp(-0.5 * max(0.0, mean_square_gap - limit))


def score_reattunement(
    early: Rows, late_profile: Sequence[float], turn_sd: Sequence[float],
    trust_index: int | None, semantic: float | None, config: DriftConfig,
) -> ReattuneScore:
    """Score a session's first turns against the prior session's late-session profile.

    * convergence: half speed (how early a rolling window comes within tolerance),
      half closeness (a kernel of the whole early window's standardized gap);
    * semantic consistency: ``1 - semantic_drift`` when baseline commitments were
      referenced;
    * trust continuity: the same kernel on the trust gap alone, in full mode.

    The kernels are 1 while the gap is within what a same-process session shows
    at ``reattune_tolerance_level`` and decay beyond it.

    Missing parts give their weight to the others; when the parts present carry
    no weight at all (say a configuration that weighs only trust, in light mode),
    the score is the convergence part, the one part every session has. Every
    part is largest for identical dynamics and falls as the session moves away
    from the profile.

    >>> cfg = DriftConfig()
    >>> late, sd = [0.7, 0.6], [0.1, 0.1]
    >>> same = score_reattunement([late] * 5, late, sd, 0, 0.0, cfg)
    >>> same.quality, same.turns_to_baseline
    (1.0, 3)
    >>> far = score_reattunement([[0.4, 0.3]] * 5, late, sd, 0, None, cfg)
    >>> round(far.quality, 3), far.turns_to_baseline
    (0.003, None)
    >>> trust_only = DriftConfig(reattune_weight_convergence=0.0, reattune_weight_semantic=0.0)
    >>> score_reattunement([late] * 5, late, sd, None, None, trust_only).quality
    1.0
    """
    turns = len(early)
    late_turns = config.late_profile_turns
    window = min(config.reattune_window, turns)
    ttb = (turns_to_baseline(early, late_profile, turn_sd, late_turns, window,
                             config.reattune_tolerance_level) if turns else None)
    gap = standardized_gap(early, late_profile, turn_sd, late_turns)
    level = config.reattune_tolerance_level
    closeness = _kernel(_mean_square(gap), tolerance(len(late_profile), level))
    trust = (None if trust_index is None
             else _kernel(float(gap[trust_index]) ** 2, tolerance(1, level)))
    return reattune_quality(turns, window, ttb, closeness, trust, semantic, config)


def reattune_quality(turns: int, window: int, ttb: int | None, closeness: float,
                     trust: float | None, semantic: float | None, config: DriftConfig
                     ) -> ReattuneScore:
    """The score of a session's parts (:func:`score_reattunement` computes them; the
    compiled kernel's twin computes the same floats and ends here too).

    >>> reattune_quality(5, 3, 3, 1.0, None, None, DriftConfig()).quality
    1.0
    """
    horizon = max(turns - window + 1, 1)
    speed = 0.0 if ttb is None else 1.0 - (ttb - window) / horizon
    convergence = 0.5 * speed + 0.5 * closeness
    consistency = None if semantic is None else 1.0 - semantic
    parts = [(convergence, config.reattune_weight_convergence),
             (consistency, config.reattune_weight_semantic),
             (trust, config.reattune_weight_trust)]
    used = [(v, w) for v, w in parts if v is not None]
    total = left_sum(w for _, w in used)
    quality = left_sum(v * w for v, w in used) / total if total > 0 else convergence
    return ReattuneScore(min(1.0, max(0.0, quality)), ttb, convergence, consistency, trust)
