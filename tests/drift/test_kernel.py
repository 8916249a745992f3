"""The batch kernel against the reference fold: the same effects, byte for byte, and states.

Every log here goes through two paths: a loop of :func:`drift.fold.step` per event
(the reference) and :func:`drift.kernel.fold_batch` over batches (the kernel, with the
rare events handed to the reference). Outputs are compared as the bytes the worker
publishes (``streams.edge.wire.encode``) and as values; final states as values and as
their encoded snapshots (``baselines.snapshot.encode_state``), baselines as values.
No tolerance anywhere: the kernel adds the same floats in the same order as
``TurnLog.add``, so the window sums are equal to the last bit.

More examples: ``KERNEL_EXAMPLES=500 python -m pytest -q tests/drift/test_kernel.py``;
the kernels as Python (coverage, debugging): ``NUMBA_DISABLE_JIT=1`` in front.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import drift.kernel.columns as columns_module
from baselines.snapshot import encode_state
from drift.baseline import UserBaselines
from drift.fold import initial, step
from drift.kernel import UserColumns, fold_batch
from drift.kernel.layout import I_FLAGS, PY_ONLY
from drift.model import (
    Body,
    DriftConfig,
    FhrEvent,
    MemoryWrite,
    Mode,
    ModelTriple,
    SessionStart,
    Turn,
    event_type_of,
)
from tests.builders import memory_only_users
from tests.drift.kernel_paths import (
    CONFIGS,
    EXAMPLES,
    SMALL,
    Run,
    assert_same,
    kernel,
    reference,
    users_log,
)
from tests.drift.test_fold_properties import EVERY_ERASURE, MODELS, Plan, plans
from tests.streams.golden import golden_events


def test_the_golden_log_gives_the_reference_effects_and_states() -> None:
    events = []
    for i, e in enumerate(golden_events()):  # every 7th sent twice, as golden_records does
        events.append(e)
        if i % 7 == 3:
            events.append(e)
    ref = reference(events, DriftConfig())
    got, handoffs = kernel(events, DriftConfig(), 37)
    assert_same(ref, got, "golden")
    # (duplicates of memory-only users after their session are new events again)
    assert sum(e.duplicate for e in ref.effects) >= len(events) // 10
    assert 0 < handoffs < len(events) // 2  # the kernel took most events


@pytest.mark.parametrize("spare", [0, 3])
def test_session_numbers_started_anew_between_batches_keep_the_reference_effects(
        monkeypatch: pytest.MonkeyPatch, spare: int) -> None:
    """Session numbers live from batch to batch and start anew past a bound: a slot whose
    number was written before that is written again before the kernel reads it."""
    monkeypatch.setattr(columns_module, "_CODES_PER_USER", 0)
    monkeypatch.setattr(columns_module, "_CODES_SPARE", spare)
    events = list(golden_events())
    for batch in (5, 37):
        cols = UserColumns(DriftConfig(), capacity=2)
        got, _ = kernel(events, DriftConfig(), batch, cols)
        assert_same(reference(events, DriftConfig()), got, f"batch={batch} spare={spare}")
        assert 0 < cols._generation < len(events)


def test_a_stale_session_number_is_not_taken_for_the_open_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn of a session that is not open, numbered after the numbers started anew as the
    open one was before, is not taken for a turn of the open session."""
    monkeypatch.setattr(columns_module, "_CODES_PER_USER", 0)
    monkeypatch.setattr(columns_module, "_CODES_SPARE", 0)
    start = SessionStart(Mode.FULL, "c", ModelTriple("m", "t", "bf16"), "g", "p")
    log = [FhrEvent("e0", "session_start", 0.0, "u", "s1", False, start)]
    log += [FhrEvent(f"e{k}", "turn", 10.0 * k, "u", "s1", False, Turn.neutral(k))
            for k in (1, 2)]
    stray = [FhrEvent("e9", "turn", 40.0, "u", "s2", False, Turn.neutral(3))]
    fresh = UserColumns(DriftConfig(), capacity=2)
    first = fold_batch(fresh, log, DriftConfig())
    done = fold_batch(fresh, stray, DriftConfig())
    assert fresh._generation == 1
    effects = [first.effects(k) for k in range(3)] + [done.effects(0)]
    assert_same(reference(log + stray, DriftConfig()),
                Run([e for e in effects if e is not None], {"u": fresh.states["u"]},
                    {"u": fresh.baselines["u"]} if "u" in fresh.baselines else {}), "stray")


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(plans, min_size=1, max_size=6), min_size=1, max_size=3),
       st.sampled_from([0, 0, 4, 9]), st.sampled_from([0, 0, 0, 5]), st.integers(0, 2**32),
       st.sampled_from([1, 7, 64, 1000]), st.sampled_from(CONFIGS),
       st.sampled_from([None, None, 0, 2]))
