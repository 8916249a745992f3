"""The attunement component: a calibrated test of a checkpoint window against the baseline.

Under no change its value crosses the medium threshold with probability ``alpha_medium``
per session and the high threshold with probability ``alpha_high``, however few turns the
checkpoint holds. See ``docs/scoring.md`` for the derivation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy import special

from drift.evolve import fast_init
from drift.features import WindowStats
from drift.model import DriftConfig
from drift.sums import array_sum, left_sum

#: Features tested as the relational core of attunement (AD-30 4.1: trust, resonance).
CORE_FEATURES = ("trust", "resonance_depth")
#: Binary features, tested with an exact conditional test.
BINARY_FEATURES = frozenset({"friction"})
#: The smallest p-value a test reports, and the smallest variance a t statistic divides by.
FLOOR_P = 1e-12
VAR_FLOOR = 1e-8


@fast_init
@dataclass(frozen=True, slots=True)
class FeatureTest:
    feature: str
    z: float
    p_value: float
    delta: float


@fast_init
@dataclass(frozen=True, slots=True)
class AttunementTest:
    """The attunement statistic at one checkpoint look."""

    p_value: float
    p_adjusted: float
    look: int
    window: int
    turns: int
    features: tuple[FeatureTest, ...]
    drift: float


AttunementScore = Callable[
    [Sequence[Sequence[float]], tuple[str, ...], Sequence[tuple[WindowStats, float]],
     tuple[tuple[float, ...], int], int, int, DriftConfig], AttunementTest]
"""The signature of :func:`score_attunement_drift`: what a caller of
:func:`drift.fold.step` may pass in its place, if it returns equal values."""


def look_share(look: int, config: DriftConfig) -> float:
    """Share of the per-session false-alarm budget spent at checkpoint ``look`` (1-based).

    The shares sum to at most 1 over any number of looks, so the per-session
    false-alarm rate stays within the budget (Bonferroni over looks).

    >>> cfg = DriftConfig()
    >>> [round(look_share(k, cfg), 4) for k in (1, 2, 3)]
    [0.8, 0.1, 0.05]
    >>> round(sum(look_share(k, cfg) for k in range(1, 60)), 6) <= 1.0
    True
    """
    if look <= 1:
        return config.first_look_share
    return (1.0 - config.first_look_share) * 0.5 ** (look - 1)


def severity(p_adjusted: float, config: DriftConfig) -> float:
    """Map a false-alarm-adjusted p-value into [0, 1] so that the tiers are calibrated.

    ``p = alpha_medium`` maps to the medium threshold and ``p = alpha_high`` to the
    high threshold; in between and beyond the map is linear in ``log p``.

    >>> cfg = DriftConfig()
    >>> severity(1.0, cfg), severity(cfg.alpha_medium, cfg), round(severity(cfg.alpha_high, cfg), 6)
    (0.0, 0.5, 0.8)
    >>> severity(1e-30, cfg)
    1.0
    """
    p = min(1.0, max(p_adjusted, FLOOR_P))
    tm, th = config.threshold_medium, config.threshold_high
    lm, lh, lf = math.log(config.alpha_medium), math.log(config.alpha_high), math.log(1e-8)
    lp = math.log(p)
    if lp >= lm:
        value = tm * lp / lm
    elif lp >= lh:
        value = tm + (th - tm) * (lp - lm) / (lh - lm)
    else:
        value = th + (1.0 - th) * min(1.0, (lp - lh) / (lf - lh))
    return min(1.0, max(0.0, value))



@dataclass(frozen=True, slots=True)
class _Weights:
    """What every feature's t statistic shares: the baseline's recency weights, their sum and
    the variance factor of the weighted baseline mean."""

    total: float
    v_b: float

    @staticmethod
    def of(baseline: Sequence[tuple[WindowStats, float]]) -> _Weights:
        total = array_sum([w for _, w in baseline])
        return _Weights(total, array_sum([(w / total) * (w / total) / float(s.n)
                                          for s, w in baseline]))


def _t_statistic(
    current: Sequence[float], baseline: Sequence[tuple[WindowStats, float]], j: int,
    pooled_m2: float, pooled_df: int, weights: _Weights,
) -> tuple[float, int]:
    """Pooled-variance two-sample t statistic of one feature's ``current`` values and its df."""
    k = len(current)
    total, v_b = weights.total, weights.v_b
    mu_b = array_sum([w * s.mean[j] for s, w in baseline]) / total
    cur_mean = array_sum(current) / k
    m2 = pooled_m2 + array_sum([(x - cur_mean) * (x - cur_mean) for x in current])
    df = pooled_df + k - 1
    var = max(m2 / df, VAR_FLOOR)
    return (cur_mean - mu_b) / math.sqrt(var * (1.0 / k + v_b)), df


def _binary_test(current: Sequence[float], baseline: Sequence[tuple[WindowStats, float]], j: int
                 ) -> tuple[float, float]:
    """Fisher's exact test of a rate against the baseline's; returns (delta, p)."""
    k = len(current)
    c = round(array_sum(current))
    n = int(sum(s.n for s, _ in baseline))
    b = round(left_sum(s.mean[j] * s.n for s, _ in baseline))
    return c / k - b / max(n, 1), fisher_exact_p(c, k, b, n)


