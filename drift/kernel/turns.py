"""The compiled kernel: a pass over a batch of events, applied to the columns.

:func:`apply_turns` does, for the events it takes, exactly what
:func:`drift.fold.step` does for them, on the columns of :mod:`drift.kernel.columns`:

* a duplicate event id (any event type) is marked and changes nothing;
* a turn of the open session (in any mode) moves the clock (held monotone), keeps
  the fingerprint in the dedupe ring, moves the session's ``last_s``, folds the turn
  into the guard (blocking states, the high-resonance streak) and, in a baselining
  mode, adds its transformed row to the turn log (its window sums, the current
  look, the early window, emptied past the re-attunement turn, and the late profile);
* a ``semantic``, ``model_change_notice_shown``, ``memory_write`` or
  ``memory_write_blocked`` event of the open session moves the clock, the ring and
  ``last_s`` the same way and is marked ``ST_SIDE``: what else it changes (or, for a write,
  the violations its audit finds) lives outside the columns, and the caller applies it
  (:func:`drift.fold.dispatch`);
* a turn that reaches a checkpoint or the re-attunement turn is taken like a plain one
  and marked ``ST_SCORED``: the caller scores it (:func:`drift.model_change.turn_reached`,
  on the turn log's rows the columns hold);
* a ``session_start`` (of those :mod:`drift.kernel.events` marks ``KIND_START``) with no
  session open moves the clock and keeps the fingerprint and is marked ``ST_STARTED``: the
  caller opens the session (:func:`drift.fold.dispatch` on the state object, the session
  written into the slot) or, if the slot does not take it, puts the slot back and hands
  the start over whole;
* a ``session_end`` (of those marked ``KIND_END``) of the open session, for a stored user
  whose session keeps baselines, moves the clock, the ring and ``last_s`` as a side event
  does and is marked ``ST_ENDED``: the caller closes the session (:func:`drift.fold.dispatch`
  on the state built from the slot, the result loaded back) or hands it over whole.

Before an event it marks ``ST_SIDE``, ``ST_SCORED``, ``ST_STARTED`` or ``ST_ENDED`` the
kernel copies the slot into a row of ``saved_*``: should the caller's part raise, the
caller puts it back, and the event has changed nothing (as a step that raises).

It marks ``ST_HANDOFF``, and leaves as it was, an event it cannot take: any other event
type, a turn of a session that is not open, a turn by whose time an idle close or an
expiry may be due, an ephemeral turn of a durable session, a memory-only user's event
older than their open session, a row that would not fit, a slot the columns cannot hold.
The caller hands it to the reference fold. After any event marked for the caller, its
user's later events wait for the next pass (the user is *parked*), so every user's events
are applied in log order. The arithmetic is the reference's, in its order (no fast-math),
so the sums are equal to the last bit.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from drift.kernel.jit import compiled
from drift.kernel.layout import (
    BASELINING,
    DIRTY_SESSION,
    DIRTY_USER,
    EV_BLOCKING_SHIFT,
    EV_EPHEMERAL,
    EV_RANK_SHIFT,
    EV_REFLECTION,
    EV_START,
    F_CLOCK,
    F_EXPIRE,
    F_LAST,
    F_STARTED,
    HAS_SESSION,
    HIGH_RES_BLOCK,
    I_BLOCKING,
    I_CURRENT,
    I_EARLY,
    I_FLAGS,
    I_LATE,
    I_MODE,
    I_RING_HEAD,
    I_RING_LEN,
    I_SESSION,
    I_STREAK,
    I_TROW,
    I_TURNS,
    I_WINDOW_N,
    KIND_END,
    KIND_MAY_ERASE,
    KIND_SIDE,
    KIND_START,
    KIND_TURN,
    MEMORY_ONLY,
    N_FEATURES,
    PY_ONLY,
    SESSION_EPHEMERAL,
    ST_APPLIED,
    ST_DUPLICATE,
    ST_ENDED,
    ST_HANDOFF,
    ST_PENDING,
    ST_SCORED,
    ST_SIDE,
    ST_STARTED,
)

_SIGNATURE = ("i8(i8, b1, i8, i8[::1], i8[::1], f8[::1], u8[::1], i8[::1], i8[::1], "
              "f8[:, ::1], i8[::1], i1[::1], i8[::1], i8[::1], i8[:, ::1], f8[:, ::1], "
              "f8[:, ::1], u8[:, ::1], i8[::1], f8[::1], i8[:, ::1], f8[:, ::1], f8[:, ::1], "
              "u8[:, ::1])")
_TAKE = ("i1(i8, i8, i8[::1], i8[::1], f8[::1], u8[::1], i8[::1], i8[::1], f8[:, ::1], "
         "i8[:, ::1], f8[:, ::1], f8[:, ::1], u8[:, ::1], i8[::1], f8[::1], i8[:, ::1], "
         "f8[:, ::1], f8[:, ::1], u8[:, ::1])")


@compiled("void(i8, i8, i8, f8[:, ::1], i8[:, ::1], f8[:, ::1], i8, i8, i8, i8, i8, i8, i8)")
def _add_turn(s: int, i: int, n_turns: int, ev_rows: npt.NDArray[np.float64],
              icols: npt.NDArray[np.int64], tcols: npt.NDArray[np.float64], n_windows: int,
              checkpoint_every: int, reattune_turn: int, cap_late: int, t_current: int,
              t_early: int, t_late: int) -> None:
    """:meth:`drift.state.TurnLog.add` of event ``i``'s row, in slot ``s`` and its turn row."""
    r = icols[s, I_TROW]
    w = (n_turns - 1) // checkpoint_every
    w = min(w, n_windows - 1)
    at = w * 2 * N_FEATURES
    for j in range(N_FEATURES):
        x = ev_rows[i, j]
        tcols[r, at + j] = tcols[r, at + j] + x
        tcols[r, at + N_FEATURES + j] = tcols[r, at + N_FEATURES + j] + x * x
    icols[s, I_WINDOW_N + w] += 1
    icols[s, I_TURNS] = n_turns
    cur = icols[s, I_CURRENT]
    for j in range(N_FEATURES):
        tcols[r, t_current + cur * N_FEATURES + j] = ev_rows[i, j]
    icols[s, I_CURRENT] = cur + 1
    if n_turns <= reattune_turn:
        early = icols[s, I_EARLY]
        for j in range(N_FEATURES):
            tcols[r, t_early + early * N_FEATURES + j] = ev_rows[i, j]
        icols[s, I_EARLY] = early + 1
    elif icols[s, I_EARLY] != 0:  # past the re-attunement turn the early rows are let go
        for k in range(icols[s, I_EARLY] * N_FEATURES):
            tcols[r, t_early + k] = 0.0
        icols[s, I_EARLY] = 0
    late = icols[s, I_LATE]
    if late >= cap_late:  # (late_rows + (row,))[-late_profile_turns:]
        for k in range((cap_late - 1) * N_FEATURES):
            tcols[r, t_late + k] = tcols[r, t_late + N_FEATURES + k]
        late = cap_late - 1
    for j in range(N_FEATURES):
        tcols[r, t_late + late * N_FEATURES + j] = ev_rows[i, j]
    icols[s, I_LATE] = late + 1


