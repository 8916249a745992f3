"""Exact conversion between a :class:`~drift.state.UserState` and its slot in the columns.

The columns own what a plain turn changes: the clock, the dedupe ring, and of the
open session ``last_s``, the guard and the turn log. :func:`load` writes those
parts of a state into a slot (and says, by the ``PY_ONLY`` flag, when a state does
not fit: every event of that user then goes to the reference fold); :func:`strip`
is the state without the two large ones (the ring and the turn log's rows and sums),
which is what a slot keeps beside its columns; :func:`materialize` builds the state
back from the slot and that object, which holds everything else. The round trip is
the identity.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from drift.evolve import evolve
from drift.kernel.layout import (
    # The slot layout's constants by name, as drift.kernel.turns imports them: each module
    # lists the slots it reads.
    BASELINING,
    DIRTY_SESSION,
    DIRTY_USER,
    F_CLOCK,
    F_LAST,
    F_WIDTH,
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
    MEMORY_ONLY,
    N_FEATURES,
    PY_ONLY,
    SESSION_EPHEMERAL,
    Geometry,
    blocking_mask,
    blocking_names,
    mode_rank,
)
from drift.state import Guard, RecentEvents, Row, TurnLog, UserState, WindowSums

_FP_BYTES = 8
_NO_RECENT = RecentEvents()
def _put_rows(rows: tuple[Row, ...], at: int, floats: list[float]) -> bool:
    for r, row in enumerate(rows):
        if len(row) != N_FEATURES:
            return False
        floats[at + r * N_FEATURES:at + (r + 1) * N_FEATURES] = row
    return True


def _fits(turns: TurnLog, g: Geometry) -> bool:
    """Whether a turn log's windows and row counts fit a slot of geometry ``g``."""
    return len(turns.windows) == g.windows and len(turns.current_rows) <= g.current \
        and len(turns.early_rows) <= g.early and len(turns.late_rows) <= g.late


_NO_SUMS = WindowSums()


def _empty(turns: TurnLog, g: Geometry) -> bool:
    """Whether ``turns`` is a session's log before its first turn (:meth:`TurnLog.start`),
    whose counts and sums are all zero in a slot of geometry ``g``."""
    return (turns.n_turns == 0 and not turns.current_rows and not turns.early_rows
            and not turns.late_rows and len(turns.windows) == g.windows
            and all(w == _NO_SUMS for w in turns.windows))


def _load_turns(turns: TurnLog, ints: list[int], floats: list[float], g: Geometry) -> bool:
    if not _fits(turns, g):
        return False
    ints[I_TURNS] = turns.n_turns
    ints[I_CURRENT] = len(turns.current_rows)
    ints[I_EARLY] = len(turns.early_rows)
    ints[I_LATE] = len(turns.late_rows)
    for w, sums in enumerate(turns.windows):
        if len(sums.total) != N_FEATURES or len(sums.squares) != N_FEATURES:
            return False
        ints[I_WINDOW_N + w] = sums.n
        at = g.total_at(w)
        floats[at:at + N_FEATURES] = sums.total
        floats[at + N_FEATURES:at + 2 * N_FEATURES] = sums.squares
    return (_put_rows(turns.current_rows, g.t_current, floats)
            and _put_rows(turns.early_rows, g.t_early, floats)
            and _put_rows(turns.late_rows, g.t_late, floats))


def _update_rows(old: tuple[Row, ...], new: tuple[Row, ...], at: int,
                 row: npt.NDArray[np.float64]) -> bool:
    """Write the rows of ``new`` that the slot, holding ``old``, lacks (the fold appends
    rows, or starts them afresh)."""
    if new is old:
        return True
    k = len(old) if len(new) > len(old) and new[:len(old)] == old else 0
    flat: list[float] = []
    for r in new[k:]:
        if len(r) != N_FEATURES:
            return False
        flat.extend(r)
    if flat:
        row[at + k * N_FEATURES:at + k * N_FEATURES + len(flat)] = flat
    return True


