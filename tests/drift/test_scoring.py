"""Properties of the drift components, the composite and the calibrated attunement test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drift.attunement import CORE_FEATURES, look_share, score_attunement_drift, severity
from drift.checkpoint import hold_kinds
from drift.composite import composite
from drift.features import WindowStats
from drift.model import BaselineKind, DriftConfig, Tier
from drift.sums import column_means, left_sum
from tests.conftest import examples

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
component = st.one_of(st.none(), unit)
weight = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


@st.composite
def configs(draw: st.DrawFn) -> DriftConfig:
    """Valid scoring configurations: 0 < medium < high < 1, 1e-6 <= alpha_high < alpha_medium."""
    tm = draw(st.floats(min_value=0.05, max_value=0.9))
    th = draw(st.floats(min_value=tm + 0.01, max_value=0.99))
    am = draw(st.floats(min_value=1e-4, max_value=0.5))
    ah = draw(st.floats(min_value=1e-6, max_value=am / 1.5))
    return DriftConfig(
        threshold_medium=tm, threshold_high=th, alpha_medium=am, alpha_high=ah,
        weight_attunement=draw(weight), weight_semantic=draw(weight), weight_safety=draw(weight),
        first_look_share=draw(st.floats(min_value=0.05, max_value=0.95)),
    )


# --------------------------------------------------------------------------- severity


@given(configs(), unit, unit)
@settings(max_examples=examples(300), deadline=None)
def test_severity_is_in_unit_interval_and_falls_as_p_grows(cfg: DriftConfig, p1: float,
                                                           p2: float) -> None:
    lo, hi = sorted((p1, p2))
    s_lo, s_hi = severity(lo, cfg), severity(hi, cfg)
    assert 0.0 <= s_hi <= s_lo <= 1.0


@given(configs())
@settings(max_examples=examples(200), deadline=None)
def test_severity_puts_the_alphas_on_the_tier_thresholds(cfg: DriftConfig) -> None:
    assert severity(cfg.alpha_medium, cfg) == pytest.approx(cfg.threshold_medium, abs=1e-9)
    assert severity(cfg.alpha_high, cfg) == pytest.approx(cfg.threshold_high, abs=1e-9)
    assert severity(1.0, cfg) == 0.0
    # So a p-value crosses a tier exactly when it is below that tier's alpha.
    below_m = cfg.alpha_medium * 0.999
    above_m = min(1.0, cfg.alpha_medium * 1.001)
    assert severity(below_m, cfg) >= cfg.threshold_medium > severity(above_m, cfg)


# --------------------------------------------------------------------------- composite


@given(component, component, component, configs())
@settings(max_examples=examples(400), deadline=None)
def test_composite_is_in_unit_interval_and_never_below_any_weighted_component(
    att: float | None, sem: float | None, saf: float | None, cfg: DriftConfig,
) -> None:
    result = composite(att, sem, saf, cfg)
    if att is None and sem is None and saf is None:
        assert result is None
        return
    assert result is not None
    assert 0.0 <= result.score <= 1.0
    for value, w in ((att, cfg.weight_attunement), (sem, cfg.weight_semantic),
                     (saf, cfg.weight_safety)):
        if value is not None:
            assert result.score >= min(1.0, w * value) - 1e-12
    if saf:
        assert result.tier is Tier.HIGH, "any safety mismatch is high on its own"
    elif result.score >= cfg.threshold_high:
        assert result.tier is Tier.HIGH
    elif result.score >= cfg.threshold_medium:
        assert result.tier is Tier.MEDIUM
    else:
        assert result.tier is Tier.LOW
    assert result.driver in {"attunement", "semantic", "safety"}


@given(unit, unit, unit, unit, configs())
@settings(max_examples=examples(300), deadline=None)
def test_more_evidence_never_lowers_the_composite(att: float, sem: float, extra: float,
                                                  saf: float, cfg: DriftConfig) -> None:
    base = composite(att, sem, saf, cfg)
    more = composite(min(1.0, att + extra), sem, saf, cfg)
    assert base is not None and more is not None
    assert more.score >= base.score and more.tier >= base.tier
    # Adding a component never lowers the score of the others either.
    alone = composite(att, None, None, cfg)
    assert alone is not None and base.score >= alone.score


# Values that tie often (0.0 and equal weights drawn), so the driver's order is exercised.
tied = st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 1.0]), unit)


@given(tied, tied, tied, configs())
@settings(max_examples=examples(400), deadline=None)
def test_the_composite_adds_left_to_right_and_the_first_of_the_largest_drives(
    att: float | None, sem: float | None, saf: float | None, cfg: DriftConfig,
) -> None:
    """The contract, float for float: the weighted components present, in the order
    attunement, semantic, safety, added one by one from 0.0 and capped at 1; the driver the
    first of the largest; any safety mismatch high, at least at the high threshold."""
    weighted = {name: value * w for name, value, w in (
        ("attunement", att, cfg.weight_attunement), ("semantic", sem, cfg.weight_semantic),
        ("safety", saf, cfg.weight_safety)) if value is not None}
    result = composite(att, sem, saf, cfg)
    if not weighted:
        assert result is None
        return
    assert result is not None
    score = min(1.0, left_sum(weighted.values()))
    if saf:
        assert (result.score, result.tier, result.driver) == (
            max(score, cfg.threshold_high), Tier.HIGH, "safety")
        return
    assert result.score == score
    assert result.driver == max(weighted, key=lambda name: weighted[name])


@given(tied, tied, tied, configs())
@settings(max_examples=examples(400), deadline=None)
def test_a_hold_names_the_strong_components_else_every_one_that_added(
    att: float | None, sem: float | None, saf: float | None, cfg: DriftConfig,
) -> None:
    values = {BaselineKind.ATTUNEMENT: att, BaselineKind.SEMANTIC: sem,
              BaselineKind.SAFETY: saf}
    strong = {k for k, v in values.items() if v is not None
              and (v >= cfg.threshold_medium or (k is BaselineKind.SAFETY and v > 0))}
    expected = strong or {k for k, v in values.items() if v}
    assert hold_kinds(att, sem, saf, cfg) == frozenset(expected)


def test_without_semantic_or_safety_change_the_composite_is_the_attunement_component() -> None:
    cfg = DriftConfig()
    for att in (0.0, 0.3, 0.49, 0.5, 0.79, 0.8, 1.0):
        result = composite(att, 0.0, 0.0, cfg)
        assert result is not None and result.score == att


# --------------------------------------------------------------------------- look spending


@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=1, max_value=200))
def test_look_shares_never_spend_more_than_the_budget(first: float, looks: int) -> None:
    cfg = DriftConfig(first_look_share=first)
    shares = [look_share(k, cfg) for k in range(1, looks + 1)]
    assert all(s >= 0 for s in shares)
    assert math.fsum(shares) <= 1.0 + 1e-12


# --------------------------------------------------------------------------- attunement test


FEATS = ("trust", "resonance_depth", "valence")


def _rows(rng: np.random.Generator, n: int, features: tuple[str, ...]) -> np.ndarray:
    """``n`` turns of a null process: unit normal noise, friction at a rate of 0.15."""
    x = rng.standard_normal((n, len(features)))
    for j, f in enumerate(features):
        if f == "friction":
            x[:, j] = rng.random(n) < 0.15
    return x


def _baseline(rng: np.random.Generator, sessions: int, window: int,
              features: tuple[str, ...], decay: float
              ) -> tuple[list[tuple[WindowStats, float]], tuple[tuple[float, ...], int]]:
    """``sessions`` baseline sessions of 12 turns (windows of 5, 5 and 2 turns)."""
    m2 = np.zeros(len(features))
    df = 0
    chosen = []
    for age in range(sessions):
        parts = [_rows(rng, n, features) for n in (5, 5, 2)]
        for part in parts:
            stats = WindowStats.of(part)
            m2 += np.asarray(stats.m2)
            df += stats.n - 1
        chosen.append((WindowStats.of(parts[window]), decay ** age))
    return chosen, (tuple(float(x) for x in m2), df)


@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=1, max_value=4),
       st.floats(min_value=-3.0, max_value=3.0), st.floats(min_value=0.1, max_value=10.0))
@settings(max_examples=examples(100), deadline=None)
def test_attunement_test_is_in_range_and_invariant_to_units(seed: int, look: int, shift: float,
                                                            scale: float) -> None:
    cfg = DriftConfig()
    rng = np.random.default_rng(seed)
    window = min(look - 1, 2)
    base, pooled = _baseline(rng, 3, window, FEATS, cfg.recency_decay)
    current = rng.standard_normal((5, 3)) + np.array([shift, 0.0, 0.0])
    result = score_attunement_drift(current, FEATS, base, pooled, look, window, cfg)
    assert 0.0 <= result.p_value <= result.p_adjusted <= 1.0
    assert 0.0 <= result.drift <= 1.0
    assert result.p_adjusted == pytest.approx(min(1.0, result.p_value / look_share(look, cfg)))
    assert [f.z for f in result.features] == sorted((f.z for f in result.features), reverse=True)
    # Moving and rescaling every value (a change of units) changes nothing.
    moved = [(WindowStats(s.n, tuple(scale * m + 7.0 for m in s.mean),
                          tuple(scale * scale * q for q in s.m2)), w) for s, w in base]
    m2 = tuple(scale * scale * q for q in pooled[0])
    again = score_attunement_drift(scale * current + 7.0, FEATS, moved, (m2, pooled[1]), look,
                                   window, cfg)
    assert again.p_value == pytest.approx(result.p_value, rel=1e-6, abs=1e-12)


@given(st.integers(min_value=0, max_value=2**32 - 1))
@settings(max_examples=examples(50), deadline=None)
def test_a_later_look_needs_stronger_evidence(seed: int) -> None:
    cfg = DriftConfig()
    rng = np.random.default_rng(seed)
    base, pooled = _baseline(rng, 3, 0, FEATS, cfg.recency_decay)
    current = rng.standard_normal((5, 3)) - 1.0
    first = score_attunement_drift(current, FEATS, base, pooled, 1, 0, cfg)
    later = score_attunement_drift(current, FEATS, base, pooled, 2, 0, cfg)
    assert later.p_value == first.p_value and later.drift <= first.drift


def _null_rates(features: tuple[str, ...], look: int, sessions: int, seed: int, n: int,
                cfg: DriftConfig) -> tuple[float, float]:
    """Share of null sessions whose attunement component crosses medium and high."""
    rng = np.random.default_rng(seed)
    window = min(look - 1, 2)
    medium = high = 0
    for _ in range(n):
        base, pooled = _baseline(rng, sessions, window, features, cfg.recency_decay)
        current = _rows(rng, 5, features)
        drift = score_attunement_drift(current, features, base, pooled, look, window, cfg).drift
        medium += drift >= cfg.threshold_medium
        high += drift >= cfg.threshold_high
    return medium / n, high / n


def test_calibrated_under_no_change_at_the_first_look() -> None:
    """Under the null, medium is crossed at ``alpha_medium * look_share(1)`` (3.2%)."""
    cfg = DriftConfig()
    n = 3000
    medium, high = _null_rates(FEATS, 1, 3, 20261130, n, cfg)
    nominal_m = cfg.alpha_medium * look_share(1, cfg)
    nominal_h = cfg.alpha_high * look_share(1, cfg)
    sd_m = math.sqrt(nominal_m * (1 - nominal_m) / n)
    assert abs(medium - nominal_m) < 3.5 * sd_m, (medium, nominal_m)
    assert high < nominal_h + 3.5 * math.sqrt(nominal_h / n), (high, nominal_h)


def test_calibrated_at_a_later_look_with_a_single_baseline_session() -> None:
    cfg = DriftConfig()
    n = 3000
    medium, _ = _null_rates(CORE_FEATURES, 2, 1, 7, n, cfg)
    nominal = cfg.alpha_medium * look_share(2, cfg)
    assert abs(medium - nominal) < 3.5 * math.sqrt(nominal / n) + 1e-3, (medium, nominal)


def test_the_exact_binary_test_keeps_the_false_alarm_rate_within_budget() -> None:
    """Fisher's exact test is conservative: with a binary feature the rate only falls."""
    cfg = DriftConfig()
    n = 1500
    medium, _ = _null_rates(("friction", "user_tokens", "latency_ms"), 1, 3, 11, n, cfg)
    nominal = cfg.alpha_medium * look_share(1, cfg)
    assert medium < nominal + 3.5 * math.sqrt(nominal / n), (medium, nominal)


