"""The compiled attunement statistic against the reference, float for float.

Two sources of arguments: every call the reference fold makes while folding the golden
log (real checkpoints: every mode's feature set, every look), and hypothesis-drawn ones
(binary features at the edges, one baseline session or five, up to 40 turns a window,
tiny and huge variances). The results are compared as values: every float equal, no
tolerance. Where the compiled part refuses (a Fisher test's counts past exact floats) the
reference's own result comes back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from drift.attunement import AttunementTest, score_attunement_drift
from drift.baseline import UserBaselines
from drift.features import WindowStats
from drift.fold import initial, step
from drift.kernel.attunement import _scores, score_attunement
from drift.model import FEATURES, DriftConfig
from tests.conftest import examples
from tests.streams.golden import golden_events


def _calls_of_the_golden_log() -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def recording(*args: Any) -> AttunementTest:
        calls.append(args)
        return score_attunement_drift(*args)

    states: dict[str, Any] = {}
    baselines: dict[str, UserBaselines] = {}
    config = DriftConfig()
    for e in golden_events():
        result = step(states.get(e.user_id) or initial(e.user_id),
                      baselines.get(e.user_id, UserBaselines()), e, config, recording)
        states[e.user_id], baselines[e.user_id] = result.state, result.baselines
    return calls


def test_every_checkpoint_of_the_golden_log_scores_the_same() -> None:
    calls = _calls_of_the_golden_log()
    assert len(calls) > 100
    assert {len(c[1]) for c in calls} >= {3, 6}, "light and full feature sets"
    for args in calls:
        assert score_attunement(*args) == score_attunement_drift(*args), args


@st.composite
def arguments(draw: st.DrawFn) -> tuple[Any, ...]:
    feats = tuple(f for f in FEATURES if draw(st.booleans())) or ("friction",)
    k = draw(st.integers(1, 12))
    rate = st.floats(0.0, 1.0)
    value = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)

    def row() -> tuple[float, ...]:
        return tuple(float(draw(st.integers(0, 1))) if f == "friction" else draw(value)
                     for f in feats)

    def window() -> WindowStats:
        n = draw(st.integers(1, 40))
        means = [round(draw(rate) * n) / n if f == "friction" else draw(value)
                 for f in feats]
        return WindowStats(n, means, [draw(st.floats(0.0, 1e4)) for _ in feats])

    sessions = draw(st.integers(1, 5))
    decay = draw(st.floats(0.1, 1.0))
    base = [(window(), decay ** i) for i in range(sessions)]
    pooled = (tuple(draw(st.floats(0.0, 1e5)) for _ in feats), draw(st.integers(2, 200)))
    config = DriftConfig(core_share=draw(st.floats(0.05, 0.95)))
    return ([row() for _ in range(k)], feats, base, pooled, draw(st.integers(1, 12)),
            draw(st.integers(0, 2)), config)


@settings(max_examples=examples(400), deadline=None)
@given(arguments())
def test_drawn_arguments_score_the_same(args: tuple[Any, ...]) -> None:
    assert score_attunement(*args) == score_attunement_drift(*args)


def test_counts_past_exact_floats_are_left_to_the_reference() -> None:
    """A Fisher test over a baseline of thousands of turns: the compiled part refuses,
    and the reference's result is returned."""
    feats = ("friction",)
    base = [(WindowStats(5000, [0.5], [1.0]), 1.0)]
    now = [(1.0,)] * 12
    refused = _scores(np.ones((12, 1)), np.array([[5000.0, 1.0, 0.5]]), np.ones(1), 10,
                      np.array([[True], [False]]), 0.8, 0.8, np.empty(5))
    assert not refused
    args = (now, feats, base, ((1.0,), 10), 1, 0, DriftConfig())
    assert score_attunement(*args) == score_attunement_drift(*args)