def _update_turns(old: TurnLog, turns: TurnLog, slot: int, icols: npt.NDArray[np.int64],
                  tcols: npt.NDArray[np.float64], g: Geometry) -> bool:
    """Write what ``turns`` changed from ``old``, the log the slot's turn row holds: the
    counts, the windows that are not ``old``'s, and the rows it does not have. Only what the
    counts cover is ever read, so rows past them may keep older values."""
    if not _fits(turns, g):
        return False
    ints = icols[slot]
    floats = tcols[ints[I_TROW]]
    for w, (sums, before) in enumerate(zip(turns.windows, old.windows, strict=True)):
        if sums is before:
            continue
        if len(sums.total) != N_FEATURES or len(sums.squares) != N_FEATURES:
            return False
        ints[I_WINDOW_N + w] = sums.n
        at = g.total_at(w)
        floats[at:at + 2 * N_FEATURES] = sums.total + sums.squares
    if not (_update_rows(old.current_rows, turns.current_rows, g.t_current, floats)
            and _update_rows(old.early_rows, turns.early_rows, g.t_early, floats)
            and _update_rows(old.late_rows, turns.late_rows, g.t_late, floats)):
        return False
    ints[I_TURNS] = turns.n_turns
    ints[I_CURRENT] = len(turns.current_rows)
    ints[I_EARLY] = len(turns.early_rows)
    ints[I_LATE] = len(turns.late_rows)
    return True


def _update_ring(old: bytes, ring: bytes, slot: int, icols: npt.NDArray[np.int64],
                 rings: npt.NDArray[np.uint64], capacity: int) -> bool:
    """Write ``ring`` where the slot holds ``old`` and ``ring`` is ``old`` with one
    fingerprint more (the oldest dropped when full), as the kernel would; False (nothing
    written) for any other change."""
    held = len(old) // _FP_BYTES
    if len(ring) == len(old) + _FP_BYTES and held < capacity and ring.startswith(old):
        rings[slot, held] = int.from_bytes(ring[-_FP_BYTES:], "little")
        icols[slot, I_RING_LEN] = held + 1
        return True
    if held == capacity and len(ring) == len(old) and ring[:-_FP_BYTES] == old[_FP_BYTES:]:
        head = int(icols[slot, I_RING_HEAD])
        rings[slot, head] = int.from_bytes(ring[-_FP_BYTES:], "little")
        icols[slot, I_RING_HEAD] = (head + 1) % capacity
        return True
    return False


def load(state: UserState, expire_at_s: float, slot: int, icols: npt.NDArray[np.int64],
         fcols: npt.NDArray[np.float64], tcols: npt.NDArray[np.float64],
         rings: npt.NDArray[np.uint64], g: Geometry, session_code: Callable[[str], int],
         turns_held: TurnLog | None = None, ring_held: bytes | None = None) -> bool:
    """Write the kernel's part of ``state`` into ``slot``; returns whether it fits (if not,
    the slot is flagged ``PY_ONLY``). ``session_code`` numbers session ids for the batch;
    ``turns_held`` and ``ring_held`` are the turn log and the dedupe ring the slot holds
    already, if the caller knows them, so only what changed from them is written. An open
    session that keeps baselines is written into the slot's turn row (``I_TROW``), which
    the caller gives the slot beforehand (without one the state does not fit).

    >>> from drift.kernel.columns import UserColumns
    >>> from drift.model import DriftConfig, Mode
    >>> cols = UserColumns(DriftConfig())
    >>> s = cols.slot("u")
    >>> durable = UserState("u", Mode.FULL, clock_s=7.0, durable=True)
    >>> load(durable, float("inf"), s, *cols.arrays(), cols.geometry, cols.session_code)
    True
    >>> float(cols.fcols[s, F_CLOCK])
    7.0
    """
    ring = state.recent.ring
    held = len(ring) // _FP_BYTES
    ok = g.supported and held <= g.ring and len(ring) % _FP_BYTES == 0
    flags = MEMORY_ONLY if state.memory_only else 0
    last_s = started_s = 0.0
    mask = streak = 0
    code = -1
    session = state.session
    trow = int(icols[slot, I_TROW])
    turns_fit = True
    if session is not None:
        flags |= HAS_SESSION
        last_s, started_s = session.last_s, session.started_s
        if session.ephemeral:
            flags |= SESSION_EPHEMERAL
        guard = session.guard
        mask = blocking_mask(guard.blocking)
        ok = ok and mask >= 0
        streak = guard.high_res_streak
        if guard.high_res_block:
            flags |= HIGH_RES_BLOCK
        code = session_code(session.session_id)
        if session.mode.keeps_baselines:
            flags |= BASELINING
            turns = session.turns
            if trow < 0:
                turns_fit = False
            elif turns is turns_held:
                pass
            elif turns_held is not None and ok:
                turns_fit = _update_turns(turns_held, turns, slot, icols, tcols, g)
            elif _empty(turns, g):  # a session just started: what _load_turns writes, at once
                icols[slot] = 0
                icols[slot, I_TROW] = trow
                tcols[trow] = 0.0
                ring_held = None  # the row's ring length and head were reset
            else:
                ints = [0] * g.i_width
                floats = [0.0] * g.t_width
                turns_fit = _load_turns(turns, ints, floats, g)
                if turns_fit:
                    ints[I_TROW] = trow
                    icols[slot] = ints
                    tcols[trow] = floats
                    ring_held = None  # the row's ring length and head were reset
    ok = ok and turns_fit
    row = icols[slot]
    if not ok:
        flags |= PY_ONLY
        row[I_RING_LEN] = 0
        row[I_RING_HEAD] = 0
    elif ring is ring_held:
        pass
    elif ring_held is None or not _update_ring(ring_held, ring, slot, icols, rings, g.ring):
        if held:
            rings[slot, :held] = np.frombuffer(ring, dtype="<u8")
        row[I_RING_LEN] = held
        row[I_RING_HEAD] = 0
    row[I_FLAGS] = flags
    row[I_MODE] = mode_rank(state)
    row[I_STREAK] = streak
    row[I_BLOCKING] = max(mask, 0)
    row[I_SESSION] = code
    fcols[slot, :F_WIDTH] = (state.clock_s, last_s, expire_at_s, started_s)
    return ok


