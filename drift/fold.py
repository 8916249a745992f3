"""The per-user fold: one FHR event in, the user's next state and its effects out.

:func:`step` is a short dispatcher over the event types; each concern lives in
its own module (``checkpoint``, ``model_change``, ``governance``, ``erasure``,
``rebaseline``). Nothing here touches I/O, a clock or a global random generator,
and no argument is changed: replaying the same events over the same baselines
and configuration gives the same states and effects.

>>> from drift.model import ModelTriple, SessionStart
>>> start = SessionStart(Mode.FULL, "consent-1", ModelTriple("m", "t", "bf16"), "g", "p")
>>> e = FhrEvent("e1", "session_start", 1.7e9, "u1", "s1", False, start)
>>> first = step(initial("u1"), UserBaselines(), e, DriftConfig())
>>> first.state.session.session_id, first.state.durable, first.effects.outputs
('s1', True, ())
>>> step(first.state, first.baselines, e, DriftConfig()).effects.duplicate
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_never

from drift import ladder
from drift.attunement import AttunementScore, score_attunement_drift
from drift.baseline import Baseline, UserBaselines, derive_id
from drift.checkpoint import StepContext, checkpoint, rate
from drift.composite import safety_drift
from drift.erasure import downgrade, erase, erase_kinds_for, expire, expiry_due
from drift.evolve import evolve, fast_init
from drift.features import transform_turn
from drift.governance import audit_write, guard_after
from drift.model import (
    BaselineReconfirmed,
    DriftConfig,
    FhrEvent,
    MemoryErase,
    MemoryWrite,
    MemoryWriteBlocked,
    Mode,
    ModeChanged,
    ModelTriple,
    NoticeShown,
    Semantic,
    SessionEnd,
    SessionStart,
    Turn,
)
from drift.model_change import check_disclosure, detect, notice_shown, reattune, turn_reached
from drift.outputs import NO_EFFECTS, Effects, ErasureCommand, Output, SessionSummary
from drift.rebaseline import MAX_SEMANTIC_ITEMS, fold_session, reconfirm
from drift.state import RecentEvents, SessionState, TurnLog, UserState, event_hash


@fast_init
@dataclass(frozen=True, slots=True)
class Step:
    """A user's state and current baselines after one step, and what the shell must do."""

    state: UserState
    baselines: UserBaselines
    effects: Effects = NO_EFFECTS


DUPLICATE = Effects(duplicate=True)
#: The model of a session restarted by a retroactive change to a mode that keeps nothing
#: (such a session compares nothing with any model).
NO_MODEL = ModelTriple("", "", "")


def initial(user_id: str) -> UserState:
    """The state of a user the service has not seen."""
    return UserState(user_id)


def step(state: UserState, baselines: UserBaselines, event: FhrEvent, config: DriftConfig,
         score: AttunementScore = score_attunement_drift) -> Step:
    """Apply one event to one user; returns the user's next state, baselines and effects.

    Duplicated event ids are ignored. Event time never moves backwards: an older
    ``ts`` is processed with the user's clock held where it was. Expiry and idle
    closes that are due by the event's time happen first (:func:`sweep`). ``score``
    computes the attunement statistic of this event's checkpoint, if it has one
    (:data:`drift.attunement.AttunementScore`).
    """
    fingerprint = event_hash(event.event_id)
    if state.recent.holds(fingerprint):
        return Step(state, baselines, DUPLICATE)
    if state.memory_only and state.session is not None and _before_session(state.session,
                                                                             event):
        return Step(state, baselines)
    ts = max(event.ts_s, state.clock_s)
    ctx = StepContext(event.event_id, event.session_id, ts, config, score, event.ts_s)
    swept = sweep(state, baselines, ts, config, ctx, score) if due(state, baselines, ts, config) \
        else None
    if swept is not None:
        state, baselines = swept.state, swept.baselines
    recent = state.recent.keep(fingerprint, config.recent_event_ids)
    session = state.open_session(event.session_id)
    if session is None:
        handled = dispatch(evolve(state, clock_s=ts, recent=recent), baselines, event, ctx)
    else:
        touch = {"last_s": max(session.last_s, ts),
                 "ephemeral": session.ephemeral or event.ephemeral}
        if isinstance(event.body, Turn):
            # Most events are turns: their session and state change once, not twice.
            handled = _turn(state, session, touch, {"clock_s": ts, "recent": recent},
                            baselines, event.body, ctx)
        else:
            touched = evolve(state, clock_s=ts, recent=recent, session=evolve(session, **touch))
            handled = dispatch(touched, baselines, event, ctx)
    if swept is not None and not swept.effects.empty:
        handled = Step(handled.state, handled.baselines, swept.effects + handled.effects)
    if handled.state.memory_only:
        return _kept_in_memory(state, handled, event, config)
    return handled


