"""Re-attunement quality: invariants of the score and seeded examples that pin it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from drift.model import DriftConfig
from drift.reattune import (
    ReattuneScore,
    score_reattunement,
    standardized_gap,
    tolerance,
    turns_to_baseline,
)
from drift.sums import array_sum
from tests.conftest import examples

CFG = DriftConfig()
#: Every phase but ``explain``, which needs libcst and only decorates a failure report.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)


# --------------------------------------------------------------------------- strategies


@st.composite
def profiles(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A prior late profile, its per-feature turn SD, and a session's early turns.

    Values stay on the scale of the transformed dynamics (unit interval, logs of
    counts and durations); the SD is at least the floor the baselines apply.
    """
    features = draw(st.integers(1, 6))
    turns = draw(st.integers(1, 8))
    value = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)
    late = draw(hnp.arrays(np.float64, features, elements=value))
    sd = draw(hnp.arrays(np.float64, features,
                         elements=st.floats(1e-3, 5.0, allow_nan=False, allow_infinity=False)))
    early = draw(hnp.arrays(np.float64, (turns, features), elements=value))
    return late, sd, early


trust_slots = st.one_of(st.none(), st.integers(0, 5))
semantics = st.one_of(st.none(), st.floats(0.0, 1.0, allow_nan=False))
weights = st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False)


@st.composite
def configs(draw: st.DrawFn) -> DriftConfig:
    w = (draw(weights), draw(weights), draw(weights))
    if sum(w) == 0.0:
        w = (1.0, 0.0, 0.0)
    return DriftConfig(
        reattune_weight_convergence=w[0], reattune_weight_semantic=w[1],
        reattune_weight_trust=w[2],
        reattune_window=draw(st.integers(1, 5)),
        reattune_tolerance_level=draw(st.sampled_from([0.9, 0.95, 0.99, 0.999])),
        late_profile_turns=draw(st.integers(1, 6)),
    )


def _trust(index: int | None, features: int) -> int | None:
    return None if index is None else index % features


def _parts(score: ReattuneScore) -> list[float]:
    return [v for v in (score.quality, score.convergence, score.semantic_consistency,
                        score.trust_continuity) if v is not None]


# --------------------------------------------------------------------------- properties


@settings(max_examples=examples(300), deadline=None, phases=PHASES)
@given(profiles(), trust_slots, semantics, configs())
def test_score_and_every_component_stay_in_the_unit_interval(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], trust: int | None, semantic: float | None,
    config: DriftConfig,
) -> None:
    late, sd, early = data
    score = score_reattunement(early, late, sd, _trust(trust, len(late)), semantic, config)
    assert all(0.0 <= v <= 1.0 for v in _parts(score))
    ttb = score.turns_to_baseline
    assert ttb is None or min(config.reattune_window, len(early)) <= ttb <= len(early)


@settings(max_examples=examples(300), deadline=None, phases=PHASES)
@given(profiles(), trust_slots, st.sampled_from([None, 0.0]), configs())
def test_identical_dynamics_give_the_maximum_score(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], trust: int | None, semantic: float | None,
    config: DriftConfig,
) -> None:
    late, sd, early = data
    same = np.tile(late, (early.shape[0], 1))
    score = score_reattunement(same, late, sd, _trust(trust, len(late)), semantic, config)
    assert score.quality == 1.0
    assert score.convergence == 1.0
    assert score.turns_to_baseline == min(config.reattune_window, early.shape[0])