def fisher_exact_p(a: int, row_a: int, b: int, row_b: int) -> float:
    """Two-sided Fisher's exact p-value of ``a`` of ``row_a`` against ``b`` of ``row_b``.

    Exact integer arithmetic over the hypergeometric support, summing every table
    no more likely than the observed one (the same rule as SciPy's ``fisher_exact``).

    >>> round(fisher_exact_p(4, 5, 1, 15), 6)
    0.004902
    >>> fisher_exact_p(1, 5, 3, 15)
    1.0
    """
    total = row_a + row_b
    ones = a + b
    denom = math.comb(total, row_a)
    lo, hi = max(0, ones - row_b), min(ones, row_a)
    probs = [math.comb(ones, x) * math.comb(total - ones, row_a - x) for x in range(lo, hi + 1)]
    observed = probs[a - lo]
    cut = observed * (1 + 1e-7)
    return min(1.0, sum(q for q in probs if q <= cut) / denom)


def score_attunement_drift(
    current: Sequence[Sequence[float]],
    features: tuple[str, ...],
    baseline_windows: Sequence[tuple[WindowStats, float]],
    pooled: tuple[tuple[float, ...], int],
    look: int,
    window: int,
    config: DriftConfig,
) -> AttunementTest:
    """Test one checkpoint window of turns against the baseline's same window.

    ``current`` holds the window's transformed dynamics, one row of ``len(features)``
    values per turn.
    ``baseline_windows`` holds, per baseline session, that window's stats and its
    recency weight. ``pooled`` is the baseline's within-window sum of squared
    deviations per feature and its degrees of freedom.

    Each feature gets an exact small-sample test (pooled t, or Fisher's exact test
    for a binary feature), turned into a z-score; the relational core and the
    other features are combined as two chi-square statistics, and the smaller
    p-value wins after a weighted Bonferroni split (``core_share``). The result is
    adjusted for the look (``look_share``) and mapped by :func:`severity`.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> feats = ("trust", "resonance_depth", "valence")
    >>> sessions = [WindowStats.of(rng.normal(0.6, 0.1, (5, 3))) for _ in range(3)]
    >>> m2 = tuple(float(sum(s.m2[j] for s in sessions)) for j in range(3))
    >>> base = [(s, 0.7 ** i) for i, s in enumerate(sessions)]
    >>> same = score_attunement_drift(rng.normal(0.6, 0.1, (5, 3)), feats, base, (m2, 12), 1, 0,
    ...                        DriftConfig())
    >>> shifted = score_attunement_drift(rng.normal([0.45, 0.45, 0.6], 0.1, (5, 3)), feats, base,
    ...                           (m2, 12), 1, 0, DriftConfig())
    >>> same.drift < 0.5 <= shifted.drift
    True
    >>> shifted.features[0].feature in CORE_FEATURES
    True
    """
    pooled_m2, pooled_df = pooled
    deltas: list[float] = []
    p_values: list[float] = []
    t_at: list[int] = []
    ts: list[float] = []
    dfs: list[int] = []
    weights = _Weights.of(baseline_windows)
    columns = zip(*current, strict=True) if len(current) else ((),) * len(features)
    for j, (feature, values) in enumerate(zip(features, columns, strict=True)):
        column = [float(x) for x in values]
        if feature in BINARY_FEATURES:
            delta, p = _binary_test(column, baseline_windows, j)
            deltas.append(delta)
            p_values.append(p)
        else:
            t, df = _t_statistic(column, baseline_windows, j, pooled_m2[j], pooled_df, weights)
            deltas.append(t)
            p_values.append(math.nan)
            t_at.append(j)
            ts.append(-abs(t))
            dfs.append(df)
    # One call per special function for all features: a ufunc call costs microseconds.
    if ts:
        for j, p in zip(t_at, (2.0 * special.stdtr(dfs, ts)).tolist()):
            p_values[j] = p
    zs = (-special.ndtri([max(p, FLOOR_P) / 2.0 for p in p_values])).tolist()
    tests = [FeatureTest(f, z, p, d) for f, z, p, d in zip(features, zs, p_values, deltas)]
    core = [t for t in tests if t.feature in CORE_FEATURES]
    rest = [t for t in tests if t.feature not in CORE_FEATURES]
    groups = [(g, share) for g, share in ((core, config.core_share),
                                          (rest, 1.0 - config.core_share)) if g]
    if len(groups) == 1:
        groups = [(groups[0][0], 1.0)]
    chis = [left_sum(t.z ** 2 for t in group) for group, _ in groups]
    p_groups = special.chdtrc([len(group) for group, _ in groups], chis).tolist()
    p_value = 1.0
    for (_, share), p_group in zip(groups, p_groups):
        p_value = min(p_value, p_group / share)
    p_value = min(1.0, p_value)
    p_adj = min(1.0, p_value / look_share(look, config))
    ranked = tuple(sorted(tests, key=lambda t: -t.z))
    return AttunementTest(p_value, p_adj, look, window, len(current), ranked,
                          severity(p_adj, config))
