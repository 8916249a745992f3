"""The attunement statistic of a checkpoint, compiled: the twin of
:func:`drift.attunement.score_attunement_drift`, float for float.

The compiled part takes every number the reference computes: the pooled t statistics and
Fisher's exact tests per feature, their z scores, the two chi-square groups, the look's
adjustment. SciPy's special functions are called from it through their C entry points
(``scipy.special.cython_special``), which give the floats the ufuncs give. Sums follow
:func:`drift.sums.array_sum`'s order. Python builds the result's values around it.

Exactness is kept by refusal: where a Fisher test's tables pass 2**53 (a float no longer
holds the count), :func:`score_attunement` calls the reference.
``tests/drift/test_kernel_attunement.py`` holds the two equal.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from drift.attunement import (
    BINARY_FEATURES,
    CORE_FEATURES,
    FLOOR_P,
    VAR_FLOOR,
    AttunementTest,
    FeatureTest,
    look_share,
    score_attunement_drift,
    severity,
)
from drift.baseline import AttunementBaseline, UserBaselines, Window
from drift.checkpoint import attunement_inputs, feature_layout, score_inputs
from drift.features import WindowStats
from drift.kernel.floats import array_sum, c_pow, special
from drift.kernel.jit import compiled
from drift.model import DriftConfig
from drift.state import SessionState

_EXACT = 2 ** 53  # from here a float no longer holds every integer


_stdtr = special("__pyx_fuse_0stdtr", 2)  # the (double, double) variant
_ndtri = special("ndtri", 1)
_chdtrc = special("chdtrc", 2)


@compiled("i8(i8, i8)")
def _comb(n: int, k: int) -> int:
    """``math.comb`` while it is below 2**53 (every partial product is); -1 past it."""
    if k < 0 or k > n:
        return 0
    if n >= 1024:  # a partial product could pass 2**63 before its division
        return -1
    k = min(k, n - k)
    out = 1
    for i in range(1, k + 1):
        out = out * (n - k + i) // i
        if out >= _EXACT:
            return -1
    return out


@compiled("f8(i8, i8, i8, i8)")
def _fisher(a: int, row_a: int, b: int, row_b: int) -> float:
    """:func:`drift.attunement.fisher_exact_p`; -1.0 where its counts pass 2**53."""
    total = row_a + row_b
    ones = a + b
    denom = _comb(total, row_a)
    if denom < 0:
        return -1.0
    lo, hi = max(0, ones - row_b), min(ones, row_a)
    observed = _comb(ones, a) * _comb(total - ones, row_a - a)
    cut = observed * (1 + 1e-7)
    kept = 0
    for x in range(lo, hi + 1):
        q = _comb(ones, x) * _comb(total - ones, row_a - x)
        if q <= cut:
            kept += q
    p = kept / denom
    return min(1.0, p)


@compiled("b1(f8[:, ::1], f8[:, ::1], f8[::1], i8, b1[:, ::1], f8, f8, f8[::1])")
def _scores(current: npt.NDArray[np.float64], base: npt.NDArray[np.float64],
            pooled_m2: npt.NDArray[np.float64], pooled_df: int, kinds: npt.NDArray[np.bool_],
            core_share: float, share: float, out: npt.NDArray[np.float64]) -> bool:
    """Fill ``out`` with, per feature, the delta, the p-value and the z score (three
    rows of the features), then the p-value and the adjusted one; False if a count is
    past exact floats. ``base`` holds a row per baseline session: its count, its recency
    weight, then its means; ``kinds`` per feature whether it is binary, and core."""
    n_features = current.shape[1]
    deltas = out[:n_features]
    p_values = out[n_features:2 * n_features]
    zs = out[2 * n_features:3 * n_features]
    ns = base[:, 0].copy()
    weights = base[:, 1].copy()
    means = base[:, 2:]
    binary = kinds[0]
    core = kinds[1]
    k = current.shape[0]
    s = weights.shape[0]
    total = array_sum(weights)
    parts = np.empty(s)
    for i in range(s):
        parts[i] = (weights[i] / total) * (weights[i] / total) / float(ns[i])
    v_b = array_sum(parts)
    n_base = 0
    for i in range(s):
        n_base += int(ns[i])
    column = np.empty(k)
    sq = np.empty(k)
    for j in range(n_features):
        for r in range(k):
            column[r] = current[r, j]
        if binary[j]:
            c = int(np.rint(array_sum(column)))
            b_sum = 0.0
            for i in range(s):
                b_sum += means[i, j] * ns[i]
            b = int(np.rint(b_sum))
            p = _fisher(c, k, b, n_base)
            if p < 0.0:
                return False
            deltas[j] = c / k - b / max(n_base, 1)
            p_values[j] = p
        else:
            for i in range(s):
                parts[i] = weights[i] * means[i, j]
            mu_b = array_sum(parts) / total
            cur_mean = array_sum(column) / k
            for r in range(k):
                sq[r] = (column[r] - cur_mean) * (column[r] - cur_mean)
            m2 = pooled_m2[j] + array_sum(sq)
            df = pooled_df + k - 1
            var = m2 / df
            var = max(var, VAR_FLOOR)
            t = (cur_mean - mu_b) / math.sqrt(var * (1.0 / k + v_b))
            deltas[j] = t
            p_values[j] = 2.0 * _stdtr(float(df), -abs(t))
    chi_core = 0.0
    chi_rest = 0.0
    n_core = 0
    for j in range(n_features):
        p = p_values[j]
        p = max(p, FLOOR_P)
        zs[j] = -_ndtri(p / 2.0)
        if core[j]:
            chi_core += c_pow(zs[j], 2.0)
            n_core += 1
        else:
            chi_rest += c_pow(zs[j], 2.0)
    n_rest = n_features - n_core
    p_value = 1.0
    if n_core and n_rest:
        p_value = min(p_value, _chdtrc(float(n_core), chi_core) / core_share)
        p_value = min(p_value, _chdtrc(float(n_rest), chi_rest) / (1.0 - core_share))
    elif n_core:  # one group: its share is the whole budget
        p_value = min(p_value, _chdtrc(float(n_core), chi_core))
    elif n_rest:
        p_value = min(p_value, _chdtrc(float(n_rest), chi_rest))
    p_value = min(1.0, p_value)
    out[3 * n_features] = p_value
    out[3 * n_features + 1] = min(1.0, p_value / share)
    return True


# The reference's signature on purpose: this compiled twin is passed where
# drift.attunement.score_attunement_drift is (drift.fold.step's ``score``).
def score_attunement(
    current: Sequence[Sequence[float]],
    features: tuple[str, ...],
    baseline_windows: Sequence[tuple[WindowStats, float]],
    pooled: tuple[tuple[float, ...], int],
    look: int,
    window: int,
    config: DriftConfig,
) -> AttunementTest:
    """What :func:`drift.attunement.score_attunement_drift` returns for the same arguments
    (:data:`drift.attunement.AttunementScore`): computed compiled, or by the reference
    where a count is past exact floats.

    >>> from drift.attunement import score_attunement_drift
    >>> rng = np.random.default_rng(0)
    >>> feats = ("trust", "resonance_depth", "friction")
    >>> wins = [WindowStats.of(rng.normal(0.6, 0.1, (5, 3)).round(0)) for _ in range(3)]
    >>> base = [(s, 0.7 ** i) for i, s in enumerate(wins)]
    >>> now = rng.normal(0.5, 0.1, (5, 3)).round(0).tolist()
    >>> args = (now, feats, base, ((0.1, 0.2, 0.3), 12), 1, 0, DriftConfig())
    >>> score_attunement(*args) == score_attunement_drift(*args)
    True
    """
    rows = np.array(current, dtype=np.float64).reshape(len(current), len(features))
    return score_rows(rows, features, baseline_windows, pooled, look, window, config)


def score_rows(rows: npt.NDArray[np.float64], features: tuple[str, ...],
               baseline_windows: Sequence[tuple[WindowStats, float]],
               pooled: tuple[tuple[float, ...], int], look: int, window: int,
               config: DriftConfig) -> AttunementTest:
    """:func:`score_attunement` of rows already in an array (one per turn, ``features`` in
    order, C-contiguous): the turn log's rows where the kernel holds them."""
    n = len(features)
    found = baseline_windows if type(baseline_windows) is Window else None
    out = np.empty(3 * n + 2)
    m2 = np.array(pooled[0], dtype=np.float64)
    share = look_share(look, config)
    if found is not None and found.baseline.features == features:
        # A baseline's window over these features, read where its numbers are: no window
        # objects built, and one compiled call.
        b = found.baseline
        exact = _window_scores(rows, np.frombuffer(b.table, dtype=np.float64), _shape(b.shape),
                               found.w, found.decay, m2, pooled[1], _kinds(features),
                               config.core_share, share, out)
    else:
        base = np.array([(s.n, w, *s.mean) for s, w in baseline_windows], dtype=np.float64)
        exact = _scores(rows, base, m2, pooled[1], _kinds(features), config.core_share, share,
                        out)
    if not exact:
        return score_attunement_drift(rows.tolist(), features, baseline_windows, pooled, look,
                                      window, config)
    return _test(out, features, look, window, rows.shape[0], config)