@example([EVERY_ERASURE], 0, 0, 0, 64, DriftConfig(), None)
@example([EVERY_ERASURE, EVERY_ERASURE[::-1]], 3, 4, 1, 5, SMALL, 0)
def test_any_log_gives_the_reference_effects_and_states(
        sessions: list[list[Plan]], resend: int, eph_every: int, seed: int, batch: int,
        config: DriftConfig, spare: int | None) -> None:
    """``spare`` set: the session numbers start anew past that many (not per user)."""
    events = users_log(sessions, resend, eph_every, seed)
    tag = f"seed={seed} batch={batch} resend={resend} eph_every={eph_every} spare={spare}"
    with (contextlib.nullcontext() if spare is None else
          mock.patch.multiple(columns_module, _CODES_PER_USER=0, _CODES_SPARE=spare)):
        got = kernel(events, config, batch)[0]
    assert_same(reference(events, config), got, tag)


turns = st.builds(
    lambda k, res, refl, ae, flags: Turn.neutral(
        k, resonance_depth=res, reflection=refl, ae_severity=ae, care_override=flags[0],
        care_cooloff=flags[1], crisis=flags[2], legal_hold=flags[3]),
    st.integers(1, 20), st.sampled_from([0.5, 0.8, 0.85, 0.95]),
    st.sampled_from([False, False, False, True]),
    st.sampled_from(["none", "none", "low", "med", "high"]),
    st.sampled_from([(False,) * 4] * 4 + [(a, b, c, d) for a in (False, True) for b in
                                          (False, True) for c in (False, True)
                                          for d in (False, True)]))


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([Mode.FULL, Mode.LIGHT, Mode.SESSION_ONLY]),
                          st.lists(turns, max_size=14)), min_size=1, max_size=4),
       st.sampled_from([1, 5, 100]))
@example([(Mode.SESSION_ONLY, [Turn.neutral(k, resonance_depth=0.9) for k in (1, 2, 3)]
           + [Turn.neutral(4)]), (Mode.FULL, [Turn.neutral(1, resonance_depth=0.9)] * 3
                                   + [Turn.neutral(4, legal_hold=True)])], 100)
def test_the_guard_folds_every_blocking_state_as_the_reference(
        sessions: list[tuple[Mode, list[Turn]]], batch: int) -> None:
    """Drawn blocking states, resonance streaks and reflections (the guard's every path),
    each session followed by a relational write that the guard's state decides."""
    events: list[FhrEvent] = []

    def add(sid: str, body: Body) -> None:
        events.append(FhrEvent(f"g{len(events)}", event_type_of(body), 1.7e9 + 10.0 * len(events),
                               "u", sid, False, body))

    for i, (mode, ts) in enumerate(sessions):
        add(f"s{i}", SessionStart(mode, "consent", MODELS[0], "g1", "p"))
        for t in ts:
            add(f"s{i}", t)
        add(f"s{i}", MemoryWrite(3, "relational", "style", "scope", "consent", True))
    assert_same(reference(events, DriftConfig()), kernel(events, DriftConfig(), batch)[0],
                f"batch={batch}")


def test_memory_writes_of_the_open_session_are_the_kernels_and_audited_on_its_guard(
        ) -> None:
    """A relational write is audited on the guard the kernel moved (a crisis turn just
    before it, in the columns only): the violations are the reference's, byte for byte, and
    no write goes to the reference."""
    events: list[FhrEvent] = []

    def add(sid: str, body: Body) -> None:
        events.append(FhrEvent(f"w{len(events)}", event_type_of(body),
                               1.7e9 + 10.0 * len(events), "u", sid, False, body))

    for i, mode in enumerate((Mode.FULL, Mode.LIGHT)):
        add(f"s{i}", SessionStart(mode, "consent", MODELS[0], "g1", "p"))
        add(f"s{i}", MemoryWrite(1, "relational", "topic", "scope", "consent", False))
        add(f"s{i}", Turn.neutral(1, crisis=True))
        add(f"s{i}", MemoryWrite(1, "relational", "style", "scope", "consent", True))
        add(f"s{i}", Turn.neutral(2, reflection=True))
        add(f"s{i}", MemoryWrite(2, "operational", "style", "scope", "consent", True))
    expected = reference(events, DriftConfig())
    got, handoffs = kernel(events, DriftConfig(), 1000)
    assert_same(expected, got, "writes")
    rules = [o.rule.value for e in got.effects for o in e.outputs  # type: ignore[union-attr]
             if type(o).__name__ == "Violation"]
    assert "relational_write_in_blocked_state" in rules
    assert "relational_write_unconfirmed" in rules
    assert handoffs == 1  # the second start, which ends the first session: no write