def load_opened(state: UserState, expire_at_s: float, slot: int, icols: npt.NDArray[np.int64],
                fcols: npt.NDArray[np.float64], tcols: npt.NDArray[np.float64], g: Geometry,
                session_code: Callable[[str], int]) -> bool:
    """Write the session a start just opened in ``state`` into ``slot``, whose clock and
    dedupe ring the kernel moved for that start: they stay the columns', and the slot stays
    dirty for them (:func:`load` is the rest of it). Returns False, writing nothing, unless
    the session keeps baselines for a user who is not memory-only, its turn log is
    :meth:`TurnLog.start`'s, its guard's states are in order, and the slot has a turn row.
    """
    session = state.session
    trow = int(icols[slot, I_TROW])
    if session is None or state.memory_only or not session.mode.keeps_baselines \
            or trow < 0 or not _empty(session.turns, g):
        return False
    guard = session.guard
    mask = blocking_mask(guard.blocking)
    if mask < 0:
        return False
    flags = DIRTY_USER | HAS_SESSION | BASELINING
    if session.ephemeral:
        flags |= SESSION_EPHEMERAL
    if guard.high_res_block:
        flags |= HIGH_RES_BLOCK
    row = icols[slot].tolist()
    ints = [0] * g.i_width
    ints[I_FLAGS], ints[I_RING_LEN], ints[I_RING_HEAD] = flags, row[I_RING_LEN], row[I_RING_HEAD]
    ints[I_STREAK], ints[I_BLOCKING], ints[I_TROW] = guard.high_res_streak, mask, trow
    ints[I_SESSION], ints[I_MODE] = session_code(session.session_id), mode_rank(state)
    icols[slot] = ints
    tcols[trow] = 0.0
    fcols[slot] = (fcols[slot, F_CLOCK], session.last_s, expire_at_s, session.started_s)
    return True


def _rows(floats: list[float], at: int, n: int) -> tuple[Row, ...]:
    return tuple(tuple(floats[at + r * N_FEATURES:at + (r + 1) * N_FEATURES]) for r in range(n))


def _grown(old: tuple[Row, ...], floats: list[float], at: int, n: int) -> tuple[Row, ...]:
    """Rows ``0..n`` at ``at``, where the first ``len(old)`` are ``old`` (the kernel only
    appends to them)."""
    k = len(old)
    if n == k:
        return old
    if n < k:
        return _rows(floats, at, n)
    return old + tuple(tuple(floats[at + r * N_FEATURES:at + (r + 1) * N_FEATURES])
                       for r in range(k, n))


def _turn_log(old: TurnLog, ints: list[int], floats: list[float], g: Geometry) -> TurnLog:
    """The slot's turn log (``floats`` its turn row); ``old`` is the log the slot was loaded
    from or last built as, whose unchanged parts are kept (a window whose count did not
    move did not change)."""
    windows = []
    for w in range(g.windows):
        n = ints[I_WINDOW_N + w]
        if w < len(old.windows) and old.windows[w].n == n:
            windows.append(old.windows[w])
            continue
        at = g.total_at(w)
        windows.append(WindowSums(n, tuple(floats[at:at + N_FEATURES]),
                                  tuple(floats[at + N_FEATURES:at + 2 * N_FEATURES])))
    return TurnLog(ints[I_TURNS], old.looks, tuple(windows),
                   _grown(old.current_rows, floats, g.t_current, ints[I_CURRENT]),
                   _grown(old.early_rows, floats, g.t_early, ints[I_EARLY]),
                   _rows(floats, g.t_late, ints[I_LATE]))