def _test(out: npt.NDArray[np.float64], features: tuple[str, ...], look: int, window: int,
          turns: int, config: DriftConfig) -> AttunementTest:
    """The :class:`AttunementTest` of what :func:`_scores` put in ``out``."""
    n = len(features)
    values = out.tolist()
    tests = [FeatureTest(f, values[2 * n + j], values[n + j], values[j])
             for j, f in enumerate(features)]
    p_value, p_adj = values[3 * n:]
    return AttunementTest(p_value, p_adj, look, window, turns,
                          tuple(sorted(tests, key=lambda t: -t.z)), severity(p_adj, config))


def attunement_of_rows(rows: npt.NDArray[np.float64], session: SessionState,
                       baselines: UserBaselines, config: DriftConfig) -> AttunementTest | None:
    """:func:`drift.checkpoint.attunement_test` of the turns since the last look given as an
    array (one row per turn, every feature in :data:`drift.model.FEATURES` order), as the
    kernel's turn row holds them: scored where they are, without the turn log's tuples.
    Where the mode tests every feature, what the reference reads of the baseline (the
    window's turns, the pooled squares) is read from its table in the same compiled call
    as the statistic; a mode that tests only some features reads it as the reference does.
    """
    base = baselines.attunement
    if base is None or not rows.shape[0]:
        return None
    layout = feature_layout(session.mode.value, base.features)
    if not layout.whole:
        inputs = attunement_inputs(session, baselines, config, rows.shape[0])
        if inputs is None:
            return None
        return score_inputs(tuple(map(tuple, rows.tolist())), inputs, score_attunement, config)
    features = layout.features
    w = min(session.turns.looks, config.windows - 1)
    look = session.turns.looks + 1
    out = np.empty(3 * len(features) + 2)
    found = _checkpoint_scores(rows, np.frombuffer(base.table, dtype=np.float64),
                               _shape(base.shape), w, config.recency_decay,
                               config.min_baseline_turns, _kinds(features), config.core_share,
                               look_share(look, config), out)
    if found == _NO_TEST:
        return None
    if found == _INEXACT:
        return score_attunement_drift(rows.tolist(), features,
                                      base.window(w, config.recency_decay), base.pooled, look,
                                      w, config)
    return _test(out, features, look, w, rows.shape[0], config)


