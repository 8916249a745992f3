"""The batch kernel against the reference where a batch stops or an event raises: it stops
before each erasure where the reference would, and an event that raises (in the reference,
or in the part of it applied outside the kernel) changes nothing.

More examples: ``KERNEL_EXAMPLES=500 python -m pytest -q tests/drift/test_kernel_stops.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drift.baseline import UserBaselines
from drift.evolve import evolve
from drift.fold import initial, may_erase, step
from drift.kernel import UserColumns, fold_batch
from drift.model import (
    DriftConfig,
    FhrEvent,
    Mode,
    Semantic,
    SessionEnd,
    SessionStart,
    Turn,
)
from drift.outputs import Effects
from drift.state import UserState
from tests.drift.kernel_paths import (
    CONFIGS,
    EXAMPLES,
    SMALL,
    users_log,
)
from tests.drift.test_fold_properties import EVERY_ERASURE, Plan, plans


def test_stopping_before_an_erasure_stops_where_the_engine_would() -> None:
    _assert_stops_before_each_erasure(users_log([EVERY_ERASURE, EVERY_ERASURE[1:]], 6, 0, 3),
                                      DriftConfig(), 10_000)


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(plans, min_size=1, max_size=6), min_size=2, max_size=3),
       st.sampled_from([0, 4]), st.integers(0, 2**32), st.sampled_from([5, 64, 1000]),
       st.sampled_from(CONFIGS))
@example([EVERY_ERASURE, EVERY_ERASURE[::-1]], 0, 1, 64, SMALL)
def test_any_log_stopped_before_each_erasure_stops_where_the_reference_would(
        sessions: list[list[Plan]], resend: int, seed: int, batch: int,
        config: DriftConfig) -> None:
    # Users' events interleaved: the kernel's passes park users, and with a checkpoint in
    # flight none of the other users' events after the stop may be applied before it.
    _assert_stops_before_each_erasure(users_log(sessions, resend, 0, seed), config, batch)


def _assert_stops_before_each_erasure(events: list[FhrEvent], config: DriftConfig,
                                      batch: int) -> None:
    """Every batch folded as the engine does while a checkpoint is in flight: stopped before
    the first event that may erase, and the rest handed over again from there."""
    ref_states: dict[str, UserState] = {}
    ref_base: dict[str, UserBaselines] = {}
    cols = UserColumns(config, capacity=2)
    for i in range(0, len(events), batch):
        rest = events[i:i + batch]
        while rest:
            stop = _first_erasure(rest, dict(ref_states), dict(ref_base), config)
            done = fold_batch(cols, rest, config, stop_before_erasure=stop != 0)
            assert done.stopped_at == (stop if stop else None)
            for k, e in enumerate(rest[:len(done.outcomes)]):
                r = step(ref_states.get(e.user_id) or initial(e.user_id),
                         ref_base.get(e.user_id, UserBaselines()), e, config)
                ref_states[e.user_id], ref_base[e.user_id] = r.state, r.baselines
                assert done.effects(k) == r.effects, (i, k)
            rest = rest[len(done.outcomes):]
    for u, state in ref_states.items():
        assert cols.states[u] == state, u
        assert cols.baselines.get(u, UserBaselines()) == ref_base[u], u


def _first_erasure(events: list[FhrEvent], states: dict[str, UserState],
                   baselines: dict[str, UserBaselines], config: DriftConfig) -> int | None:
    """The index of the first of ``events`` that may erase, each judged on the state the
    reference's steps before it leave (``states`` and ``baselines`` are changed)."""
    for k, e in enumerate(events):
        state, base = states.get(e.user_id) or initial(e.user_id), \
            baselines.get(e.user_id, UserBaselines())
        if may_erase(state, base, e, config):
            return k
        r = step(state, base, e, config)
        states[e.user_id], baselines[e.user_id] = r.state, r.baselines
    return None


def test_with_a_checkpoint_in_flight_the_kernel_takes_what_cannot_erase() -> None:
    """Session starts that keep their user's mode (or raise it) cannot erase: with a
    checkpoint in flight the kernel takes them as it does without one, and a start in a
    lower mode is where it stops."""
    full = [Plan(Mode.FULL, 0, "g1", 7, 0.0, (), True, 60.0)] * 3
    events = users_log([full, full, [Plan(Mode.LIGHT, 0, "g1", 7, 0.0, (), True, 60.0),
                                     *full]], 0, 0, 5)
    config = DriftConfig()
    stopped, plain = UserColumns(config), UserColumns(config)
    done = fold_batch(stopped, events, config, stop_before_erasure=True)
    free = fold_batch(plain, events, config)
    assert done.stopped_at is None and done.handoffs == free.handoffs
    assert [done.effects(k) for k in range(len(events))] == \
        [free.effects(k) for k in range(len(events))]
    lower = evolve(events[0], event_id="later", ts_s=events[-1].ts_s + 60.0,
                   session_id="s-light", body=evolve(events[0].body, mode=Mode.LIGHT))
    assert may_erase(stopped.states[lower.user_id], stopped.baselines[lower.user_id], lower,
                     config)
    assert fold_batch(stopped, [lower], config, stop_before_erasure=True).stopped_at == 0