@settings(max_examples=examples(500), deadline=None, phases=PHASES)
@given(profiles(), st.floats(1.0, 50.0, allow_nan=False), trust_slots, semantics, configs())
def test_moving_further_from_the_profile_never_scores_higher(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], lam: float, trust: int | None,
    semantic: float | None, config: DriftConfig,
) -> None:
    late, sd, early = data
    deviation = early - late
    better = late + deviation
    worse = late + lam * deviation
    index = _trust(trust, len(late))
    b = score_reattunement(better, late, sd, index, semantic, config)
    w = score_reattunement(worse, late, sd, index, semantic, config)
    assert w.quality <= b.quality + 1e-12
    assert w.convergence <= b.convergence + 1e-12
    if b.trust_continuity is not None and w.trust_continuity is not None:
        assert w.trust_continuity <= b.trust_continuity + 1e-12
    if w.turns_to_baseline is not None:
        assert b.turns_to_baseline is not None
        assert b.turns_to_baseline <= w.turns_to_baseline


@settings(max_examples=examples(200), deadline=None, phases=PHASES)
@given(profiles(), trust_slots, st.floats(0.0, 1.0), st.floats(0.0, 1.0), configs())
def test_more_contradicted_commitments_never_score_higher(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], trust: int | None, a: float, b: float,
    config: DriftConfig,
) -> None:
    late, sd, early = data
    low, high = sorted((a, b))
    index = _trust(trust, len(late))
    kept = score_reattunement(early, late, sd, index, low, config)
    broken = score_reattunement(early, late, sd, index, high, config)
    assert broken.quality <= kept.quality + 1e-12


@settings(max_examples=examples(200), deadline=None, phases=PHASES)
@given(profiles(), st.sampled_from([0.9, 0.95, 0.99]))
def test_turns_to_baseline_is_the_first_window_within_tolerance(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], level: float,
) -> None:
    late, sd, early = data
    window = min(3, early.shape[0])
    ttb = turns_to_baseline(early, late, sd, 3, window, level)
    limit = tolerance(len(late), level)
    inside = [end for end in range(window, early.shape[0] + 1)
              if float(np.mean(_numpy_gap(early[end - window:end], late, sd, 3) ** 2)) <= limit]
    assert ttb == (inside[0] if inside else None)


def _numpy_gap(rows: np.ndarray, late: np.ndarray, sd: np.ndarray, late_turns: int
               ) -> np.ndarray:
    """The standardized gap as the NumPy expression it replaced computed it."""
    n = rows.shape[0]
    return np.asarray((rows.mean(axis=0) - late) / (sd * math.sqrt(1.0 / n + 1.0 / late_turns)))


@settings(max_examples=examples(300), deadline=None, phases=PHASES)
@given(profiles(), st.integers(1, 12))
def test_the_plain_float_gap_is_the_numpy_one(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], late_turns: int,
) -> None:
    """Exactly for fewer than 8 rows (NumPy sums longer columns in pairwise blocks); the
    early window of a re-attunement has 5 at the default checkpoint turn."""
    late, sd, early = data
    expected = _numpy_gap(early, late, sd, late_turns)
    got = standardized_gap(early.tolist(), late.tolist(), sd.tolist(), late_turns)
    if early.shape[0] < 8:
        assert got == expected.tolist()
        assert array_sum([g * g for g in got]) / len(got) == float(np.mean(expected ** 2))
    else:
        # NumPy's pairwise sum and the plain one may differ by a few rounding errors of the
        # column's magnitudes, which the gap divides by its standard error: a bound in the
        # inputs' units, not the gap's (a gap near zero has no relative precision to keep).
        n = early.shape[0]
        unit = np.finfo(np.float64).eps * np.abs(early).max(axis=0)
        bound = 2 * n * unit / (sd * math.sqrt(1.0 / n + 1.0 / late_turns))
        assert np.all(np.abs(np.array(got) - expected) <= bound + 1e-12 * np.abs(expected))


# --------------------------------------------------------------------------- seeded examples


def _process(rng: np.random.Generator, turns: int, mean: np.ndarray, sd: np.ndarray
             ) -> np.ndarray:
    return np.asarray(mean + sd * rng.standard_normal((turns, len(mean))))


MEAN = np.array([0.6, 0.5, 0.2, 3.9, 6.8])
SD = np.array([0.07, 0.07, 0.12, 0.4, 0.3])


