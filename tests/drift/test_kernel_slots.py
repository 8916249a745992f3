"""What a slot keeps beside its columns, and what a tick reads of it without building a state.

A stripped slot holds its user's state object without the dedupe ring and the open
session's turn log (the columns hold them; ``docs/performance.md``, "Per-user state"): the
state read back, and every effect of the events folded on from it, are still the
reference's, to the byte. A tick, and the
worker's check for one, build only the states of the users whose sweep may change them
(:meth:`drift.kernel.views.StateView.may_be_due`): that check must never say no where the
sweep would do something.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baselines.snapshot import encode_state
from drift.baseline import UserBaselines
from drift.fold import due, sweep
from drift.kernel import UserColumns
from drift.kernel.layout import I_TROW
from drift.model import DriftConfig, FhrEvent, Mode
from drift.state import UserState
from tests.drift.kernel_paths import CONFIGS, Run, assert_same, kernel, reference, users_log
from tests.drift.test_fold_properties import Plan, plans
from tests.streams.golden import golden_events

EXAMPLES = int(os.environ.get("KERNEL_EXAMPLES", "25"))


def drawn(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test`` on drawn logs: up to three users' sessions, their interleaving's seed,
    the batch size and the configuration."""
    return settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow])(given(
        st.lists(st.lists(plans, min_size=1, max_size=5), min_size=1, max_size=3),
        st.integers(0, 2**32), st.sampled_from([1, 7, 64]), st.sampled_from(CONFIGS))(test))


def _held(events: list[FhrEvent], config: DriftConfig, batch: int) -> UserColumns:
    cols = UserColumns(config, capacity=2)
    kernel(events, config, batch, cols)
    return cols


def _strip_all(cols: UserColumns) -> None:
    """Every user stripped, as a checkpoint strips the users it stages."""
    for user_id in list(cols.states):
        cols.strip(user_id)


def _stripping(events: list[FhrEvent], config: DriftConfig, batch: int) -> Run:
    """The kernel over ``events`` in batches, every user stripped after each batch."""
    return kernel(events, config, batch, after_batch=_strip_all)[0]


def _times(cols: UserColumns, user_id: str, config: DriftConfig) -> list[float]:
    """Event times around every boundary a sweep of the user has: the idle close and each
    baseline's TTL, a hair before, at and after."""
    state = cols.states[user_id]
    edges = [state.clock_s]
    if state.session is not None:
        edges.append(state.session.last_s + config.idle_timeout_s)
    if user_id in cols.baselines:
        edges += [max(m.created_at_s, state.last_used_s) + config.ttl_s(m.mode)
                  for m in cols.baselines[user_id].metas()]
    return [t + d for t in edges for d in (-1.5, -1e-6, 0.0, 1e-6, 1.5)]


def _sweep_moves(cols: UserColumns, user_id: str, ts: float, config: DriftConfig) -> bool:
    state = cols.states[user_id]
    baselines = cols.baselines.get(user_id, UserBaselines())
    result = sweep(state, baselines, ts, config)
    return (due(state, baselines, ts, config) or result.state is not state
            or not result.effects.empty)


def _turn_rows_held(cols: UserColumns) -> set[int]:
    """The turn rows the slots hold, after checking each slot holds one exactly while its
    user has an open session that keeps baselines."""
    held = set()
    for user_id in cols.users():
        session = cols.states[user_id].session
        row = int(cols.icols[cols.slot(user_id), I_TROW])
        assert (row >= 0) == (session is not None and session.mode.keeps_baselines), user_id
        if row >= 0:
            assert row not in held, "two slots share a turn row"
            held.add(row)
    return held


def test_a_slot_holds_a_turn_row_only_while_a_session_that_keeps_baselines_is_open() -> None:
    events = golden_events()
    config = DriftConfig()
    cols = UserColumns(config, capacity=2)
    held: list[int] = []
    run, _ = kernel(events, config, 64, cols,
                    after_batch=lambda c: held.append(len(_turn_rows_held(c))))
    assert_same(reference(events, config), run, "batch=64")
    users = len({e.user_id for e in events})
    assert 0 < max(held) < users and held[-1] < max(held), \
        "users without an open session hold no turn row"
    assert cols.turn_rows.tcols.shape[0] <= max(16, max(held) * 5 // 4 + 1), \
        "the rows of ended sessions are given again"


def test_a_stripped_slot_keeps_neither_the_ring_nor_the_turn_log_and_folds_on_exactly() -> None:
    events = golden_events()
    config = DriftConfig()
    cols = _held(events, config, 64)
    ref = reference(events, config)
    stripped = 0
    for user_id, state in ref.states.items():
        cols.strip(user_id)
        shell = cols.shell_of(user_id)
        assert shell is not None and shell.recent.ring == b""
        if shell.session is not None and shell.session.mode.keeps_baselines:
            turns = shell.session.turns
            assert (turns.windows, turns.current_rows, turns.early_rows, turns.late_rows) \
                == ((), (), (), ())
            stripped += 1
        assert encode_state(cols.states[user_id]) == encode_state(state), user_id
    assert stripped, "the golden log leaves a session open that keeps baselines"
    for batch in (1, 7, 64):
        assert_same(ref, _stripping(events, config, batch), f"batch={batch}")


@drawn
def test_any_log_folds_on_exactly_from_stripped_slots(
        sessions: list[list[Plan]], seed: int, batch: int, config: DriftConfig) -> None:
    events = users_log(sessions, 4, 0, seed)
    assert_same(reference(events, config), _stripping(events, config, batch),
                f"seed={seed} batch={batch}")


def test_the_golden_log_is_checked_for_a_tick_only_where_a_sweep_acts() -> None:
    config = DriftConfig()
    events = golden_events()
    cols = _held(events, config, 64)
    said_no = 0
    for user_id in {e.user_id for e in events} & set(cols.states):
        for ts in _times(cols, user_id, config):
            if _sweep_moves(cols, user_id, ts, config):
                assert cols.states.may_be_due(user_id, ts), (user_id, ts)
            elif not cols.states.may_be_due(user_id, ts):
                said_no += 1
    assert said_no, "the check passes over users the sweep leaves as they are"


@drawn
def test_any_log_is_checked_for_a_tick_wherever_a_sweep_acts(
        sessions: list[list[Plan]], seed: int, batch: int, config: DriftConfig) -> None:
    events = users_log(sessions, 0, 0, seed)
    cols = _held(events, config, batch)
    for user_id in {e.user_id for e in events} & set(cols.states):
        for ts in _times(cols, user_id, config):
            if _sweep_moves(cols, user_id, ts, config):
                assert cols.states.may_be_due(user_id, ts), (seed, batch, user_id, ts)


def test_a_memory_only_user_outside_a_session_is_checked_the_sweep_forgets_them() -> None:
    config = DriftConfig()
    cols = UserColumns(config)
    cols.states["u"] = UserState("u", Mode.SESSION_ONLY, clock_s=5.0)
    assert _sweep_moves(cols, "u", 6.0, config)
    assert cols.states.may_be_due("u", 6.0)