_NO_TEST, _SCORED, _INEXACT = 0, 1, 2
"""What :func:`_checkpoint_scores` did: no statistic (too few baseline turns in the window,
or too few degrees of freedom), the statistic in ``out``, or a count past exact floats."""


@compiled("f8[:, ::1](f8[::1], i8[::1], i8, f8, i8)")
def _base_rows(table: npt.NDArray[np.float64], shape: npt.NDArray[np.int64], w: int,
               decay: float, n: int) -> npt.NDArray[np.float64]:
    """The rows :func:`_scores` reads of a baseline's ``table`` (blocks of a count and
    ``n`` means and squared deviations per session's window, ``shape`` windows a session):
    window ``w``'s count, recency weight and means, of each session with turns in it, as
    :meth:`drift.baseline.Window` lists them."""
    width = 1 + 2 * n
    out = np.empty((shape.shape[0], 2 + n))
    rows = 0
    at = 0
    for age in range(shape.shape[0]):
        k = at + w * width
        if w < shape[age] and table[k] > 0:
            out[rows, 0] = table[k]
            out[rows, 1] = c_pow(decay, float(age))
            for j in range(n):
                out[rows, 2 + j] = table[k + 1 + j]
            rows += 1
        at += shape[age] * width
    return out[:rows].copy()


@compiled("b1(f8[:, ::1], f8[::1], i8[::1], i8, f8, f8[::1], i8, b1[:, ::1], f8, f8, "
          "f8[::1])")
