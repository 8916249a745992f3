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
from drift.baseline import AttunementBaseline, UserBaselines, next_meta
from drift.checkpoint import attunement_test
from drift.features import WindowStats
from drift.fold import initial, step
from drift.kernel.attunement import _scores, attunement_of_rows, score_attunement, turn_sd
from drift.kernel.floats import c_pow
from drift.kernel.jit import compiled
from drift.model import FEATURES, BaselineKind, DriftConfig, Mode, ModelTriple
from drift.state import SessionState, TurnLog
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


@settings(max_examples=examples(300), deadline=None)
@given(arguments(), st.data())
def test_a_baseline_window_read_from_its_table_scores_the_same(args: tuple[Any, ...],
                                                              data: st.DataObject) -> None:
    """A baseline's own window (:class:`drift.baseline.Window`), which the compiled
    statistic reads from the baseline's table: the same result as the reference's on the
    window's objects, with sessions of one to three windows and windows that are None."""
    rows, feats, base, pooled, look, _, config = args
    stats = [s for s, _ in base]
    sessions = tuple(
        tuple(None if data.draw(st.booleans()) else stats[(i + j) % len(stats)]
              for j in range(data.draw(st.integers(1, 3))))
        for i in range(len(stats)))
    meta = next_meta(None, "u", BaselineKind.ATTUNEMENT, 0.0, "s", ModelTriple("m", "t", "p"),
                     Mode.FULL, config)
    baseline = AttunementBaseline.of(meta, feats, sessions, (0.0,) * len(feats))
    w = data.draw(st.integers(0, 3))
    found = baseline.window(w, data.draw(st.floats(0.1, 1.0)))
    assert found.turns() == sum(s.n for s, _ in found)
    if not len(found):
        return
    assert score_attunement(rows, feats, found, pooled, look, w, config) \
        == score_attunement_drift(rows, feats, list(found), pooled, look, w, config)


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


def test_squares_are_pythons_even_where_pow_is_not_correctly_rounded() -> None:
    """Python's ``z ** 2`` is C's pow, which differs from ``z * z`` by an ulp for about one
    z in a thousand; the compiled part squares with the same pow."""
    square = compiled("f8(f8)", cache=False)(lambda z: c_pow(z, 2.0))
    zs = np.random.default_rng(7).uniform(0.0, 6.0, 20_000).tolist()
    assert any(z ** 2 != z * z for z in zs), "the draw holds squares pow rounds otherwise"
    assert [square(z) for z in zs] == [z ** 2 for z in zs]


def test_a_checkpoint_whose_z_squared_is_not_z_times_z_scores_the_same() -> None:
    """Found by the move test (seed 57817): trust's z of 2.9435663567401926, whose
    ``z ** 2`` is one ulp above ``z * z``, gave a drift score one ulp apart."""
    feats = ("trust", "resonance_depth", "valence", "friction", "user_tokens", "latency_ms")
    now = [[0.6865980032454236, 0.5104484292089618, 0.2506760886503802, 0.0,
            3.58351893845611, 6.776673917493628],
           [0.6891531125267176, 0.5424361616719815, 0.28009360215605184, 0.0,
            3.6888794541139363, 6.881577815916254],
           [0.6467966941293861, 0.5739015978254649, 0.21095713794657464, 1.0,
            3.6375861597263857, 6.883420274620137],
           [0.6770208886930915, 0.447879800529132, 0.14976708260490368, 0.0,
            3.6109179126442243, 6.768288983540345],
           [0.6668458950792188, 0.435801153368134, 0.4735810889034164, 0.0,
            3.8712010109078907, 6.7027392928232]]
    base = [(WindowStats(5, [0.6105363238666875, 0.5057494944782155, 0.1727463400003361, 0.4,
                             3.7036887825435514, 6.7234857800233145],
                         [0.0148149497591048, 0.012844395582686685, 0.04779621877106005, 1.2,
                          0.0979546812602905, 0.011338927550269773]), 1.0),
            (WindowStats(5, [0.5959766002831323, 0.5189872036245357, 0.21297254543441718, 0.0,
                             3.658272381209403, 6.7594179380978785],
                         [0.00984543330543386, 0.017461490578639882, 0.04017186563908984, 0.0,
                          0.10461672855082327, 0.08606901068000639]), 0.7),
            (WindowStats(5, [0.5806639093055445, 0.537830464654149, 0.1765018894966297, 0.0,
                             3.676824429643614, 6.815028710609897],
                         [0.004271735848053293, 0.016750678130998065, 0.010661825938986541,
                          0.0, 0.11943752727128754, 0.06166050357191466]), 0.48999999999999994)]
    pooled = ((0.05561519195375486, 0.09546404599657282, 0.2100820745586306, 4.8,
               0.5686981569623519, 0.38781680102962923), 25)
    args = (now, feats, base, pooled, 1, 0, DriftConfig())
    reference = score_attunement_drift(*args)
    assert reference.features[0].z ** 2 != reference.features[0].z * reference.features[0].z
    assert score_attunement(*args) == reference