def _unseen(result: Step) -> Step:
    """A memory-only user outside a session is a user never seen (:func:`_kept_in_memory`);
    the effects are the step's."""
    return Step(initial(result.state.user_id), UserBaselines(), result.effects)


def _before_session(session: SessionState, event: FhrEvent) -> bool:
    """Whether an event of a memory-only user belongs to no session they can have open:
    older than the open session, or of another session and not a newer start. Nothing of
    the user from before the open session is kept, so such an event (a late duplicate, most
    often) does nothing rather than being taken for new."""
    if event.ts_s < session.started_s:
        return True
    return event.session_id != session.session_id and not isinstance(event.body, SessionStart)


def _kept_in_memory(before: UserState, result: Step, event: FhrEvent, config: DriftConfig
                    ) -> Step:
    """What is kept of a user nothing of whom may outlive the process: only the session
    that is open, from its start (or from a retroactive change to a mode that keeps
    nothing). Outside a session such a user is a user never seen. So their state is a
    function of the log since that session's first record, and a replay from there
    (after a crash, on a new owner) rebuilds it exactly; the effects are the step's."""
    after, body = result.state, event.body
    if isinstance(body, ModeChanged) and body.retroactive and not body.to_mode.keeps_baselines:
        # Only what follows the change counts: the session goes on in the new mode as if
        # it had started here (nothing before it may be kept).
        ts = event.ts_s
        session = SessionState(event.session_id, body.to_mode, ts, ts, NO_MODEL, ("", "", ""),
                               event.ephemeral, TurnLog.start(config))
        fresh = UserState(before.user_id, body.to_mode, ts, recent=RecentEvents().keep(
            event_hash(event.event_id), config.recent_event_ids), session=session)
        return Step(fresh, UserBaselines(), result.effects)
    if after.session is None:
        return _unseen(result)
    if isinstance(body, SessionStart) and before != initial(before.user_id):
        restarted = step(initial(before.user_id), UserBaselines(), event, config)
        return Step(restarted.state, restarted.baselines, result.effects)
    return result


def may_erase(state: UserState, baselines: UserBaselines, event: FhrEvent, config: DriftConfig
              ) -> bool:
    """Whether ``step(state, baselines, event, config)`` may erase stored baselines: True
    whenever its effects hold an :class:`ErasureCommand` (an erase request, a retroactive
    mode change, a session started in a lower mode, a baseline past its TTL by the event's
    time). The shell lets the checkpoint in flight land before such an event, so that the
    erasure finds every version written before it.

    >>> from drift.model import ModelTriple, SessionStart
    >>> m = ModelTriple("m", "t", "bf16")
    >>> full = step(initial("u"), UserBaselines(),
    ...             FhrEvent("e1", "session_start", 0.0, "u", "s1", False,
    ...                      SessionStart(Mode.FULL, "c", m, "g", "p")), DriftConfig()).state
    >>> light = FhrEvent("e2", "session_start", 60.0, "u", "s2", False,
    ...                  SessionStart(Mode.LIGHT, "c", m, "g", "p"))
    >>> may_erase(full, UserBaselines(), light, DriftConfig())
    True
    >>> may_erase(initial("u"), UserBaselines(), light, DriftConfig())
    False
    """
    body = event.body
    if isinstance(body, MemoryErase):
        return True
    if isinstance(body, ModeChanged):
        return body.retroactive
    old = state.mode
    if isinstance(body, SessionStart) and old is not None and old.keeps_baselines \
            and body.mode.rank < old.rank:
        return True
    return expiry_due(state, baselines, max(event.ts_s, state.clock_s), config)


