"""Many users' states as the columns hold them, at once: what a checkpoint stores, without
building each state object.

:meth:`UserColumns.state_at <drift.kernel.columns.UserColumns.state_at>` builds a user's
:class:`~drift.state.UserState` from the slot (:func:`drift.kernel.convert.materialize`):
its turn log's rows and window sums as tuples, its ring, its guard. A checkpoint needs
those parts only to store them, so :func:`take_slots` hands them over as columns for all
its users together (:class:`TakenSlots`): the state object the slot holds beside its
columns, and the columns' parts of it, the open session's turn rows each distinct row
once (compiled, :func:`_distinct`). :func:`baselines.snapshot.encode_taken` writes the
snapshot of each from these, byte for byte the one of the state ``state_at`` builds
(``tests/baselines/test_snapshot_slots.py`` holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from drift.fold import initial
from drift.kernel.columns import UserColumns
from drift.kernel.convert import ring_bytes
from drift.kernel.jit import compiled
from drift.kernel.layout import (
    BASELINING,
    DIRTY_SESSION,
    DIRTY_USER,
    F_CLOCK,
    F_LAST,
    HIGH_RES_BLOCK,
    I_BLOCKING,
    I_CURRENT,
    I_FLAGS,
    I_LATE,
    I_RING_HEAD,
    I_RING_LEN,
    I_STREAK,
    I_TROW,
    I_TURNS,
    I_WINDOW_N,
    N_FEATURES,
    PY_ONLY,
    blocking_names,
)
from drift.state import UserState


@compiled("void(i8[::1], i8[:, ::1], u8[:, ::1], i8[::1], i8[::1], u8[:, ::1], i8[::1],"
          " u2[:, ::1])")
def _distinct(trows: npt.NDArray[np.int64], counts: npt.NDArray[np.int64],
              bits: npt.NDArray[np.uint64], starts: npt.NDArray[np.int64],
              at: npt.NDArray[np.int64], out: npt.NDArray[np.uint64],
              n_out: npt.NDArray[np.int64], index: npt.NDArray[np.uint16]) -> None:
    """For each turn row ``trows[i]`` of ``bits`` (the turn rows as raw 64-bit words; -1
    for none, left empty): its three row lists (``counts[i, k]`` rows from word
    ``starts[k]``) as the distinct rows, bit for bit, in the order first met (into
    ``out[i]``, ``n_out[i]`` of them) and each list's indices into them (into ``index[i]``
    from ``at[k]``)."""
    for i in range(trows.shape[0]):
        t = trows[i]
        d = 0
        if t < 0:
            n_out[i] = 0
            continue
        for k in range(3):
            for r in range(counts[i, k]):
                row = starts[k] + r * N_FEATURES
                found = -1
                for j in range(d):
                    same = True
                    for c in range(N_FEATURES):
                        if out[i, j * N_FEATURES + c] != bits[t, row + c]:
                            same = False
                            break
                    if same:
                        found = j
                        break
                if found < 0:
                    for c in range(N_FEATURES):
                        out[i, d * N_FEATURES + c] = bits[t, row + c]
                    found = d
                    d += 1
                index[i, at[k] + r] = found
        n_out[i] = d


@dataclass(frozen=True, slots=True)
class TakenSlots:
    """Users' states as the columns hold them, one entry per user in every list and array.

    The state of user ``i`` is ``shells[i]`` with the columns' parts: the clock, the ring
    (``rings``) and, where ``in_columns[i]``, of its open session ``last_s``, the guard
    (``blocking``, ``streaks``, ``high_res``) and the turn log but its look count (the
    count of turns, each window's count and sums, and the rows, each distinct row once in
    ``distinct`` with the three lists' indices into them in ``index``, the current look's
    from 0, the early window's from ``index_at[1]``, the late profile's from
    ``index_at[2]``). Where not ``in_columns[i]``, the open session (if any) is the
    shell's as it is.
    """

    users: list[str]
    shells: list[UserState]
    clocks: list[float]
    rings: list[bytes]
    in_columns: list[bool]
    last_s: list[float]
    blocking: list[tuple[str, ...]]
    streaks: list[int]
    high_res: list[bool]
    n_turns: list[int]
    window_n: list[list[int]]
    sums: npt.NDArray[np.float64]
    """Per user, each window's totals then its squares (zeros where not ``in_columns``)."""
    counts: list[list[int]]
    """Per user, the rows of the current look, the early window and the late profile."""
    distinct: npt.NDArray[np.float64]
    n_distinct: list[int]
    index: npt.NDArray[np.uint16]
    index_at: tuple[int, int, int]


