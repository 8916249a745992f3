"""The response ladder is tighten-only, whatever sequence of scores and events it sees."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from drift import ladder
from drift.model import BaselineKind, Tier
from drift.outputs import Action
from tests.conftest import examples


@dataclass(frozen=True)
class NewSession:
    pass


@dataclass(frozen=True)
class Score:
    tier: Tier
    kinds: frozenset[BaselineKind]


@dataclass(frozen=True)
class Reconfirm:
    kinds: frozenset[BaselineKind]


Op = NewSession | Score | Reconfirm

kinds_st = st.frozensets(st.sampled_from(list(BaselineKind)))
ops_st = st.lists(
    st.one_of(
        st.just(NewSession()),
        st.builds(Score, st.sampled_from(list(Tier)), kinds_st),
        st.builds(Reconfirm, kinds_st),
    ),
    max_size=60,
)


@given(ops_st)
@settings(max_examples=examples(400), deadline=None)
def test_no_sequence_lowers_the_tier_or_lifts_a_hold_without_a_covering_reconfirm(
    ops: list[Op],
) -> None:
    state = ladder.initial()
    floor = Tier.LOW  # the effective tier in force in the current session
    prompted_in_session = 0
    for i, op in enumerate(ops):
        before = state
        if isinstance(op, NewSession):
            state = ladder.new_session(state)
            prompted_in_session = 0
            # A HOLD carries into the new session as an effective tier of high.
            floor = Tier.HIGH if before.hold else Tier.LOW
            assert state.session_tier == floor
            assert state.hold == before.hold and state.hold_kinds == before.hold_kinds
        elif isinstance(op, Score):
            result = ladder.step(state, op.tier, op.kinds, f"score-{i}")
            state = result.state
            assert result.effective_tier >= op.tier
            assert result.effective_tier >= floor, "the effective tier went down in a session"
            assert result.effective_tier == state.session_tier
            floor = result.effective_tier
            assert (Action.REBASELINE_REQUIRED in result.actions) == (
                not before.hold and state.hold), "HOLD issued other than once, on entering it"
            if result.effective_tier is Tier.HIGH:
                assert state.hold, "an effective tier of high is a HOLD"
            prompted_in_session += result.actions.count(Action.CHECK_PROMPTED)
            assert prompted_in_session <= 1, "continuity check prompted twice on one ladder"
            if before.hold:
                assert state.hold and before.hold_kinds <= state.hold_kinds
        else:
            state, lifted = ladder.reconfirm(state, op.kinds)
            covers = before.hold and before.hold_kinds <= op.kinds
            assert lifted == covers
            if lifted:
                assert not state.hold and state.session_tier is Tier.LOW
                # An explicit, covering re-confirmation starts the session's ladder over
                # (ladder.reconfirm), prompt included.
                floor = Tier.LOW
                prompted_in_session = 0
            else:
                assert state == before, "a reconfirm that lifts nothing changed the ladder"
        if before.hold and not state.hold:
            assert isinstance(op, Reconfirm) and before.hold_kinds <= op.kinds
        if state.hold:
            assert state.hold_kinds, "a HOLD records what caused it"


@given(st.lists(st.builds(Score, st.sampled_from(list(Tier)), kinds_st), min_size=1,
                max_size=20),
       st.integers(min_value=1, max_value=5))
@settings(max_examples=examples(200), deadline=None)
def test_a_hold_survives_any_number_of_sessions_until_reconfirmed(
    scores: list[Score], sessions: int,
) -> None:
    state = ladder.step(ladder.initial(), Tier.HIGH, frozenset({BaselineKind.SEMANTIC}),
                        "cause").state
    for _ in range(sessions):
        state = ladder.new_session(state)
        for s in scores:
            result = ladder.step(state, s.tier, s.kinds, "x")
            assert result.effective_tier is Tier.HIGH
            assert Action.REBASELINE_REQUIRED not in result.actions
            state = result.state
    assert state.hold and state.hold_cause == "cause"
    state, lifted = ladder.reconfirm(state, frozenset(BaselineKind) - state.hold_kinds)
    assert not lifted
    state, lifted = ladder.reconfirm(state, state.hold_kinds)
    assert lifted and not state.hold


def test_a_hold_of_no_particular_kind_needs_every_kind_reconfirmed() -> None:
    held = ladder.step(ladder.initial(), Tier.HIGH, frozenset(), "cause").state
    assert held.hold_kinds == frozenset(BaselineKind)
    assert not ladder.reconfirm(held, frozenset({BaselineKind.ATTUNEMENT}))[1]
    assert ladder.reconfirm(held, frozenset(BaselineKind))[1]