def test_an_event_the_reference_raises_on_leaves_the_state_as_it_was() -> None:
    bad = FhrEvent("bad", "turn", 2.0, "u", "s0", False,
                   Turn.neutral(1, user_tokens="x"))
    cols = UserColumns(DriftConfig())
    events = users_log([[Plan(Mode.FULL, 0, "g1", 3, 0.0, (), False, 60.0)]], 0, 0, 0)
    events = [evolve(e, user_id="u") for e in events]
    fold_batch(cols, events, DriftConfig())
    before = cols.states["u"]
    done = fold_batch(cols, [bad, events[-1]], DriftConfig())
    assert isinstance(done.outcomes[0], TypeError), done.outcomes
    resent = done.effects(1)
    assert resent is not None and resent.duplicate
    assert cols.states["u"] == before



def test_a_refused_turn_among_others_leaves_theirs_as_the_reference_does() -> None:
    """A turn the reference raises on amid turns with blocking states and reflection, of its
    user and another's, in one batch: the kernel hands that one over (and it raises there)
    and folds the others, their flags included, as the reference does."""
    config = DriftConfig()
    events = users_log([[Plan(Mode.FULL, 0, "g1", 3, 0.0, (), False, 60.0)],
                        [Plan(Mode.FULL, 0, "g1", 3, 0.0, (), False, 60.0)]], 0, 0, 0)
    log = list(events[:-2])
    user, session = log[-1].user_id, log[-1].session_id
    ts = max(e.ts_s for e in log)
    for k, changes in enumerate(({"crisis": True}, {"user_tokens": "x"},
                                 {"reflection": True, "ae_severity": "high"})):
        log.append(FhrEvent(f"x{k}", "turn", ts + 1.0 + k, user, session, False,
                            Turn.neutral(90 + k, **changes)))
    states: dict[str, UserState] = {}
    baselines: dict[str, UserBaselines] = {}
    outcomes: list[object] = []
    for e in log:
        try:
            r = step(states.get(e.user_id) or initial(e.user_id),
                     baselines.get(e.user_id, UserBaselines()), e, config)
        except Exception as exc:  # noqa: BLE001 - compared with the kernel's by type
            outcomes.append(type(exc))
            continue
        states[e.user_id], baselines[e.user_id] = r.state, r.baselines
        outcomes.append(r.effects)
    cols = UserColumns(config)
    done = fold_batch(cols, log, config)
    got = [type(o) if isinstance(o, Exception) else done.effects(i)
           for i, o in enumerate(done.outcomes)]
    assert TypeError in outcomes
    assert got == outcomes
    assert {u: cols.states[u] for u in states} == states

def _scored_turn(e: FhrEvent) -> bool:
    return isinstance(e.body, Turn) and e.body.turn == 10


def _semantic(e: FhrEvent) -> bool:
    return isinstance(e.body, Semantic)


def _start(e: FhrEvent) -> bool:
    return isinstance(e.body, SessionStart)


def _end(e: FhrEvent) -> bool:
    return isinstance(e.body, SessionEnd)


@pytest.mark.parametrize(("part", "victim_of"), [("turn_reached", _scored_turn),
                                                  ("dispatch", _semantic),
                                                  ("dispatch", _start), ("dispatch", _end)])
def test_an_event_whose_part_outside_the_kernel_raises_changes_nothing(
        monkeypatch: pytest.MonkeyPatch, part: str, victim_of: Any) -> None:
    """A turn the kernel took and its caller scores (``turn_reached``), or a semantic
    event, a session's start or its end, whose rest its caller applies (``dispatch``): if
    that part raises, the slot is put back as it was before the event, and the event's
    outcome is the exception, as the reference's step raising on it; the next events go
    on from there."""
    import drift.fold as fold_module
    import drift.kernel.batch as batch_module

    plan = Plan(Mode.FULL, 0, "g1", 12, 0.0, ((4, Semantic(4, "c1", "commitment", "affirm")),),
                True, 60.0)
    events = users_log([[plan] * 2], 0, 0, 0)
    victim = [e for e in events if victim_of(e)][-1]
    real = getattr(fold_module, part)

    def raising(state: UserState, baselines: UserBaselines, *args: Any) -> Any:
        ctx = args[-1]
        if ctx.event_id == victim.event_id:
            raise ZeroDivisionError("fault")
        return real(state, baselines, *args)

    monkeypatch.setattr(fold_module, part, raising)
    monkeypatch.setattr(batch_module, part, raising)
    states: dict[str, UserState] = {}
    bases: dict[str, UserBaselines] = {}
    expected: list[Effects | None] = []
    for e in events:
        try:
            r = step(states.get(e.user_id) or initial(e.user_id),
                     bases.get(e.user_id, UserBaselines()), e, DriftConfig())
        except ZeroDivisionError:
            expected.append(None)
            continue
        states[e.user_id], bases[e.user_id] = r.state, r.baselines
        expected.append(r.effects)
    assert expected.count(None) == 1
    cols = UserColumns(DriftConfig())
    done = fold_batch(cols, events, DriftConfig())
    assert [done.effects(k) for k in range(len(events))] == expected
    assert isinstance(done.outcomes[events.index(victim)], ZeroDivisionError)
    assert {u: cols.states[u] for u in states} == states