#: A turn row's rows are indexed in 16 bits: a geometry past that is built state by state.
_MAX_ROWS = 1 << 16


def take_slots(columns: UserColumns, users: list[str]
               ) -> tuple[TakenSlots, dict[str, UserState]]:
    """The states of ``users`` (each held in ``columns``, or never seen): those whose parts
    the columns hold newer than the state object, as columns; the others' states whole (the
    object the slot holds, or :meth:`~UserColumns.state_at` of a slot whose open session's
    mode keeps no turn log, or whose turn rows pass 16-bit indices: both rare).

    >>> from drift.model import DriftConfig, Mode
    >>> from drift.state import RecentEvents
    >>> cols = UserColumns(DriftConfig())
    >>> cols.states["u"] = UserState("u", Mode.FULL, clock_s=5.0, durable=True,
    ...                              recent=RecentEvents().remember("e1", 128))
    >>> cols.strip("u")  # the state object lets its ring go: the columns hold it
    >>> taken, whole = take_slots(cols, ["u", "nobody"])
    >>> taken.users, taken.clocks, len(taken.rings[0]), list(whole)
    (['u'], [5.0], 8, ['nobody'])
    """
    index, shells, icols = columns._index, columns._shells, columns.icols
    g = columns.geometry
    indexed = g.current + g.early + g.late <= _MAX_ROWS
    whole: dict[str, UserState] = {}
    picked: list[str] = []
    picked_shells: list[UserState] = []
    slots: list[int] = []
    for user_id in users:
        s = index.get(user_id, -1)
        shell = shells[s] if s >= 0 else None
        flags = int(icols[s, I_FLAGS]) if shell is not None else 0
        if shell is None or flags & PY_ONLY or not flags & (DIRTY_USER | DIRTY_SESSION):
            whole[user_id] = shell or initial(user_id)
        elif shell.session is not None and flags & DIRTY_SESSION and (
                not flags & BASELINING or not indexed):
            whole[user_id] = columns.state_at(s)
        else:
            picked.append(user_id)
            picked_shells.append(shell)
            slots.append(s)
    return _taken(columns, picked, picked_shells, slots), whole


def _taken(columns: UserColumns, users: list[str], shells: list[UserState], slots: list[int]
           ) -> TakenSlots:
    """:class:`TakenSlots` of ``users`` (their state objects ``shells``) at ``slots``: copies
    of their rows of the columns."""
    g = columns.geometry
    at = np.array(slots, dtype=np.int64)
    ints = columns.icols[at]
    flags = ints[:, I_FLAGS]
    in_columns = (flags & DIRTY_SESSION != 0) & (flags & BASELINING != 0)
    trows = np.where(in_columns, ints[:, I_TROW], -1)
    counts = ints[:, I_CURRENT:I_LATE + 1]
    width = g.current + g.early + g.late
    tcols = columns.turn_rows.tcols
    sums = np.zeros((len(slots), g.t_current), np.float64)
    sums[in_columns] = tcols[trows[in_columns], :g.t_current]
    distinct = np.zeros((len(slots), width * N_FEATURES), np.uint64)
    n_distinct = np.zeros(len(slots), np.int64)
    index = np.zeros((len(slots), width), np.uint16)
    index_at = (0, g.current, g.current + g.early)
    _distinct(trows, np.ascontiguousarray(counts), tcols.view(np.uint64),
              np.array((g.t_current, g.t_early, g.t_late), np.int64),
              np.array(index_at, np.int64), distinct, n_distinct, index)
    floats = columns.fcols[at]
    rings = columns.rings[at].astype("<u8", copy=False).tobytes()
    size = columns.rings.shape[1] * 8
    return TakenSlots(
        users, shells, floats[:, F_CLOCK].tolist(),
        [ring_bytes(rings[i * size:(i + 1) * size], held, head) for i, (held, head)
         in enumerate(ints[:, I_RING_LEN:I_RING_HEAD + 1].tolist())],
        in_columns.tolist(), floats[:, F_LAST].tolist(),
        [blocking_names(m) for m in ints[:, I_BLOCKING].tolist()],
        ints[:, I_STREAK].tolist(), (flags & HIGH_RES_BLOCK != 0).tolist(),
        ints[:, I_TURNS].tolist(), ints[:, I_WINDOW_N:I_WINDOW_N + g.windows].tolist(),
        sums, counts.tolist(), distinct.view(np.float64), n_distinct.tolist(), index,
        index_at)


class TakenState(NamedTuple):
    """User ``i`` of ``taken``: one user's state as the columns held it when taken."""

    taken: TakenSlots
    i: int

    @property
    def clock_s(self) -> float:
        return self.taken.clocks[self.i]