# _take is given the arrays apply_turns is, one by one: numba types each argument.
@compiled(_TAKE)
def _take(i: int, save: int,
          ev_slot: npt.NDArray[np.int64], ev_kind: npt.NDArray[np.int64],
          ev_ts: npt.NDArray[np.float64], ev_fp: npt.NDArray[np.uint64],
          ev_session: npt.NDArray[np.int64], ev_flags: npt.NDArray[np.int64],
          ev_rows: npt.NDArray[np.float64],
          icols: npt.NDArray[np.int64], fcols: npt.NDArray[np.float64],
          tcols: npt.NDArray[np.float64], rings: npt.NDArray[np.uint64],
          geom: npt.NDArray[np.int64], params: npt.NDArray[np.float64],
          saved_i: npt.NDArray[np.int64], saved_f: npt.NDArray[np.float64],
          saved_t: npt.NDArray[np.float64], saved_r: npt.NDArray[np.uint64]) -> int:
    """Event ``i`` applied to its slot if the kernel takes it; its status (``ST_PENDING``,
    changing nothing, where it must go to the reference). A slot whose rest is the
    caller's is copied into row ``save`` of ``saved_*`` first."""
    n_windows, cap_current, cap_early, cap_late, cap_ring = geom[0], geom[1], geom[2], \
        geom[3], geom[4]
    t_current, t_early, t_late = geom[5], geom[6], geom[7]
    checkpoint_turn, checkpoint_every, reattune_turn, high_res_turns = geom[8], geom[9], \
        geom[10], geom[11]
    idle_s, high_res = params[0], params[1]
    s = ev_slot[i]
    flags = icols[s, I_FLAGS]
    if flags & PY_ONLY:
        return ST_PENDING
    ts = ev_ts[i]
    clock = fcols[s, F_CLOCK]
    ts = max(ts, clock)  # max(event.ts_s, state.clock_s)
    kind = ev_kind[i]
    expiry_near = ts >= fcols[s, F_EXPIRE]
    fp = ev_fp[i]
    ring_len = icols[s, I_RING_LEN]
    for k in range(ring_len):
        if rings[s, k] == fp:
            return ST_DUPLICATE
    if (flags & MEMORY_ONLY) != 0 and ev_ts[i] < fcols[s, F_STARTED]:
        return ST_PENDING  # older than a memory-only user's open session: the reference's rule
    if (kind != KIND_TURN and kind != KIND_SIDE and kind != KIND_START
            and kind != KIND_END) or expiry_near:
        return ST_PENDING
    has_session = (flags & HAS_SESSION) != 0
    if kind == KIND_START:
        matched = False
        if has_session:
            return ST_PENDING  # it ends the open session first (or repeats its start)
    else:
        if has_session and fcols[s, F_LAST] + idle_s <= ts:
            return ST_PENDING  # the idle close is due first
        matched = has_session and icols[s, I_SESSION] == ev_session[i]
        if not matched:
            return ST_PENDING  # a turn of a session not open (a memory-only user stays unseen)
        if (ev_flags[i] & EV_EPHEMERAL) != 0 and (flags & SESSION_EPHEMERAL) == 0:
            return ST_PENDING
        if kind == KIND_END and \
                (flags & (BASELINING | SESSION_EPHEMERAL | MEMORY_ONLY)) != BASELINING:
            return ST_PENDING  # its user is left memory-only or not stored: the reference's
    baselining = matched and (flags & BASELINING) != 0
    n_turns = icols[s, I_TURNS] + 1
    scored = False
    if baselining and kind == KIND_TURN:
        if icols[s, I_CURRENT] >= cap_current or icols[s, I_TROW] < 0:
            return ST_PENDING
        if n_turns <= reattune_turn and icols[s, I_EARLY] >= cap_early:
            return ST_PENDING
        scored = n_turns == reattune_turn or (
            n_turns >= checkpoint_turn
            and (n_turns - checkpoint_turn) % checkpoint_every == 0)
    if scored or kind != KIND_TURN:  # the slot as before, should its caller's part raise
        saved_i[save] = icols[s]
        saved_f[save] = fcols[s]
        if icols[s, I_TROW] >= 0:
            saved_t[save] = tcols[icols[s, I_TROW]]
        saved_r[save] = rings[s]
    # Taken: the dedupe ring keeps the fingerprint, dropping the oldest when full.
    if ring_len >= cap_ring:
        head = icols[s, I_RING_HEAD]
        rings[s, head] = fp
        icols[s, I_RING_HEAD] = (head + 1) % cap_ring
    else:
        rings[s, ring_len] = fp
        icols[s, I_RING_LEN] = ring_len + 1
    fcols[s, F_CLOCK] = ts
    flags |= DIRTY_USER
    if matched:
        fcols[s, F_LAST] = max(fcols[s, F_LAST], ts)
        flags |= DIRTY_SESSION
    if kind != KIND_TURN:  # the caller applies the rest before the user's next event
        icols[s, I_FLAGS] = flags
        return ST_SIDE if kind == KIND_SIDE else (ST_STARTED if kind == KIND_START
                                                  else ST_ENDED)
    # A turn of the open session: the guard, and in a baselining mode the turn log.
    ef = ev_flags[i]
    icols[s, I_BLOCKING] = (ef >> EV_BLOCKING_SHIFT) & 31
    if (ef & EV_REFLECTION) != 0:
        icols[s, I_STREAK] = 0
        flags &= ~HIGH_RES_BLOCK
    elif ev_rows[i, 1] >= high_res:
        streak = icols[s, I_STREAK] + 1
        icols[s, I_STREAK] = streak
        if streak >= high_res_turns:
            flags |= HIGH_RES_BLOCK
    else:
        icols[s, I_STREAK] = 0
    if baselining:
        _add_turn(s, i, n_turns, ev_rows, icols, tcols, n_windows, checkpoint_every,
                  reattune_turn, cap_late, t_current, t_early, t_late)
    icols[s, I_FLAGS] = flags
    return ST_SCORED if scored else ST_APPLIED