@pytest.mark.parametrize("shift", [-1.5, 1.5])
def test_a_shift_in_the_core_features_is_attributed_to_them(shift: float) -> None:
    cfg = DriftConfig()
    rng = np.random.default_rng(4)
    feats = ("trust", "resonance_depth", "valence", "user_tokens")
    base, pooled = _baseline(rng, 3, 0, feats, cfg.recency_decay)
    current = rng.standard_normal((5, 4)) + np.array([shift, shift, 0.0, 0.0])
    result = score_attunement_drift(current, feats, base, pooled, 1, 0, cfg)
    assert result.drift >= cfg.threshold_medium
    assert {f.feature for f in result.features[:2]} == set(CORE_FEATURES)
    assert all((f.delta > 0) == (shift > 0) for f in result.features[:2])


@given(st.integers(min_value=1, max_value=7).flatmap(
    lambda n: st.lists(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
                                min_size=6, max_size=6), min_size=n, max_size=n)))
@settings(max_examples=examples(200), deadline=None)
def test_column_means_are_numpys_below_eight_rows(rows: list[list[float]]) -> None:
    """The late profile and the re-attunement window are averaged in plain floats: below
    8 rows they must be NumPy's ``mean(axis=0)`` to the last bit (the stored baselines and
    the golden outputs were made with it)."""
    assert column_means(rows) == np.asarray(rows).mean(axis=0).tolist()
