"""A session's end the kernel took, read where the slot holds it: the twin of
:func:`drift.rebaseline.session_numbers`, float for float.

What a closing session folds into its attunement version (each window's count, means and
squared deviations, as :func:`drift.baseline.window_table` lays them out, and the late
profile) is computed compiled from the slot's turn row: the window sums, and the late rows
summed row after row (:func:`drift.sums.column_means`), with the reference's arithmetic in
its order. So the state a session's end is applied to needs no turn log's rows and sums
(:func:`closing_state`). ``tests/drift/test_kernel.py`` holds the folds equal.
"""

from __future__ import annotations

import functools
from array import array

import numpy as np
import numpy.typing as npt

from drift.kernel.columns import UserColumns
from drift.kernel.convert import materialize
from drift.kernel.jit import compiled
from drift.kernel.layout import I_LATE, I_TROW, I_WINDOW_N, N_FEATURES
from drift.state import SessionState, UserState


@compiled("void(f8[::1], i8[::1], i8[::1], i8, i8, f8[::1], f8[::1])")
def _numbers(row: npt.NDArray[np.float64], counts: npt.NDArray[np.int64],
             idx: npt.NDArray[np.int64], t_late: int, n_late: int,
             table: npt.NDArray[np.float64], late: npt.NDArray[np.float64]) -> None:
    """Fill ``table`` with the windows of turn row ``row`` (``counts`` their turns) over the
    features at ``idx`` (:meth:`drift.state.WindowSums.stats`, then
    :func:`drift.baseline.window_table`), and ``late`` with the means of its ``n_late`` late
    rows over them."""
    f = idx.shape[0]
    width = 1 + 2 * f
    for w in range(counts.shape[0]):
        n = counts[w]
        at = w * width
        if n == 0:
            table[at] = -1.0
            table[at + 1:at + width] = 0.0
            continue
        table[at] = n
        sums = w * 2 * N_FEATURES
        for k in range(f):
            j = idx[k]
            m = row[sums + j] / n
            table[at + 1 + k] = m
            v = row[sums + N_FEATURES + j] - n * m * m
            table[at + 1 + f + k] = max(0.0, v)  # numba's max is Python's, NaN and zeros alike
    for k in range(f):
        j = idx[k]
        total = row[t_late + j]
        for r in range(1, n_late):
            total = total + row[t_late + r * N_FEATURES + j]
        late[k] = total / n_late


def slot_numbers(row: npt.NDArray[np.float64], counts: npt.NDArray[np.int64], t_late: int,
                 n_late: int, session: SessionState, idx: list[int]
                 ) -> tuple[array[float], tuple[float, ...]]:
    """:func:`drift.rebaseline.session_numbers` of the session whose turn row is ``row``
    (its windows' counts ``counts``, its ``n_late`` late rows at ``t_late``)."""
    f = len(idx)
    table = np.empty(counts.shape[0] * (1 + 2 * f))
    late = np.empty(f)
    _numbers(row, counts, _indices(tuple(idx)), t_late, n_late, table, late)
    return array("d", table.tobytes()), tuple(late.tolist())


@functools.lru_cache(maxsize=16)
def _indices(idx: tuple[int, ...]) -> npt.NDArray[np.int64]:
    return np.array(idx, dtype=np.int64)


def closing_state(columns: UserColumns, s: int
                  ) -> tuple[UserState, functools.partial[tuple[array[float], tuple[float, ...]]]]:
    """The state a session's end the kernel took is applied to (slot ``s``'s, its turn log
    but the count and the early rows a re-attunement still due reads: the end reads the
    rest in the columns), and what the session folds into its attunement version, for
    :attr:`drift.checkpoint.StepContext.session_numbers`.

    >>> from drift.kernel.batch import fold_batch
    >>> from drift.model import DriftConfig, FhrEvent, Mode, ModelTriple, SessionStart, Turn
    >>> from drift.rebaseline import session_numbers
    >>> start = SessionStart(Mode.FULL, "c", ModelTriple("m", "t", "bf16"), "g", "p")
    >>> log = [FhrEvent("e0", "session_start", 0.0, "u", "s", False, start)]
    >>> log += [FhrEvent(f"e{k}", "turn", 10.0 * k, "u", "s", False,
    ...                  Turn.neutral(k, trust=0.1 * k)) for k in range(1, 13)]
    >>> cols = UserColumns(DriftConfig())
    >>> _ = fold_batch(cols, log, DriftConfig())
    >>> state, numbers = closing_state(cols, cols.slot("u"))
    >>> state.session.turns.n_turns, numbers(state.session, [0, 3]) == session_numbers(
    ...     cols.states["u"].session, [0, 3])
    (12, True)
    """
    icols, fcols, tcols, rings = columns.arrays()
    g = columns.geometry
    state = materialize(columns.shell_at(s), s, icols, fcols, tcols, rings, g, log=False)
    numbers = functools.partial(slot_numbers, tcols[icols[s, I_TROW]],
                                icols[s, I_WINDOW_N:I_WINDOW_N + g.windows], g.t_late,
                                int(icols[s, I_LATE]))
    return state, numbers
