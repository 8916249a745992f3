"""The compiled re-attunement score against the reference, float for float.

Two sources of arguments: every re-attunement the kernel scores while folding the golden log
(each session's re-attunement turn, every mode's feature set), and hypothesis-drawn ones
(one early row or many, a window wider than the rows, gaps from none to far past any
tolerance, tiny deviations, trust anywhere or absent, other tolerance levels and weights).
The results are compared as values: every float equal, no tolerance. Arguments the
compiled part does not take go to the reference, whose result (or error) comes back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import drift.kernel.batch
from drift.kernel import UserColumns
from drift.kernel.batch import fold_batch
from drift.kernel.reattune import _kernel, score_reattunement
from drift.model import DriftConfig
from drift.reattune import ReattuneScore
from drift.reattune import _kernel as reference_kernel
from drift.reattune import score_reattunement as reference
from tests.conftest import examples
from tests.streams.golden import golden_events


def test_every_reattunement_of_the_golden_log_scores_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def recording(*args: Any) -> ReattuneScore:
        calls.append(args)
        return score_reattunement(*args)

    monkeypatch.setattr(drift.kernel.batch, "score_reattunement", recording)
    config = DriftConfig()
    cols = UserColumns(config)
    events = golden_events()
    for k in range(0, len(events), 64):
        fold_batch(cols, events[k:k + 64], config)
    assert len(calls) > 20
    assert {len(c[1]) for c in calls} >= {3, 6}, "light and full feature sets"
    assert any(c[3] is not None for c in calls) and any(c[4] is not None for c in calls)
    for args in calls:
        assert score_reattunement(*args) == reference(*args), args


@st.composite
def arguments(draw: st.DrawFn) -> tuple[Any, ...]:
    k = draw(st.integers(1, 6))
    turns = draw(st.integers(1, 12))
    late = [draw(st.floats(-5.0, 10.0)) for _ in range(k)]
    sd = [draw(st.floats(1e-3, 3.0)) for _ in range(k)]
    spread = draw(st.sampled_from([0.0, 1e-9, 0.05, 0.5, 5.0, 500.0]))
    rows = [[v + draw(st.floats(-1.0, 1.0)) * spread for v in late] for _ in range(turns)]
    trust = draw(st.none() | st.integers(0, k - 1))
    semantic = draw(st.none() | st.floats(0.0, 1.0))
    config = DriftConfig(
        reattune_window=draw(st.integers(1, 8)),
        late_profile_turns=draw(st.integers(1, 5)),
        reattune_tolerance_level=draw(st.sampled_from([0.5, 0.9, 0.99, 0.999])),
        reattune_weight_convergence=draw(st.sampled_from([0.0, 0.5, 1.0])),
        reattune_weight_semantic=draw(st.sampled_from([0.0, 0.2])),
        reattune_weight_trust=draw(st.sampled_from([0.0, 0.3])))
    return rows, late, sd, trust, semantic, config


@settings(max_examples=examples(400), deadline=None)
@given(arguments())
def test_drawn_arguments_score_the_same(args: tuple[Any, ...]) -> None:
    assert score_reattunement(*args) == reference(*args)
    # The kernel hands its early rows over as the array its turn row holds them in.
    rows, *rest = args
    assert score_reattunement(np.array(rows, dtype=np.float64), *rest) == reference(*args)


@pytest.mark.parametrize("args", [(math.nan, 1.0), (1.0, math.nan), (-0.0, 0.0), (0.0, 0.0),
                                  (5.0, 1.0), (math.inf, 1.0), (1.0, math.inf)])
def test_the_kernel_of_a_gap_is_pythons_at_the_edges(args: tuple[float, float]) -> None:
    """``max(0.0, x)`` gives 0.0 for a NaN x, and the first of two equal zeros, compiled as
    in Python."""
    got, expected = _kernel(*args), reference_kernel(*args)
    assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_what_the_compiled_part_does_not_take_goes_to_the_reference() -> None:
    config = DriftConfig()
    late, sd = [0.7, 0.6], [0.1, 0.1]
    with pytest.raises(ZeroDivisionError):  # no early rows: the reference divides by none
        reference([], late, sd, None, None, config)
    with pytest.raises(ZeroDivisionError):
        score_reattunement([], late, sd, None, None, config)
    zero_sd = ([late] * 5, late, [0.1, 0.0], 0, None, config)
    with pytest.raises(ZeroDivisionError):
        reference(*zero_sd)
    with pytest.raises(ZeroDivisionError):
        score_reattunement(*zero_sd)
    ragged = ([[0.7, 0.6], [0.7]], late, sd, None, None, config)
    with pytest.raises(ValueError):
        reference(*ragged)
    with pytest.raises(ValueError):
        score_reattunement(*ragged)