def test_a_session_from_the_prior_process_completes() -> None:
    rng = np.random.default_rng(20260101)
    late = _process(rng, CFG.late_profile_turns, MEAN, SD).mean(axis=0)
    early = _process(rng, CFG.reattune_checkpoint_turn, MEAN, SD)
    score = score_reattunement(early, late, SD, 0, None, CFG)
    assert score.quality >= CFG.reattune_threshold
    assert score.turns_to_baseline == 3
    assert score.semantic_consistency is None
    assert score.trust_continuity == 1.0


def test_a_collapse_of_three_turn_sds_fails_with_no_turn_to_baseline() -> None:
    rng = np.random.default_rng(20260102)
    late = _process(rng, CFG.late_profile_turns, MEAN, SD).mean(axis=0)
    shift = np.array([-3.0, -3.0, -3.0, 0.0, 0.0]) * SD
    early = _process(rng, CFG.reattune_checkpoint_turn, MEAN + shift, SD)
    score = score_reattunement(early, late, SD, 0, None, CFG)
    assert score.quality < 0.05
    assert score.turns_to_baseline is None


def test_a_session_that_converges_by_turn_four_is_scored_by_that_turn() -> None:
    late = np.zeros(2)
    sd = np.ones(2)
    early = np.array([[6.0, 6.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    score = score_reattunement(early, late, sd, None, None, CFG)
    assert score.turns_to_baseline == 4
    horizon = 5 - 3 + 1
    speed = 1.0 - (4 - 3) / horizon
    assert score.convergence == pytest.approx(0.5 * speed + 0.5 * 1.0)
    assert score.quality == pytest.approx(score.convergence)


def test_missing_parts_hand_their_weight_to_the_others() -> None:
    late = np.array([0.6, 0.5])
    sd = np.array([0.1, 0.1])
    early = np.tile(late, (5, 1))
    with_semantic = score_reattunement(early, late, sd, 0, 0.5, CFG)
    weights = (CFG.reattune_weight_convergence, CFG.reattune_weight_semantic,
               CFG.reattune_weight_trust)
    assert with_semantic.semantic_consistency == 0.5
    assert with_semantic.quality == pytest.approx(
        (weights[0] * 1.0 + weights[1] * 0.5 + weights[2] * 1.0) / sum(weights))
    without = score_reattunement(early, late, sd, None, None, CFG)
    assert without.trust_continuity is None and without.semantic_consistency is None
    assert without.quality == 1.0


def test_trust_continuity_is_one_inside_the_one_feature_tolerance() -> None:
    late = np.array([0.6])
    sd = np.array([0.1])
    se = 0.1 * math.sqrt(1 / 5 + 1 / CFG.late_profile_turns)
    edge = math.sqrt(tolerance(1, CFG.reattune_tolerance_level)) * se
    inside = score_reattunement(np.full((5, 1), 0.6 - 0.99 * edge), late, sd, 0, None, CFG)
    outside = score_reattunement(np.full((5, 1), 0.6 - 2.0 * edge), late, sd, 0, None, CFG)
    assert inside.trust_continuity == 1.0
    assert outside.trust_continuity is not None and outside.trust_continuity < 1e-3


def test_the_checkpoint_default_is_the_spec_default() -> None:
    assert (CFG.reattune_checkpoint_turn, CFG.reattune_window, CFG.reattune_threshold,
            CFG.sustained_low_sessions) == (5, 3, 0.6, 3)


def test_the_tolerance_is_scipys_chi_square_quantile_to_the_bit() -> None:
    """``tolerance`` computes ``chi2.ppf`` the way SciPy does, without ``scipy.stats``."""
    from scipy import stats

    for features in range(1, 13):
        for level in np.linspace(0.5, 0.999, 200).tolist():
            expected = float(stats.chi2.ppf(level, features)) / features
            assert tolerance.__wrapped__(features, level) == expected, (features, level)