def _window_scores(current: npt.NDArray[np.float64], table: npt.NDArray[np.float64],
                   shape: npt.NDArray[np.int64], w: int, decay: float,
                   pooled_m2: npt.NDArray[np.float64], pooled_df: int,
                   kinds: npt.NDArray[np.bool_], core_share: float, share: float,
                   out: npt.NDArray[np.float64]) -> bool:
    """:func:`_scores` of window ``w`` of a baseline's ``table`` (:func:`_base_rows`), in
    one call from Python."""
    base = _base_rows(table, shape, w, decay, current.shape[1])
    return _scores(current, base, pooled_m2, pooled_df, kinds, core_share, share, out)


@compiled("i8(f8[::1], f8[::1])")
def _pooled(table: npt.NDArray[np.float64], m2: npt.NDArray[np.float64]) -> int:
    """:attr:`drift.baseline.AttunementBaseline.pooled` of a baseline's ``table``: the
    squares into ``m2`` (one per feature, added window by window in the table's order,
    from 0.0), the degrees of freedom returned."""
    n = m2.shape[0]
    width = 1 + 2 * n
    m2[:] = 0.0
    df = 0
    for at in range(0, table.shape[0], width):
        if table[at] > 0:
            for j in range(n):
                m2[j] = m2[j] + table[at + 1 + n + j]
            df += int(table[at]) - 1
    return df


@compiled("void(f8[::1], f8[::1])")
def _turn_sd(table: npt.NDArray[np.float64], out: npt.NDArray[np.float64]) -> None:
    df = max(_pooled(table, out), 1)
    for j in range(out.shape[0]):
        out[j] = math.sqrt(max(out[j] / df, 1e-6))


def turn_sd(base: AttunementBaseline) -> tuple[float, ...]:
    """:meth:`drift.baseline.AttunementBaseline.turn_sd`, read from the baseline's table
    (:data:`drift.checkpoint.StepContext.turn_sd`).

    >>> from drift.baseline import next_meta
    >>> from drift.model import BaselineKind, Mode, ModelTriple
    >>> meta = next_meta(None, "u", BaselineKind.ATTUNEMENT, 0.0, "s",
    ...                  ModelTriple("m", "t", "p"), Mode.LIGHT, DriftConfig())
    >>> stats = WindowStats(5, (0.5,), (0.9,))
    >>> b = AttunementBaseline.of(meta, ("friction",), ((stats, stats),), (0.2,))
    >>> turn_sd(b) == b.turn_sd()
    True
    """
    out = np.empty(len(base.features))
    _turn_sd(np.frombuffer(base.table, dtype=np.float64), out)
    return tuple(out.tolist())


@compiled("i8(f8[:, ::1], f8[::1], i8[::1], i8, f8, i8, b1[:, ::1], f8, f8, f8[::1])")
def _checkpoint_scores(current: npt.NDArray[np.float64], table: npt.NDArray[np.float64],
                       shape: npt.NDArray[np.int64], w: int, decay: float, min_turns: int,
                       kinds: npt.NDArray[np.bool_], core_share: float, share: float,
                       out: npt.NDArray[np.float64]) -> int:
    """:func:`drift.checkpoint.attunement_inputs` and the statistic of window ``w`` of a
    baseline's ``table`` in one call: the window's turns (:meth:`drift.baseline.Window.turns`,
    summed over the rows :func:`_base_rows` finds) and the pooled squares and degrees of freedom
    (:attr:`drift.baseline.AttunementBaseline.pooled`, added in its order), then
    :func:`_window_scores`. Returns ``_NO_TEST``, ``_SCORED`` or ``_INEXACT``."""
    n = current.shape[1]
    base = _base_rows(table, shape, w, decay, n)
    turns = 0
    for i in range(base.shape[0]):  # the counts of the window's sessions with turns
        turns += int(base[i, 0])
    if turns < min_turns:
        return _NO_TEST
    m2 = np.empty(n)
    df = _pooled(table, m2)
    if df < 2:
        return _NO_TEST
    return _SCORED if _scores(current, base, m2, df, kinds, core_share, share, out) else _INEXACT


@functools.lru_cache(maxsize=64)
def _shape(shape: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """A baseline's windows per session as an array (the shapes are few, and shared)."""
    return np.array(shape, dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _kinds(features: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    """Per feature, whether it is binary (first row) and of the relational core (second)."""
    return np.array([[f in BINARY_FEATURES for f in features],
                     [f in CORE_FEATURES for f in features]], dtype=np.bool_)

