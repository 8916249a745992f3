"""The per-user state of a worker as columns: one slot per user, struct of arrays.

:class:`UserColumns` keeps, for each user, the kernel's part of the state in three
arrays (:mod:`drift.kernel.layout`) and the rest as the Python objects the
reference fold uses (the state object last loaded, and the user's baselines), keyed
by slot. A user's state object lets go of what the columns hold of it (the dedupe ring,
the turn log) once the user is idle (:meth:`UserColumns.strip`): most users of a worker
are, and those parts are most of a state's size. Its two views (:mod:`drift.kernel.views`),
:attr:`UserColumns.states` and :attr:`UserColumns.baselines`,
are mutable mappings by user id, so a shell can hold it where it held two dicts:
reading a state builds it from its slot (exactly, :mod:`drift.kernel.convert`),
writing one loads it into its slot.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from drift.baseline import UserBaselines
from drift.evolve import evolve
from drift.kernel.convert import load, load_opened, materialize, strip
from drift.kernel.layout import (
    DIRTY_SESSION,
    DIRTY_USER,
    F_CLOCK,
    F_EXPIRE,
    F_WIDTH,
    I_CURRENT,
    I_EARLY,
    I_FLAGS,
    I_SESSION,
    I_TROW,
    I_TURNS,
    N_FEATURES,
    PY_ONLY,
    Geometry,
    SavedRows,
    TurnRows,
    expiry_hint,
)
from drift.kernel.views import NO_BASELINES, BaselineView, StateView
from drift.model import DriftConfig
from drift.state import TurnLog, UserState

_DIRTY = DIRTY_USER | DIRTY_SESSION
#: The session numbers start anew once they pass this many per user (plus the spare): they
#: are kept from batch to batch, so a slot's number stays written, but not without bound.
_CODES_PER_USER, _CODES_SPARE = 4, 4096


class UserColumns:
    """Every user's fold state and baselines, in slots.

    >>> from drift.model import Mode
    >>> cols = UserColumns(DriftConfig())
    >>> cols.states["u1"] = UserState("u1", Mode.FULL, clock_s=5.0)
    >>> cols.states["u1"].clock_s, "u1" in cols.states, "u1" in cols.baselines, len(cols)
    (5.0, True, False, 1)
    >>> del cols.states["u1"]
    >>> len(cols), cols.states.get("u1")
    (0, None)
    """

    def __init__(self, config: DriftConfig, capacity: int = 64) -> None:
        self.config = config
        self.geometry = g = Geometry.of(config)
        capacity = max(capacity, 1)
        self.icols: npt.NDArray[np.int64] = np.zeros((capacity, g.i_width), np.int64)
        self.icols[:, I_TROW] = -1
        self.fcols: npt.NDArray[np.float64] = np.zeros((capacity, F_WIDTH), np.float64)
        self.turn_rows = TurnRows(g.t_width)
        self.rings: npt.NDArray[np.uint64] = np.zeros((capacity, g.ring), np.uint64)
        self._index: dict[str, int] = {}
        self._users: list[str] = [""] * capacity
        self._shells: list[UserState | None] = [None] * capacity
        self._baselines: list[UserBaselines | None] = [None] * capacity
        self._turns: list[TurnLog | None] = [None] * capacity
        """Per slot, the turn log whose values the slot's turn columns hold (when known)."""
        self._rings: list[bytes | None] = [None] * capacity
        """Per slot, the dedupe ring the slot's ring holds, in its order (when known)."""
        self._hints: list[tuple[UserBaselines, float, float] | None] = [None] * capacity
        """Per slot, the last expiry hint with the baselines and ``last_used_s`` it is of."""
        self._free = list(range(capacity - 1, -1, -1))
        self.saved = SavedRows(g)  # put back by :meth:`restore`
        self._codes: dict[str, int] = {}
        self._generation = 0
        """How many times the session numbers were started anew (:meth:`begin_batch`)."""
        self._bound = [-1] * capacity
        """Per slot, the generation its open session's number was written in."""
        self.fresh: list[str] = []
        """Users given a slot since the running batch began (:meth:`begin_batch`)."""
        self.states = StateView(self)
        self.baselines = BaselineView(self)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._index

    def users(self) -> Iterator[str]:
        """Every user with a slot."""
        return iter(list(self._index))

    def shell_of(self, user_id: str) -> UserState | None:
        """The user's state object as last held, or None for a user without a state. Its
        mode, session (whether one is open, and its mode) and ladder are the user's
        current ones: the kernel moves only what the columns hold (and :meth:`strip` may
        have let those parts go)."""
        s = self._index.get(user_id)
        return None if s is None else self._shells[s]

    def shells(self) -> Iterator[UserState]:
        """Every held state object (as :meth:`shell_of`)."""
        return (sh for sh in self._shells if sh is not None)

    def put(self, user_id: str, state: UserState, baselines: UserBaselines | None) -> None:
        """Hold ``state`` and ``baselines`` (if given) for the user (a slot if it has
        none)."""
        self.put_at(self.slot(user_id), state, baselines)

    def strip(self, user_id: str) -> None:
        """Let the user's state object go without the parts the columns hold: the dedupe ring
        and the open session's turn log (:func:`~drift.kernel.convert.strip`), about 2 KB
        of a user's 3.9 KB. The next read builds them again from the columns
        (:meth:`state_at`), so the worker strips a user once idle: at a checkpoint, and when
        loaded from its store. A slot the columns cannot hold keeps its whole object.

        >>> from drift.model import Mode
        >>> from drift.state import RecentEvents
        >>> cols = UserColumns(DriftConfig())
        >>> state = UserState("u", Mode.FULL, durable=True,
        ...                   recent=RecentEvents().remember("e1", 128))
        >>> cols.states["u"] = state
        >>> cols.strip("u")
        >>> cols.shell_of("u").recent.ring, cols.states["u"] == state
        (b'', True)
        """
        s = self._index.get(user_id)
        if s is None or self._shells[s] is None or self.icols[s, I_FLAGS] & PY_ONLY:
            return
        self._shells[s] = strip(self.shell_at(s))
        self._turns[s] = None
        self._rings[s] = None
        self._hints[s] = None  # the slot holds its hint; the next load works it out again
        self.icols[s, I_FLAGS] |= _DIRTY

    def slot(self, user_id: str) -> int:
        """The user's slot; a user without one gets one, holding the initial state.

        >>> cols = UserColumns(DriftConfig(), capacity=1)
        >>> cols.slot("a"), cols.slot("b"), cols.slot("a"), cols.icols.shape[0]
        (0, 1, 0, 2)
        """
        s = self._index.get(user_id)
        if s is not None:
            return s
        if not self._free:
            self._grow()
        s = self._free.pop()
        self._index[user_id] = s
        self.fresh.append(user_id)
        self._users[s] = user_id
        self._shells[s] = None
        self._baselines[s] = None
        self._load(s, UserState(user_id), NO_BASELINES)
        return s

    def _grow(self) -> None:
        """A quarter more slots (at least one): the slots a growth leaves empty are memory
        every user pays for (doubling left up to half of them empty); a quarter costs more
        copies, each of what is held (docs/performance.md, "Per-user state")."""
        old = self.icols.shape[0]
        more = max(old // 4, 1)
        grown = ((0, more), (0, 0))  # rows of zeros after the last
        self.icols = np.pad(self.icols, grown)
        self.icols[old:, I_TROW] = -1
        self.fcols = np.pad(self.fcols, grown)
        self.rings = np.pad(self.rings, grown)
        self._users += [""] * more
        self._shells += [None] * more
        self._baselines += [None] * more
        self._turns += [None] * more
        self._rings += [None] * more
        self._hints += [None] * more
        self._bound += [-1] * more
        self._free = list(range(old + more - 1, old - 1, -1))

    def drop(self, user_id: str) -> None:
        """Forget a user (its slot is reused)."""
        s = self._index.pop(user_id, None)
        if s is not None:
            self._turn_row(s, False)
            for held in (self._shells, self._baselines, self._turns, self._rings, self._hints):
                held[s] = None
            self._users[s] = ""
            self._free.append(s)

    def _load(self, s: int, state: UserState, baselines: UserBaselines) -> None:
        hint = self._hint(s, state, baselines)
        session = state.session
        turns = session.turns if session is not None and session.mode.keeps_baselines \
            else None
        flags = int(self.icols[s, I_FLAGS])
        new_row = self._turn_row(s, turns is not None)
        held_turns = None if new_row or flags & (_DIRTY | PY_ONLY) else self._turns[s]
        held_ring = None if flags & (DIRTY_USER | PY_ONLY) else self._rings[s]
        fits = load(state, hint, s, self.icols, self.fcols, self.turn_rows.tcols, self.rings,
                    self.geometry, self.session_code, held_turns, held_ring)
        self._bound[s] = self._generation
        self._turns[s] = turns if fits else None
        self._rings[s] = state.recent.ring if fits else None

    def _turn_row(self, s: int, wanted: bool) -> bool:
        """Give slot ``s`` a turn row if ``wanted`` and it has none, or take its row back if
        not wanted; True if it got a new one (which holds no turn log yet)."""
        row = int(self.icols[s, I_TROW])
        if wanted == (row >= 0):
            return False
        if wanted:
            self.icols[s, I_TROW] = self.turn_rows.give()
        else:
            self.turn_rows.take_back(row)
            self.icols[s, I_TROW] = -1
        return wanted

    def _hint(self, s: int, state: UserState, baselines: UserBaselines) -> float:
        """:func:`~drift.kernel.layout.expiry_hint`, kept while the baselines object and
        ``last_used_s`` it is of stay the same."""
        cached = self._hints[s]
        if cached is not None and cached[0] is baselines and cached[1] == state.last_used_s:
            return cached[2]
        hint = expiry_hint(state, baselines, self.config)
        self._hints[s] = (baselines, state.last_used_s, hint)
        return hint

    def state_at(self, s: int) -> UserState:
        """The state in slot ``s``, built from its columns (and kept, until they move)."""
        shell = self._shells[s]
        if shell is None:
            shell = UserState(self._users[s])
        if not self.icols[s, I_FLAGS] & _DIRTY:
            return shell
        state = materialize(shell, s, self.icols, self.fcols, self.turn_rows.tcols, self.rings,
                            self.geometry)
        self._shells[s] = state
        session = state.session
        self._turns[s] = session.turns if session is not None \
            and session.mode.keeps_baselines else None
        self._rings[s] = state.recent.ring
        self.icols[s, I_FLAGS] &= ~_DIRTY
        return state

    def shell_at(self, s: int) -> UserState:
        """The state object slot ``s`` holds beside its columns (their parts in it may be
        older than the columns', or let go)."""
        shell = self._shells[s]
        assert shell is not None, "a slot with an open session holds its state object"
        return shell

    def clock_at(self, s: int) -> float:
        """Slot ``s``'s clock, as the kernel moved it (the state object's may be older)."""
        return float(self.fcols[s, F_CLOCK])

    def open_session(self, s: int, state: UserState, baselines: UserBaselines) -> bool:
        """Hold ``state`` and ``baselines`` after a start the kernel took opened a session
        (:func:`~drift.kernel.convert.load_opened`; False, changing nothing, if not)."""
        self._turn_row(s, True)
        if not load_opened(state, self._hint(s, state, baselines), s, self.icols, self.fcols,
                           self.turn_rows.tcols, self.geometry, self.session_code):
            self._turn_row(s, False)
            return False
        session = state.session
        assert session is not None
        self._shells[s] = state
        self._baselines[s] = baselines
        self._turns[s] = session.turns
        self._bound[s] = self._generation
        return True

    def keep_shell(self, s: int, state: UserState) -> None:
        """Hold ``state`` as slot ``s``'s state object, whose parts the columns hold stay
        the columns' (:func:`drift.fold.dispatch` of a side event changed none of them)."""
        self._shells[s] = state

    def scored_at(self, s: int) -> UserState:
        """Slot ``s``'s state object with its open session's turn count from the columns (a
        checkpoint reads the rows since the last look in :meth:`current_rows`, a
        re-attunement its early rows in :meth:`early_rows`; the log's other parts are the
        object's, and may be older than the columns' or let go: neither reads them)."""
        shell = self.shell_at(s)
        session = shell.session
        assert session is not None and session.turns is not None
        turns = evolve(session.turns, n_turns=int(self.icols[s, I_TURNS]))
        return evolve(shell, session=evolve(session, turns=turns))

    def current_rows(self, s: int) -> npt.NDArray[np.float64]:
        """The rows of slot ``s``'s open session since its last look, one per turn (a view of
        its turn row: read it before the slot changes)."""
        return self._rows(s, self.geometry.t_current, I_CURRENT)

    def early_rows(self, s: int) -> npt.NDArray[np.float64]:
        """The early rows of slot ``s``'s open session, as :meth:`current_rows`."""
        return self._rows(s, self.geometry.t_early, I_EARLY)

    def _rows(self, s: int, at: int, count: int) -> npt.NDArray[np.float64]:
        n = int(self.icols[s, count])
        return self.turn_rows.tcols[self.icols[s, I_TROW], at:at + n * N_FEATURES].reshape(
            n, N_FEATURES)

    def restore(self, s: int, row: int) -> None:
        """Slot ``s``'s rows as the kernel saved them in ``row`` put back, marked to rebuild."""
        ints, floats, turn_row, ring = (a[row] for a in self.saved.arrays)
        self.icols[s], self.fcols[s], self.rings[s] = ints, floats, ring
        if ints[I_TROW] >= 0:
            self.turn_rows.tcols[ints[I_TROW]] = turn_row
        self.icols[s, I_FLAGS] |= _DIRTY  # the state object may have been built since

    def keep_scored(self, s: int, state: UserState) -> None:
        """Hold ``state``, scored from :meth:`scored_at`'s, as slot ``s``'s state object: its
        ladder, the session's score count, top tier, looks and re-attunement are the slot's
        now, and a checkpoint's look consumed the columns' rows since the last one."""
        session, before = state.session, self.shell_at(s).session
        assert session is not None and before is not None
        if session.turns.looks != before.turns.looks:
            self.icols[s, I_CURRENT] = 0
        self._shells[s] = state

    def baselines_at(self, s: int) -> UserBaselines:
        """The baselines of slot ``s`` (none stored: no baselines)."""
        b = self._baselines[s]
        return NO_BASELINES if b is None else b

    def put_at(self, s: int, state: UserState, baselines: UserBaselines | None = None) -> None:
        """Load ``state`` (and ``baselines``, if given) into slot ``s``."""
        self._shells[s] = state
        if baselines is not None:
            self._baselines[s] = baselines
        self._load(s, state, self.baselines_at(s))

    def _set_baselines(self, s: int, baselines: UserBaselines) -> None:
        self._baselines[s] = baselines
        shell = self._shells[s]  # last_used_s is not the kernel's: the shell holds it
        self.fcols[s, F_EXPIRE] = expiry_hint(shell or UserState(self._users[s]), baselines,
                                              self.config)

    def _release_if_empty(self, s: int) -> None:
        if self._shells[s] is None and self._baselines[s] is None:
            self.drop(self._users[s])

    def arrays(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64],
                              npt.NDArray[np.float64], npt.NDArray[np.uint64]]:
        """The slot arrays and the turn rows, in the kernel's argument order (they move when
        they grow)."""
        return self.icols, self.fcols, self.turn_rows.tcols, self.rings

    def begin_batch(self, users: list[str], sessions: list[str]) -> tuple[list[int], list[int]]:
        """Start a batch: :attr:`fresh` empty, and the session numbers started anew when
        there are many more of them than users (they number every session seen since); the
        slot of each of its events' users (:meth:`slot`) and the number of each session."""
        self.fresh.clear()
        if len(self._codes) > _CODES_PER_USER * len(self._index) + _CODES_SPARE:
            self._codes.clear()
            self._generation += 1
        index, codes = self._index, self._codes
        return ([index[u] if u in index else self.slot(u) for u in users],
                [codes[c] if c in codes else self.session_code(c) for c in sessions])

    def session_code(self, session_id: str) -> int:
        """The number of ``session_id`` (the same until :meth:`begin_batch` starts the
        numbers anew).

        >>> cols = UserColumns(DriftConfig())
        >>> cols.session_code("s1"), cols.session_code("s2"), cols.session_code("s1")
        (0, 1, 0)
        """
        return self._codes.setdefault(session_id, len(self._codes))

    def bind_session(self, s: int) -> None:
        """Write slot ``s``'s open session's number, unless it was written since the
        numbers last started anew (a slot's session changes only through :meth:`_load`,
        which writes it)."""
        if self._bound[s] == self._generation:
            return
        shell = self._shells[s]
        session = shell.session if shell is not None else None
        self.icols[s, I_SESSION] = self.session_code(session.session_id) \
            if session is not None else -1
        self._bound[s] = self._generation

    def mark_stored(self, s: int) -> None:
        """Slot ``s`` holds a state of its own from now (not only baselines)."""
        if self._shells[s] is None:
            self._shells[s] = UserState(self._users[s])