def strip(state: UserState) -> UserState:
    """``state`` without what :func:`load` wrote of it that takes room: the dedupe ring and,
    of an open session that keeps baselines, the turn log but its look count (which the
    columns do not hold). An idle user's slot keeps this beside its columns (2 KB of the
    3.9 KB of a simulated user's state, docs/performance.md); :func:`materialize` builds
    ``state`` back from the two.

    >>> from drift.model import DriftConfig, Mode
    >>> state = UserState("u", Mode.FULL, recent=RecentEvents().remember("e1", 128))
    >>> strip(state).recent.ring, strip(state).mode
    (b'', <Mode.FULL: 'continuity_full'>)
    """
    session = state.session
    if session is not None and session.mode.keeps_baselines:
        session = evolve(session, turns=TurnLog(looks=session.turns.looks))
    return evolve(state, recent=_NO_RECENT, session=session)


def ring_bytes(ring: bytes, held: int, head: int) -> bytes:
    """A slot's ring (its fingerprints' bytes, little-endian, in the slot's order) as
    :attr:`drift.state.RecentEvents.ring`: the ``held`` fingerprints oldest first, the
    oldest at ``head`` once the ring is full.

    >>> ring = np.array([3, 1, 2], dtype="<u8").tobytes()
    >>> ring_bytes(ring, 3, 1) == bytes([1] + [0] * 7 + [2] + [0] * 7 + [3] + [0] * 7)
    True
    """
    if head:
        return ring[head * _FP_BYTES:held * _FP_BYTES] + ring[:head * _FP_BYTES]
    return ring[:held * _FP_BYTES]


def materialize(shell: UserState, slot: int, icols: npt.NDArray[np.int64],
                fcols: npt.NDArray[np.float64], tcols: npt.NDArray[np.float64],
                rings: npt.NDArray[np.uint64], g: Geometry, log: bool = True) -> UserState:
    """The state in ``slot``: ``shell`` (the state last loaded there, or :func:`strip` of it)
    with the kernel's parts. Without ``log``, of the open session's turn log only the count
    and, while its re-attunement is due, the early rows (what a session's end reads of it
    outside the columns).

    >>> from drift.kernel.columns import UserColumns
    >>> from drift.model import DriftConfig, Mode
    >>> cols = UserColumns(DriftConfig())
    >>> s = cols.slot("u")
    >>> state = UserState("u", Mode.FULL, clock_s=7.0, durable=True,
    ...                   recent=RecentEvents().remember("e1", 128))
    >>> _ = load(state, float("inf"), s, *cols.arrays(), cols.geometry, cols.session_code)
    >>> materialize(UserState("u", Mode.FULL, durable=True), s, *cols.arrays(),
    ...             cols.geometry) == state
    True
    >>> materialize(strip(state), s, *cols.arrays(), cols.geometry) == state
    True
    """
    ints = icols[slot].tolist()
    floats = fcols[slot].tolist()
    flags = ints[I_FLAGS]
    recent = RecentEvents(ring_bytes(rings[slot].astype("<u8", copy=False).tobytes(),
                                      ints[I_RING_LEN], ints[I_RING_HEAD]))
    session = shell.session
    if session is None or not flags & DIRTY_SESSION:
        return evolve(shell, clock_s=floats[F_CLOCK], recent=recent)
    guard = Guard(blocking_names(ints[I_BLOCKING]), ints[I_STREAK],
                  bool(flags & HIGH_RES_BLOCK))
    if flags & BASELINING:
        turns = (_turn_log(session.turns, ints, tcols[ints[I_TROW]].tolist(), g) if log
                 else evolve(session.turns, n_turns=ints[I_TURNS]))
        if not log and not session.model_change.reattune_done:
            early = tcols[ints[I_TROW], g.t_early:g.t_early + ints[I_EARLY] * N_FEATURES]
            turns = evolve(turns, early_rows=_rows(early.tolist(), 0, ints[I_EARLY]))
        session = evolve(session, last_s=floats[F_LAST], guard=guard, turns=turns)
    else:
        session = evolve(session, last_s=floats[F_LAST], guard=guard)
    return evolve(shell, clock_s=floats[F_CLOCK], recent=recent, session=session)
