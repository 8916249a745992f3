"""The fold, event by event: duplicates, replays and ids (logs from
:mod:`tests.drift.fold_log`)."""

from __future__ import annotations

import numpy as np

from drift.baseline import UserBaselines
from drift.evolve import evolve
from drift.fold import initial, step
from drift.model import BaselineKind, Mode
from drift.outputs import Output, OutputKind
from drift.replay import MemoryReplay, replay
from drift.simulation import Scenario, simulate
from streams.edge.wire import payload
from tests.drift.fold_log import CFG, MODEL_A, MODEL_B, Log, collapsed, relational_write, run, turn


def _mixed_log() -> Log:
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B)
    for i in range(3):
        log.session(f"low{i}", model=MODEL_B, notice=True, dynamics=collapsed)
    log.start("g", mode=Mode.FULL, model=MODEL_B)
    log.add("g", turn(1, crisis=True))
    log.add("g", relational_write("topic", confirmed=False))
    log.end("g", 1)
    return log


def test_duplicated_events_change_nothing() -> None:
    log = _mixed_log()
    clean = run(log.events)
    runner = MemoryReplay(CFG)
    doubled: list[Output] = []
    for event in log.events:
        doubled.extend(runner.feed(event))
        assert runner.feed(event) == ()
    assert doubled == clean.outputs
    assert runner.baselines == clean.runner.baselines


def test_a_duplicate_id_with_another_body_is_ignored() -> None:
    log = Log()
    log.baseline(1)
    log.start("s1")
    first = log.add("s1", turn(1))
    state = initial("u1")
    baselines = UserBaselines()
    for event in log.events:
        done = step(state, baselines, event, CFG)
        state, baselines = done.state, done.baselines
    assert state.session is not None
    turns_before = state.session.turns.n_turns
    copy = evolve(first, body=turn(2, crisis=True), ts_s=first.ts_s + 5.0)
    again = step(state, baselines, copy, CFG)
    effects, after = again.effects, again.baselines
    assert effects.duplicate and effects.outputs == () and after is baselines
    assert again.state is state
    assert state.session.turns.n_turns == turns_before and state.session.guard.blocking == ()


def test_replaying_the_same_events_gives_identical_outputs() -> None:
    log = _mixed_log()
    first = run(log.events).outputs
    second = run(log.events).outputs
    assert first == second
    ids = [o.id for o in first]
    assert len(ids) == len(set(ids))
    kinds = {o.kind for o in first}
    assert {OutputKind.SCORE, OutputKind.RESPONSE, OutputKind.ESCALATION,
            OutputKind.VIOLATION} <= kinds


def test_simulated_model_change_streams_replay_identically_with_unique_ids() -> None:
    scenarios = [Scenario.MODEL_CHANGE_HEALTHY, Scenario.MODEL_CHANGE_COLLAPSED,
                 Scenario.MODEL_CHANGE_UNDISCLOSED, Scenario.SUSTAINED_LOW,
                 Scenario.GOVERNANCE]
    events = [e for user, _ in simulate(7, scenarios, 3, 1.7e9) for e in user]
    first = replay(events, CFG)
    assert replay(events, CFG) == first
    ids = [o.id for o in first]
    assert len(ids) == len(set(ids))


def test_every_output_is_keyed_by_its_user() -> None:
    for out in run(_mixed_log().events).outputs:
        assert out.user_id == payload(out)["user_id"] == "u1"


def test_one_continuity_session_writes_every_kind_of_baseline_with_the_model() -> None:
    log = Log()
    log.baseline(1)
    baselines = run(log.events).baselines()
    assert {m.kind for m in baselines.metas()} == set(BaselineKind)
    assert {m.model for m in baselines.metas()} == {MODEL_A}
    assert baselines.attunement is not None
    assert np.isfinite(np.asarray(baselines.attunement.late_profile)).all()


def test_a_late_copy_of_a_forgotten_users_write_gives_the_same_violation() -> None:
    """A memory-only user is forgotten when their session ends; a copy of one of its
    relational writes that comes back after the user's next session started (nothing of
    the first is kept to call it a duplicate) is a violation under the same id, with the
    same payload: its time is the write's own, not the user's clock."""
    from tests.builders import UserScript, relational_writes

    script = UserScript("forgotten", seed=3)
    script.session("eph", turns=6, ephemeral=True, extra=relational_writes(6, False))
    write = next(e for e in script.events if e.event_type == "memory_write")
    script.session("back", turns=3)
    first = run(script.events).by_event[write.event_id]
    again = run([*script.events, write]).by_event[write.event_id]
    assert [o.kind for o in first] == [OutputKind.VIOLATION]
    assert {payload(o) == payload(first[0]) for o in again} == {True}
    assert len(again) == 2  # taken for new: the user was a user never seen since