def dispatch(state: UserState, baselines: UserBaselines, event: FhrEvent, ctx: StepContext
             ) -> Step:
    """What ``event`` does once :func:`step` has moved the clock, the dedupe window and the
    open session's last event time: for a ``semantic``, a shown notice or a blocked write,
    only the open session's other fields change (the batch kernel moves the first three in
    its columns and calls this for the rest)."""
    body = event.body
    match body:
        case SessionStart():
            return _session_start(state, baselines, body, event.ephemeral, ctx)
        case Turn():
            return Step(state, baselines)  # a turn of a session that is not open
        case Semantic():
            return _semantic(state, baselines, body, ctx)
        case MemoryWrite():
            return Step(state, baselines, Effects(audit_write(state, body, ctx)))
        case MemoryWriteBlocked():
            return Step(state, baselines)
        case MemoryErase():
            state, baselines, command = erase(state, baselines, erase_kinds_for(body),
                                              body.reason, body.request_id, ctx)
            return Step(state, baselines, Effects(writes=(command,)))
        case ModeChanged():
            return _mode_changed(state, baselines, body, ctx)
        case NoticeShown():
            if state.open_session(ctx.session_id) is None:
                return Step(state, baselines)
            return Step(notice_shown(state), baselines)
        case BaselineReconfirmed():
            state, baselines, writes, released = reconfirm(state, baselines,
                                                           frozenset(body.kinds), ctx)
            return Step(state, baselines, Effects(released, writes))
        case SessionEnd():
            if state.open_session(ctx.session_id) is None:
                return Step(state, baselines)
            return end_session(state, baselines, ctx, "session_end")
        case _:
            assert_never(body)


def due(state: UserState, baselines: UserBaselines, now_s: float, config: DriftConfig
        ) -> bool:
    """Whether :func:`sweep` has anything to do by ``now_s`` (a cheap check per event)."""
    return _idle_due(state.session, now_s, config) or expiry_due(state, baselines, now_s, config)


def _idle_due(session: SessionState | None, now_s: float, config: DriftConfig) -> bool:
    return session is not None and session.last_s + config.idle_timeout_s <= now_s


def sweep(state: UserState, baselines: UserBaselines, now_s: float, config: DriftConfig,
          cause: StepContext | None = None, score: AttunementScore = score_attunement_drift
          ) -> Step:
    """What is due by event time ``now_s``: TTL expiry, then an idle session's close.

    Serves the event path (``cause`` is the event that noticed) and the timer
    (``cause`` is None); ``score`` is as for :func:`step`.
    """
    state, baselines, commands = expire(state, baselines, now_s, config, cause)
    closed = close_idle(state, baselines, now_s, config, score)
    if closed.state.memory_only and closed.state.session is None \
            and closed.state != initial(state.user_id):
        closed = _unseen(closed)
    if not commands:
        return closed
    return Step(closed.state, closed.baselines, Effects(writes=commands) + closed.effects)


def close_idle(state: UserState, baselines: UserBaselines, now_s: float, config: DriftConfig,
               score: AttunementScore = score_attunement_drift) -> Step:
    """Close the open session as ``idle_timeout`` if it has had no event for the idle timeout.

    The close happens at event time ``last event + idle timeout``, so a replay closes
    it identically whether a timer or a later event noticed first.

    >>> from drift.model import ModelTriple, SessionStart
    >>> start = SessionStart(Mode.FULL, "c", ModelTriple("m", "t", "bf16"), "g", "p")
    >>> opened = step(initial("u"), UserBaselines(),
    ...               FhrEvent("e1", "session_start", 0.0, "u", "s1", False, start),
    ...               DriftConfig()).state
    >>> close_idle(opened, UserBaselines(), 60.0, DriftConfig()).state.session is None
    False
    >>> closed = close_idle(opened, UserBaselines(), 3600.0, DriftConfig())
    >>> closed.state.session, closed.effects.sessions[0].ended_s
    (None, 1800.0)
    """
    session = state.session
    if session is None or not _idle_due(session, now_s, config):
        return Step(state, baselines)
    at = session.last_s + config.idle_timeout_s
    ctx = StepContext(derive_id("idle", state.user_id, session.session_id), session.session_id,
                      at, config, score)
    return end_session(state, baselines, ctx, "idle_timeout")


def end_session(state: UserState, baselines: UserBaselines, ctx: StepContext, tag: str
                ) -> Step:
    """Close the open session: its last checkpoint and re-attunement, then the fold."""
    session = state.session
    assert session is not None
    outputs: tuple[Output, ...] = ()
    writes: tuple[Baseline, ...] = ()
    if session.mode.keeps_baselines:
        turns = session.turns
        if turns.looks == 0 and (turns.n_turns > 0 or session.referenced):
            state, outs = checkpoint(state, baselines, ctx, tag)
            outputs += outs
        assert state.session is not None
        if not state.session.model_change.reattune_done and turns.n_turns > 0:
            state, outs = reattune(state, baselines, ctx)
            outputs += outs
        state, outs = check_disclosure(state, ctx)
        outputs += outs
        state, baselines, writes = fold_session(state, baselines, ctx)
    closed = state.session
    assert closed is not None
    sessions = (summarize(state.user_id, closed, ctx.ts_s),) if closed.summarized else ()
    return Step(evolve(state, session=None), baselines, Effects(outputs, writes, sessions))