@st.composite
def checkpoints(draw: st.DrawFn) -> tuple[Any, ...]:
    """A session at a checkpoint and a baseline over every feature: its sessions of one to
    three windows, some None, of one to six turns (so that some windows hold fewer turns
    than a statistic needs, and some baselines too few degrees of freedom)."""
    value = st.floats(-50.0, 50.0, allow_nan=False)

    def row() -> tuple[float, ...]:
        return tuple(float(draw(st.integers(0, 1))) if f == "friction" else draw(value)
                     for f in FEATURES)

    def window() -> WindowStats | None:
        if draw(st.booleans()) and draw(st.booleans()):
            return None
        n = draw(st.integers(1, 6))
        means = [draw(st.integers(0, n)) / n if f == "friction" else draw(value)
                 for f in FEATURES]
        return WindowStats(n, means, [draw(st.floats(0.0, 1e3)) for _ in FEATURES])

    sessions = tuple(tuple(window() for _ in range(draw(st.integers(1, 3))))
                     for _ in range(draw(st.integers(1, 5))))
    config = DriftConfig(recency_decay=draw(st.floats(0.1, 1.0)))
    mode = draw(st.sampled_from([Mode.FULL, Mode.FULL, Mode.LIGHT]))
    meta = next_meta(None, "u", BaselineKind.ATTUNEMENT, 0.0, "s", ModelTriple("m", "t", "p"),
                     mode, config)
    baseline = AttunementBaseline.of(meta, FEATURES, sessions, (0.0,) * len(FEATURES))
    rows = tuple(row() for _ in range(draw(st.integers(1, 8))))
    turns = TurnLog(n_turns=len(rows), looks=draw(st.integers(0, 4)), current_rows=rows)
    session = SessionState("s", mode, 0.0, 0.0, ModelTriple("m", "t", "p"), ("g", "p", "c"),
                           False, turns)
    return session, UserBaselines(attunement=baseline), config


@settings(max_examples=examples(400), deadline=None)
@given(checkpoints())
def test_a_checkpoint_reads_its_baseline_as_the_reference_does(args: tuple[Any, ...]) -> None:
    """The kernel's checkpoint statistic reads the window's turns and the pooled squares
    from the baseline's table in the statistic's own compiled call: the same test as the
    reference's, and None where the reference has none."""
    session, baselines, config = args
    rows = np.array(session.turns.current_rows, dtype=np.float64)
    reference = attunement_test(session, baselines, config, score_attunement_drift)
    assert attunement_of_rows(rows, session, baselines, config) == reference


@settings(max_examples=examples(200), deadline=None)
@given(checkpoints())
def test_the_pooled_squares_are_the_windows_added_in_order(args: tuple[Any, ...]) -> None:
    """:attr:`AttunementBaseline.pooled` and the kernel's standard deviations read from the
    baseline's table (:func:`drift.kernel.attunement.turn_sd`) against the windows' objects
    added in order: the same floats."""
    baseline = args[1].attunement
    f = len(baseline.features)
    m2, df = [0.0] * f, 0
    for windows in baseline.sessions:
        for stats in windows:
            if stats is not None and stats.n > 0:
                m2 = [a + b for a, b in zip(m2, stats.m2, strict=True)]
                df += stats.n - 1
    assert baseline.pooled == (tuple(m2), df)
    assert turn_sd(baseline) == baseline.turn_sd(), "the kernel's, read from the table"
