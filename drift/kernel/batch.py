"""A batch of events folded through the compiled kernel, the rare ones through the reference.

:func:`fold_batch` is what a worker calls in place of a loop of
:func:`drift.fold.step` over a batch. The kernel (:mod:`drift.kernel.turns`) makes passes
over the batch: each takes, in log order, the events it can apply alone and marks the
others; after an event it marked, that event's user is parked until the next pass, and
the other users' events go on. Between two passes, the marked events are applied here,
in log order, one per user: an event the kernel cannot take is handed to the reference
fold (its user's state built from the columns and loaded back after). A ``semantic``, a
shown notice or a memory write (blocked or not) of the open session is the kernel's for
the clock, the ring and ``last_s``; the rest of it (:func:`drift.fold.dispatch`) is
applied here to the user's state object (a write's audit, to the state built from the
columns). A turn that reaches a checkpoint is the kernel's too, and the
checkpoint (and the re-attunement turn) is scored here on the rows the columns hold,
with the reference's own function (:func:`drift.model_change.turn_reached`); so are a
session start with no session open and the open session's end, which are applied here to
the user's state (:func:`drift.fold.dispatch`), the result written into the slot.
Every user's events are therefore applied in their order in the batch, and the effects
are the ones the loop of ``step`` gives (one user's step reads nothing of another's).
Should the part done here raise, the kernel's part of that event is undone (the slot as
the kernel saved it before the event): it changes nothing, as a step that raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from drift.baseline import UserBaselines
from drift.checkpoint import StepContext
from drift.fold import DUPLICATE, Step, dispatch, initial, may_erase, step
from drift.kernel import layout
from drift.kernel.attunement import attunement_of_rows, score_attunement, turn_sd
from drift.kernel.closing import closing_state
from drift.kernel.columns import UserColumns
from drift.kernel.events import EventColumns
from drift.kernel.reattune import score_reattunement
from drift.kernel.turns import apply_turns
from drift.model import DriftConfig, FhrEvent, MemoryWrite
from drift.model_change import turn_reached
from drift.outputs import NO_EFFECTS, Effects
from drift.reattune import Rows
from drift.state import UserState

Outcome = Step | Effects | Exception
"""What one event did: a :class:`~drift.fold.Step` when the reference fold applied it (or,
for a session's start or end the kernel took, :func:`drift.fold.dispatch` did), the
:class:`~drift.outputs.Effects` when the kernel did (empty, a duplicate's, or the outputs
of a checkpoint it reached), or the exception the reference raised (the user's state is
then as before the event)."""


@dataclass(frozen=True, slots=True)
class BatchFold:
    """The result of :func:`fold_batch`.

    ``outcomes[i]`` is event ``i``'s :data:`Outcome`; with ``stopped_at`` set only the
    events before it were applied (and have outcomes). ``handoffs`` counts the events
    the reference fold applied whole, ``stopped_at`` the first event left unapplied, and
    ``befores[i]`` is the state an event ``i`` whose outcome is a step was applied to
    (for a start or an end the kernel took, its clock and ring may be older: read
    ``persistable`` and ``memory_only`` of it, as the shell does).
    """

    outcomes: list[Outcome]
    handoffs: int
    stopped_at: int | None = None
    befores: dict[int, UserState] = field(default_factory=dict)

    def effects(self, i: int) -> Effects | None:
        """Event ``i``'s effects (None if it raised or was not applied).

        >>> BatchFold([NO_EFFECTS, ValueError("x")], 0).effects(1) is None
        True
        """
        if i >= len(self.outcomes):
            return None
        o = self.outcomes[i]
        if isinstance(o, Step):
            return o.effects
        return o if isinstance(o, Effects) else None


def fold_batch(columns: UserColumns, events: Sequence[FhrEvent], config: DriftConfig, *,
               stop_before_erasure: bool = False) -> BatchFold:
    """Apply ``events`` (in log order) to the users in ``columns``; what each one did.

    The contract, for the caller that replaces a loop of
    ``step(states[u], baselines[u], event, config)`` by one call:

    * ``columns`` holds every user's state and baselines (its ``states`` and
      ``baselines`` views read and write them by user id); ``config`` is the one
      ``columns`` was made with. A user without a slot starts from
      :func:`drift.fold.initial`.
    * On return ``columns`` holds each user's state and baselines *after the
      batch*. A :class:`~drift.fold.Step` outcome carries the state right after that
      event (read it, e.g. ``persistable``, to carry out that event's effects; after a
      start the kernel took, its clock and ring are the columns') but must not be
      written back into ``columns``.
    * ``outcomes[i]`` are event ``i``'s effects exactly as ``step`` would return them
      (the same outputs, writes and session summaries, ``DUPLICATE`` for an id seen
      before, ``NO_EFFECTS`` for a plain turn); an exception raised by the reference
      fold is returned in its place, with the user's state left as before it.
    * With ``stop_before_erasure`` the batch stops before the first event for which
      :func:`drift.fold.may_erase` holds (evaluated on the state in force then, an
      exception counting as False) and ``stopped_at`` is its index; the events
      before it are applied, none after. Hand the rest over again later.

    >>> from drift.model import Mode, ModelTriple, SessionStart, Turn
    >>> start = SessionStart(Mode.FULL, "c", ModelTriple("m", "t", "bf16"), "g", "p")
    >>> log = [FhrEvent("e0", "session_start", 0.0, "u", "s", False, start)]
    >>> log += [FhrEvent(f"e{k}", "turn", 10.0 * k, "u", "s", False, Turn.neutral(k))
    ...         for k in range(1, 8)]
    >>> cols = UserColumns(DriftConfig())
    >>> done = fold_batch(cols, log + log[2:3], DriftConfig())
    >>> done.handoffs, [type(o).__name__ for o in done.outcomes[:2]], done.outcomes[-1].duplicate
    (0, ['Step', 'Effects'], True)
    >>> cols.states["u"].session.turns.n_turns, cols.states["u"].clock_s
    (7, 70.0)
    """
    ev = EventColumns.of(columns, events)
    n = len(events)
    outcomes: list[Outcome | None] = [None] * n
    event_arrays = ev.arrays()
    geom, params = columns.geometry.geom, columns.geometry.params
    saves = columns.saved.at_least(ev.users)
    handoffs = 0
    stopped_at: int | None = None
    befores: dict[int, UserState] = {}
    raised: set[int] = set()
    status = ev.status
    lo, pass_no = 0, 0
    while lo < n:
        pass_no += 1
        icols, fcols, tcols, rings = columns.arrays()
        hi = apply_turns(lo, stop_before_erasure, pass_no, *event_arrays, icols, fcols, tcols,
                         rings, geom, params, *saves)
        window = status[lo:hi]
        marked = (window >= layout.ST_SIDE) & (window <= layout.ST_HANDOFF)
        for j in (lo + np.flatnonzero(marked)).tolist():
            # Each of a user of its own (the kernel parked them), in log order.
            if not _rest_of(columns, ev.slot_list[j], events, j, int(status[j]),
                            int(ev.save[j]), config, outcomes, befores, raised):
                handoffs += 1
            status[j] = layout.ST_DONE
        pending = np.flatnonzero(window == layout.ST_PENDING)
        if len(pending):
            lo += int(pending[0])  # the parked users' later events: another pass
        elif hi > lo:
            lo = hi  # a pass from the event it stopped at (if any) takes it or refuses it
        else:
            # The pass refused event ``lo`` itself, which may erase, with every event before
            # it applied: whether the batch stops before it is decided here.
            s, event = ev.slot_list[lo], events[lo]
            if _may_erase(columns.state_at(s), columns.baselines_at(s), event, config):
                stopped_at = lo
                break
            handoffs += 1
            _hand_off(columns, s, events, lo, config, outcomes, befores, raised)
            status[lo] = layout.ST_DONE
            lo += 1
    end = n if stopped_at is None else stopped_at
    # An event the kernel applied alone has its status's effects (a plain turn's none, a
    # duplicate's); every other one has its outcome from the loop above.
    done = [_BY_STATUS[st] if o is None else o
            for o, st in zip(outcomes[:end], status[:end].tolist())]
    if any(o is None for o in done):  # by identity: ``in`` would call each one's __eq__
        raise AssertionError("every event before the end was applied")
    slots = ev.slot_list[:end]
    if raised:
        slots = [s for k, s in enumerate(slots) if k not in raised]
    for s in set(slots):
        columns.mark_stored(s)
    return BatchFold(done, handoffs, stopped_at, befores)


def _rest_of(columns: UserColumns, s: int, events: Sequence[FhrEvent], j: int, taken: int,
             row: int, config: DriftConfig, outcomes: list[Outcome | None],
             befores: dict[int, UserState], raised: set[int]) -> bool:
    """Event ``j``, marked ``taken`` by the kernel (slot ``s`` saved in ``row``), applied:
    the rest of it here, or the reference's whole (then False)."""
    rest = _rest(taken)
    if rest is not None:  # the kernel took the event: the rest of it is applied here
        try:
            applied = rest(columns, s, events[j], config)
        except Exception as exc:  # noqa: BLE001 - as a step that raises: no change
            columns.restore(s, row)
            outcomes[j] = exc
            raised.add(j)
            return True
        if applied is not None:
            if isinstance(applied, Effects):
                outcomes[j] = applied
            else:
                outcomes[j], befores[j] = applied
            return True
        columns.restore(s, row)  # not one the slot takes as it is: the reference's, whole
    _hand_off(columns, s, events, j, config, outcomes, befores, raised)
    return False


def _hand_off(columns: UserColumns, s: int, events: Sequence[FhrEvent], j: int,
              config: DriftConfig, outcomes: list[Outcome | None],
              befores: dict[int, UserState], raised: set[int]) -> None:
    """Event ``j`` applied by the reference fold, whole, to slot ``s``'s user."""
    state = columns.state_at(s)
    try:
        result = step(state, columns.baselines_at(s), events[j], config, score_attunement)
    except Exception as exc:  # noqa: BLE001 - the fold is pure: the state stays as it was
        outcomes[j] = exc
        raised.add(j)
    else:
        columns.put_at(s, result.state, result.baselines)
        outcomes[j] = result
        befores[j] = state


#: The outcome of an event the kernel applied alone, by its status (None: not alone).
_BY_STATUS: tuple[Effects | None, ...] = tuple(
    NO_EFFECTS if code == layout.ST_APPLIED else DUPLICATE if code == layout.ST_DUPLICATE
    else None for code in range(layout.ST_DONE + 1))


def _side(columns: UserColumns, s: int, event: FhrEvent, config: DriftConfig) -> Effects:
    """The rest of an event the kernel marked ``ST_SIDE`` (:func:`drift.fold.dispatch`),
    applied to slot ``s``'s state object. The kernel moved the clock, the ring and
    ``last_s`` in the columns, which stay what the state is read from for those (the slot
    is dirty). A memory write changes nothing: its audit reads the session's guard, which
    the kernel moves in the columns, so it is audited on the state built from them, and
    its violations are its effects; the other events have none."""
    if type(event.body) is MemoryWrite:  # its violations carry the event's own time
        ctx = StepContext(event.event_id, event.session_id, columns.clock_at(s), config,
                          score_attunement, event.ts_s)
        return dispatch(columns.state_at(s), columns.baselines_at(s), event, ctx).effects
    ctx = StepContext(event.event_id, event.session_id, event.ts_s, config)
    columns.keep_shell(s, dispatch(columns.shell_at(s), columns.baselines_at(s), event,
                                   ctx).state)
    return NO_EFFECTS


def _start(columns: UserColumns, s: int, event: FhrEvent, config: DriftConfig
           ) -> tuple[Step, UserState] | None:
    """The session start the kernel marked ``ST_STARTED`` (no session open, nothing due),
    applied to slot ``s``'s state object as :func:`drift.fold.step` applies it after the
    clock and the ring (:func:`drift.fold.dispatch`): its step and the state it was applied
    to, whose clock and ring are the columns'. None, changing nothing, for a start that
    leaves the user memory-only or not stored (the reference's step keeps and stages such
    users its own way) or that the columns do not take: the caller hands it over whole."""
    before = columns.shell_of(event.user_id) or initial(event.user_id)
    baselines = columns.baselines_at(s)
    ctx = StepContext(event.event_id, event.session_id, columns.clock_at(s),
                      config, score_attunement, event.ts_s)
    result = dispatch(before, baselines, event, ctx)
    if not result.state.persistable or not columns.open_session(s, result.state,
                                                                 result.baselines):
        return None
    return result, before


def _end(columns: UserColumns, s: int, event: FhrEvent, config: DriftConfig
         ) -> tuple[Step, UserState] | None:
    """The session end the kernel marked ``ST_ENDED`` (of the open session, nothing due),
    applied to slot ``s``'s state as :func:`drift.fold.step` applies it after the clock, the
    ring and ``last_s`` (:func:`drift.fold.dispatch`), and the result loaded into the slot:
    its step and the state it was applied to. None, changing nothing in the slot, where the
    user is left memory-only: the caller hands it over whole."""
    state, numbers = closing_state(columns, s)
    ctx = StepContext(event.event_id, event.session_id, state.clock_s, config,
                      score_attunement, event.ts_s, score_reattunement,
                      functools.partial(attunement_of_rows, columns.current_rows(s)), numbers)
    result = dispatch(state, columns.baselines_at(s), event, ctx)
    if result.state.memory_only:
        return None
    columns.put_at(s, result.state, result.baselines)
    return result, state


_Rest = Callable[[UserColumns, int, FhrEvent, DriftConfig],
                 Effects | tuple[Step, UserState] | None]
"""The part of an event the kernel took that is applied to the user's state object: the
event's effects, or its step and the state it was applied to; None, changing nothing, where
the slot does not take the result and the event goes to the reference whole."""


def _score(columns: UserColumns, s: int, event: FhrEvent, config: DriftConfig) -> Effects:
    """What a turn the kernel took reaches (a checkpoint, the re-attunement turn), on the
    turn log the columns hold (:func:`drift.model_change.turn_reached`, as the reference's
    turn; the checkpoint's attunement test reads the rows since the last look in the
    columns); its outputs."""
    current = columns.current_rows(s)
    ctx = StepContext(event.event_id, event.session_id, columns.clock_at(s),
                      config, score_attunement, event.ts_s, score_reattunement,
                      functools.partial(attunement_of_rows, current), turn_sd=turn_sd,
                      early=functools.partial(_early_rows, columns, s))
    state, outputs = turn_reached(columns.scored_at(s), columns.baselines_at(s), ctx)
    columns.keep_scored(s, state)
    return Effects(outputs) if outputs else NO_EFFECTS


def _early_rows(columns: UserColumns, s: int, cols: list[int]) -> Rows:
    """Slot ``s``'s early rows over the features at ``cols`` (:attr:`StepContext.early`): the
    array the slot's turn row holds, which the re-attunement's twin reads where it is."""
    rows = columns.early_rows(s)
    if cols != list(range(rows.shape[1])):
        rows = rows[:, cols]  # a copy, C-contiguous
    return cast(Rows, rows)  # an array of rows, as the twin reads it


def _rest(taken: int) -> _Rest | None:
    """What is applied here of an event the kernel took with status ``taken`` (looked up
    when called, where the functions live, so that a wrapper set on them is called too).

    >>> _rest(layout.ST_SIDE).__name__, _rest(layout.ST_APPLIED)
    ('_side', None)
    """
    if taken == layout.ST_SCORED:
        return _score
    if taken == layout.ST_SIDE:
        return _side
    if taken == layout.ST_STARTED:
        return _start
    return _end if taken == layout.ST_ENDED else None


def _may_erase(state: UserState, baselines: UserBaselines, event: FhrEvent,
               config: DriftConfig) -> bool:
    try:
        return may_erase(state, baselines, event, config)
    except Exception:  # noqa: BLE001 - step raises too, and its outcome says so
        return False