def summarize(user_id: str, session: SessionState, ended_s: float | None) -> SessionSummary:
    """What the review API shows of a session (``ended_s`` None while it is open)."""
    return SessionSummary(user_id, session.session_id, session.mode, session.started_s,
                          ended_s, session.turns.n_turns, session.max_tier, session.scores,
                          session.model_change.detected, session.reattune_quality)


def _session_start(state: UserState, baselines: UserBaselines, body: SessionStart,
                   ephemeral: bool, ctx: StepContext) -> Step:
    effects = NO_EFFECTS
    if state.session is not None:
        if state.session.session_id == ctx.session_id:
            return Step(state, baselines)
        ended = end_session(state, baselines, ctx, "superseded")
        state, baselines, effects = ended.state, ended.baselines, ended.effects
    state, baselines, commands = downgrade(state, baselines, body.mode, ctx)
    if commands:
        effects += Effects(writes=commands)
    session = SessionState(ctx.session_id, body.mode, ctx.ts_s, ctx.ts_s, body.model,
                           (body.gate_config_id, body.drift_policy_id, body.consent_state_id),
                           ephemeral, TurnLog.start(ctx.config))
    # The state's changes made at once: a session starts at every user's every visit.
    changes: dict[str, Any] = {"mode": body.mode, "ladder": ladder.new_session(state.ladder),
                               "session": session}
    if not body.mode.keeps_baselines:
        return Step(evolve(state, durable=False, **changes), baselines, effects)
    if not ephemeral:
        changes["durable"] = True
    if baselines.metas():
        changes["last_used_s"] = ctx.ts_s
    state = evolve(state, **changes)
    if baselines.safety is not None:
        saf = safety_drift(baselines.safety.fields(), session.safety)
        if saf > 0:
            state, outs = rate(state, baselines, ctx, "session_start", None, None, saf)
            effects += Effects(outs)
    state, outs = detect(state, baselines, body.model, ctx)
    return Step(state, baselines, effects + Effects(outs) if outs else effects)


def _turn(state: UserState, session: SessionState, session_changes: dict[str, Any],
          state_changes: dict[str, Any], baselines: UserBaselines, body: Turn,
          ctx: StepContext) -> Step:
    """A turn of the open ``session``, applied with the changes every event makes."""
    config = ctx.config
    guard = guard_after(session.guard, body, config)
    if not session.mode.keeps_baselines:
        return Step(evolve(state, session=evolve(session, guard=guard, **session_changes),
                           **state_changes), baselines)
    turns = session.turns.add(transform_turn(body), config)
    state = evolve(state, session=evolve(session, guard=guard, turns=turns, **session_changes),
                   **state_changes)
    state, outputs = turn_reached(state, baselines, ctx)
    return Step(state, baselines, Effects(outputs) if outputs else NO_EFFECTS)


def _semantic(state: UserState, baselines: UserBaselines, body: Semantic, ctx: StepContext
              ) -> Step:
    session = state.open_session(ctx.session_id)
    if session is None or not session.mode.keeps_baselines:
        return Step(state, baselines)
    cid = body.commitment_id
    referenced = session.referenced
    if baselines.semantic is not None and cid in baselines.semantic.ids():
        referenced = {**referenced, cid: body.stance}
    affirmed = session.affirmed
    if body.stance == "affirm":
        if cid in affirmed or len(affirmed) < MAX_SEMANTIC_ITEMS:
            affirmed = {**affirmed, cid: body.kind}
    elif cid in affirmed:
        affirmed = {c: k for c, k in affirmed.items() if c != cid}
    session = evolve(session, referenced=referenced, affirmed=affirmed)
    return Step(evolve(state, session=session), baselines)


def _mode_changed(state: UserState, baselines: UserBaselines, body: ModeChanged,
                  ctx: StepContext) -> Step:
    """A retroactive change applies now; any other takes effect at the next session start."""
    if not body.retroactive:
        return Step(state, baselines)
    state, baselines, commands = downgrade(state, baselines, body.to_mode, ctx)
    session = state.session
    state = evolve(state, mode=body.to_mode,
                    session=evolve(session, mode=body.to_mode) if session is not None else None)
    return Step(state, baselines, Effects(writes=commands))


__all__ = ["ErasureCommand", "Mode", "Step", "close_idle", "due", "end_session", "initial",
           "may_erase", "step", "summarize", "sweep"]