@compiled("b1(i8, i8[::1], i8[::1], f8[::1], i8[::1], i8[:, ::1], f8[:, ::1])")
def _may_erase(i: int, ev_slot: npt.NDArray[np.int64], ev_kind: npt.NDArray[np.int64],
               ev_ts: npt.NDArray[np.float64], ev_flags: npt.NDArray[np.int64],
               icols: npt.NDArray[np.int64], fcols: npt.NDArray[np.float64]) -> bool:
    """Whether event ``i`` may erase stored baselines, read in its slot's columns (the slot
    as its user's events before it left it): a superset of :func:`drift.fold.may_erase`.
    An erase request or a mode change may (``KIND_MAY_ERASE``); a session start may where
    its mode's rank is below the user's mode that keeps baselines (``I_MODE``); any event
    may from its slot's expiry hint on; and any event of a slot the columns cannot hold.
    """
    s = ev_slot[i]
    if icols[s, I_FLAGS] & PY_ONLY:
        return True
    if max(ev_ts[i], fcols[s, F_CLOCK]) >= fcols[s, F_EXPIRE]:
        return True
    flags = ev_flags[i]
    if flags & EV_START:
        return bool((flags >> EV_RANK_SHIFT) & 3 < icols[s, I_MODE])
    return bool(ev_kind[i] == KIND_MAY_ERASE)


