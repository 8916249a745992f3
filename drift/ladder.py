"""The tighten-only response ladder, written as a fold.

Within a session the effective tier never goes down; a HOLD carries into later
sessions and only ``baseline_reconfirmed`` covering every kind that caused it
lifts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from drift.evolve import evolve, fast_init
from drift.model import BaselineKind, Tier
from drift.outputs import Action


@fast_init
@dataclass(frozen=True, slots=True)
class LadderState:
    session_tier: Tier = Tier.LOW
    prompted: bool = False
    hold: bool = False
    hold_kinds: frozenset[BaselineKind] = frozenset()
    hold_cause: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class LadderStep:
    state: LadderState
    effective_tier: Tier
    actions: tuple[Action, ...]


def initial() -> LadderState:
    """The ladder of a user with no history.

    >>> initial().session_tier, initial().hold
    (<Tier.LOW: 0>, False)
    """
    return LadderState()


def new_session(state: LadderState) -> LadderState:
    """A session starts: a HOLD carries over as an effective tier of high.

    >>> s = step(initial(), Tier.HIGH, frozenset({BaselineKind.SAFETY}), "e1").state
    >>> new_session(s).session_tier.label, new_session(initial()).session_tier.label
    ('high', 'low')
    """
    return evolve(state, session_tier=Tier.HIGH if state.hold else Tier.LOW, prompted=False)


def step(state: LadderState, tier: Tier, kinds: frozenset[BaselineKind], cause: str
         ) -> LadderStep:
    """Apply one score of ``tier``, driven by ``kinds``; ``cause`` is the score's id.

    Medium prompts a continuity check once per session; high issues one HOLD.

    >>> a = step(initial(), Tier.MEDIUM, frozenset({BaselineKind.ATTUNEMENT}), "s1")
    >>> a.effective_tier.label, [x.value for x in a.actions]
    ('medium', ['continuity_check_prompted'])
    >>> b = step(a.state, Tier.LOW, frozenset(), "s2")
    >>> b.effective_tier.label, b.actions
    ('medium', ())
    >>> c = step(b.state, Tier.HIGH, frozenset({BaselineKind.SEMANTIC}), "s3")
    >>> c.effective_tier.label, [x.value for x in c.actions], c.state.hold
    ('high', ['continuity_rebaseline_required'], True)
    """
    effective = max(state.session_tier, tier)
    actions: list[Action] = []
    # Most scores leave the tier as it was: the state is then the same value.
    new = state if effective is state.session_tier else evolve(state, session_tier=effective)
    if effective is Tier.MEDIUM and not state.prompted:
        actions.append(Action.CHECK_PROMPTED)
        new = evolve(new, prompted=True)
    if effective is Tier.HIGH:
        if not state.hold:
            actions.append(Action.REBASELINE_REQUIRED)
            new = evolve(new, hold=True, hold_kinds=kinds or frozenset(BaselineKind),
                          hold_cause=cause)
        elif tier is Tier.HIGH:
            new = evolve(new, hold_kinds=state.hold_kinds | kinds)
    return LadderStep(new, effective, tuple(actions))


def reconfirm(state: LadderState, kinds: frozenset[BaselineKind]) -> tuple[LadderState, bool]:
    """``baseline_reconfirmed`` for ``kinds``; returns the new state and whether a HOLD lifted.

    A HOLD lifts only when ``kinds`` covers every kind that caused it; the session
    then starts over from low, because the user has explicitly re-confirmed. A
    continuity check already prompted in this session is not prompted again.

    >>> held = step(initial(), Tier.HIGH, frozenset({BaselineKind.SAFETY}), "e").state
    >>> reconfirm(held, frozenset({BaselineKind.SEMANTIC}))[1]
    False
    >>> s, lifted = reconfirm(held, frozenset({BaselineKind.SAFETY}))
    >>> lifted, s.hold, s.session_tier.label
    (True, False, 'low')
    """
    if not state.hold or not state.hold_kinds <= kinds:
        return state, False
    return LadderState(prompted=state.prompted), True
