"""The memory-governance audit (SPEC section 6): blocking states and relational writes.

:func:`guard_after` folds a turn into the session's :class:`~drift.state.Guard`;
:func:`audit_write` holds a relational ``memory_write`` against the mode and the
guard and returns the violations it commits.
"""

from __future__ import annotations

from drift.baseline import derive_id
from drift.checkpoint import StepContext
from drift.model import LIGHT_CATEGORIES, DriftConfig, MemoryWrite, Mode, Turn
from drift.outputs import Rule, Violation
from drift.state import Guard, UserState

BLOCKING_SEVERITIES = frozenset({"med", "high"})
_BLOCKING_FLAGS = ("care_override", "care_cooloff", "crisis", "legal_hold")


def guard_after(guard: Guard, turn: Turn, config: DriftConfig) -> Guard:
    """The blocking states in force after ``turn``.

    High resonance blocks once it has lasted ``high_resonance_turns`` turns with no
    reflection; only a reflection lifts that block.

    >>> g = Guard()
    >>> for k in range(1, 4):
    ...     g = guard_after(g, Turn.neutral(k, resonance_depth=0.9), DriftConfig())
    >>> g.high_res_block, guard_after(g, Turn.neutral(4, crisis=True), DriftConfig()).blocking
    (True, ('crisis',))
    >>> guard_after(g, Turn.neutral(5, reflection=True), DriftConfig()).high_res_block
    False
    """
    blocking: tuple[str, ...] = ()
    if turn.care_override or turn.care_cooloff or turn.crisis or turn.legal_hold \
            or turn.ae_severity in BLOCKING_SEVERITIES:  # rare: most turns block nothing
        blocking = (("ae_active",) if turn.ae_severity in BLOCKING_SEVERITIES else ()) + tuple(
            name for name in _BLOCKING_FLAGS if getattr(turn, name))
    if turn.reflection:
        streak, block = 0, False
    elif turn.resonance_depth >= config.high_resonance:
        streak = guard.high_res_streak + 1
        block = guard.high_res_block or streak >= config.high_resonance_turns
    else:
        streak, block = 0, guard.high_res_block
    if (blocking, streak, block) == (guard.blocking, guard.high_res_streak, guard.high_res_block):
        return guard
    return Guard(blocking, streak, block)


def violation(user_id: str, rule: Rule, reason: str, ctx: StepContext,
              session_id: str | None = None) -> Violation:
    """A violation of ``rule`` caused by ``ctx``'s event; its id is derived from both, and
    its time is the event's own: a copy of the event that comes back when nothing of the
    first is kept (a memory-only user forgotten since) gives the same violation, not one
    at a later clock under the same id."""
    ts = ctx.ts_s if ctx.event_ts_s is None else ctx.event_ts_s
    return Violation(derive_id("violation", rule.value, user_id, ctx.event_id), user_id,
                     session_id or ctx.session_id, ts, rule, reason, ctx.event_id)


def audit_write(state: UserState, write: MemoryWrite, ctx: StepContext
                ) -> tuple[Violation, ...]:
    """The violations a relational write commits, in rule order (none for other classes)."""
    if write.memory_class != "relational":
        return ()
    session = state.open_session(ctx.session_id)
    mode = session.mode if session is not None else state.mode
    user = state.user_id
    out: list[Violation] = []
    if mode in (Mode.STATELESS, Mode.SESSION_ONLY):
        assert mode is not None
        out.append(violation(user, Rule.MODE_FORBIDDEN, f"mode_{mode.value}", ctx))
    elif mode is Mode.LIGHT and write.category not in LIGHT_CATEGORIES:
        out.append(violation(user, Rule.MODE_FORBIDDEN, "category_not_permitted_in_light", ctx))
    if session is not None:
        reasons = session.guard.blocking + (
            ("high_resonance_no_reflection",) if session.guard.high_res_block else ())
        if reasons:
            out.append(violation(user, Rule.BLOCKED_STATE, reasons[0], ctx))
    if mode is Mode.FULL and not write.confirmed:
        out.append(violation(user, Rule.UNCONFIRMED, "not_confirmed", ctx))
    return tuple(out)