@compiled(_SIGNATURE)
def apply_turns(start: int, stop_before_erasure: bool, pass_no: int,
                ev_slot: npt.NDArray[np.int64], ev_kind: npt.NDArray[np.int64],
                ev_ts: npt.NDArray[np.float64], ev_fp: npt.NDArray[np.uint64],
                ev_session: npt.NDArray[np.int64], ev_flags: npt.NDArray[np.int64],
                ev_rows: npt.NDArray[np.float64], ev_user: npt.NDArray[np.int64],
                status: npt.NDArray[np.int8], parked: npt.NDArray[np.int64],
                ev_save: npt.NDArray[np.int64],
                icols: npt.NDArray[np.int64], fcols: npt.NDArray[np.float64],
                tcols: npt.NDArray[np.float64], rings: npt.NDArray[np.uint64],
                geom: npt.NDArray[np.int64], params: npt.NDArray[np.float64],
                saved_i: npt.NDArray[np.int64], saved_f: npt.NDArray[np.float64],
                saved_t: npt.NDArray[np.float64], saved_r: npt.NDArray[np.uint64]) -> int:
    """One pass over the events ``start..`` still ``ST_PENDING``, in log order: marks each
    one it takes in ``status``, and *parks* the user of each one whose rest is the caller's
    (``ST_SIDE``, ``ST_SCORED``, ``ST_STARTED``, ``ST_ENDED``) or that must go to the
    reference whole (``ST_HANDOFF``): that user's later events wait, ``ST_PENDING``, for the
    next pass (``parked[ev_user[i]] == pass_no``), while the other users' go on. So each
    user's events are applied in log order, and the kernel is called once a pass instead of
    once an event that is not its alone. Before an event whose rest is the caller's, the
    slot is copied into row ``ev_save[i]`` of ``saved_*`` (a user is parked once a pass,
    so a pass needs a row per user of the batch at most).

    Returns the number of events, or, with ``stop_before_erasure``, the index of the first
    event that may erase (:func:`drift.fold.may_erase` decides exactly; the kernel stops at
    a superset, :func:`_may_erase`, and at every event of a parked user): the caller applies
    the events before it first, and then decides on it, so none after it is applied before.

    >>> from drift.kernel.columns import UserColumns
    >>> from drift.kernel.events import EventColumns
    >>> from drift.model import DriftConfig, FhrEvent, Turn
    >>> cols = UserColumns(DriftConfig())
    >>> turn = FhrEvent("e1", "turn", 5.0, "u", "s", False, Turn.neutral(1))
    >>> ev = EventColumns.of(cols, [turn, turn])
    >>> apply_turns(0, False, 1, *ev.arrays(), *cols.arrays(), cols.geometry.geom,
    ...             cols.geometry.params, *cols.saved.at_least(ev.users))
    2
    >>> ev.status.tolist()  # a turn of a session not open: the reference's, its user parked
    [7, 0]
    """
    n = ev_slot.shape[0]
    saves = 0
    for i in range(start, n):
        if status[i] != ST_PENDING:
            continue
        u = ev_user[i]
        if parked[u] == pass_no:
            if stop_before_erasure:
                return i  # whether it may erase depends on its user's event before it
            continue
        if stop_before_erasure and _may_erase(i, ev_slot, ev_kind, ev_ts, ev_flags, icols,
                                              fcols):
            return i
        st = _take(i, saves, ev_slot, ev_kind, ev_ts, ev_fp, ev_session, ev_flags, ev_rows,
                   icols, fcols, tcols, rings, geom, params, saved_i, saved_f, saved_t,
                   saved_r)
        if st == ST_PENDING:
            st = ST_HANDOFF
            parked[u] = pass_no
        elif st != ST_APPLIED and st != ST_DUPLICATE:
            ev_save[i] = saves
            saves += 1
            parked[u] = pass_no
        status[i] = st
    return int(n)