def test_the_kernel_takes_turns_and_scores_checkpoints_and_takes_starts_and_ends(
        ) -> None:
    events = users_log([[Plan(Mode.FULL, 0, "g1", 12, 0.0, (), True, 60.0)] * 3], 0, 0, 0)
    expected = reference(events, DriftConfig())
    got, handoffs = kernel(events, DriftConfig(), 1000)
    assert_same(expected, got, "three sessions")
    # Nothing goes to the reference: a start opens its session on the state object and an
    # end closes it there (the slot keeps the clock, the ring and last_s); turns 5 (a
    # checkpoint and the re-attunement) and 10 (a checkpoint) are scored on the columns' rows.
    assert handoffs == 0
    scored = [k for k, e in enumerate(events) if isinstance(e.body, Turn)
              and e.body.turn in (5, 10) and k > len(events) // 3]
    assert {type(o).__name__ for k in scored for o in got.effects[k].outputs} == {
        "DriftScore", "ReattuneQualityScore"}  # the first session has no baseline


def test_a_session_start_and_end_are_the_kernels_unless_they_end_one_or_keep_nothing(
        ) -> None:
    # The second session runs on another model: its start (taken by the kernel, opened on
    # the state object) answers with a notice and a posture downgrade. The third is left
    # open, so the fourth's start ends it first, and the fourth keeps nothing (session
    # only): that start is the reference's, and so is that session's end.
    full, other = Plan(Mode.FULL, 0, "g1", 6, 0.0, (), True, 60.0), \
        Plan(Mode.FULL, 1, "g1", 6, 0.0, (), True, 60.0)
    log = [full, other, replace(other, end=False), replace(other, mode=Mode.SESSION_ONLY)]
    events = users_log([log], 0, 0, 0)
    expected = reference(events, DriftConfig())
    got, handoffs = kernel(events, DriftConfig(), 1000)
    assert_same(expected, got, "starts")
    starts = [k for k, e in enumerate(events) if isinstance(e.body, SessionStart)]
    assert [o.action.value for o in got.effects[starts[1]].outputs] == [  # type: ignore[union-attr]
        "model_change_notice", "posture_downgrade"]
    assert handoffs == 2  # the fourth start, and its session's end


def test_a_state_that_does_not_fit_the_columns_is_folded_by_the_reference() -> None:
    config = DriftConfig(recent_event_ids=4)
    events = users_log([[Plan(Mode.FULL, 0, "g1", 8, 0.0, (), True, 60.0)] * 2], 0, 0, 0)
    ref = reference(events[:9], DriftConfig())  # a ring of 128 ids: too many for 4
    cols = UserColumns(config)
    cols.states["u0"], cols.baselines["u0"] = ref.states["u0"], ref.baselines["u0"]
    assert cols.icols[cols.slot("u0"), I_FLAGS] & PY_ONLY
    states = {"u0": ref.states["u0"]}
    base = {"u0": ref.baselines["u0"]}
    expected = []
    for e in events[9:]:
        r = step(states["u0"], base["u0"], e, config)
        states["u0"], base["u0"] = r.state, r.baselines
        expected.append(r.effects)
    got = fold_batch(cols, events[9:], config)
    assert [got.effects(i) for i in range(len(got.outcomes))] == expected
    assert cols.states["u0"] == states["u0"]


def test_a_state_round_trips_through_its_slot_at_every_event() -> None:
    for config in CONFIGS:
        cols = UserColumns(config)
        state, baselines = initial("u0"), UserBaselines()
        for e in users_log([EVERY_ERASURE * 2], 5, 0, 0):
            r = step(state, baselines, e, config)
            state, baselines = r.state, r.baselines
            cols.states["u0"] = state
            cols.icols[cols.slot("u0"), I_FLAGS] |= 32 | 64  # force a rebuild from columns
            assert cols.states["u0"] == state
            assert encode_state(cols.states["u0"]) == encode_state(state)


def test_memory_only_users_give_the_reference_effects_and_states() -> None:
    """Stateless, session_only and ephemeral sessions, downgrades: the kernel takes these
    users' plain turns too, and hands off an event older than their open session (a late
    copy of an earlier session's, which the reference ignores)."""
    rng = random.Random(5)
    events = list(memory_only_users())
    for _ in range(len(events) // 8):  # late copies, some from before the open session
        i = rng.randrange(len(events))
        events.insert(min(len(events), i + rng.randint(1, 200)), events[i])
    for batch in (1, 16, 200):
        got, handoffs = kernel(events, DriftConfig(), batch)
        assert_same(reference(events, DriftConfig()), got, batch)
        assert handoffs < len(events) // 2, "the kernel took most of their turns"
