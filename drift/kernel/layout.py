"""Where each part of a user's kernel state sits in the columns, how the guard's blocking
states and the expiry hint are written there, and the event codes.

A user's slot is one row in each of three arrays: ``icols`` (int64: counts, flags,
the guard's streak), ``fcols`` (float64: the clock, the open session's last event
time, the expiry hint, the open session's start) and ``rings`` (uint64: the dedupe ring
of event-id fingerprints). An open session that keeps baselines also has a row of
``tcols`` (float64: its turn log's window sums and row buffers), whose index the slot
holds (``I_TROW``): most users of a worker have no open session, and those 114 doubles
were most of an idle user's slot. :class:`Geometry` holds the offsets a configuration
gives the turn row, and the two small arrays the kernel reads them from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from drift.baseline import UserBaselines
from drift.model import FEATURES, DriftConfig
from drift.state import UserState

N_FEATURES = len(FEATURES)

# icols: one int64 row per slot.
I_FLAGS = 0
I_TURNS = 1  # TurnLog.n_turns
I_RING_LEN = 2
I_RING_HEAD = 3  # index of the oldest fingerprint once the ring is full
I_CURRENT = 4  # rows in TurnLog.current_rows
I_EARLY = 5
I_LATE = 6
I_STREAK = 7  # Guard.high_res_streak
I_BLOCKING = 8  # Guard.blocking as a bit mask (BLOCKING_NAMES order)
I_SESSION = 9  # the open session's id as a code of the running batch
I_TROW = 10  # the open session's row of tcols (its turn log), -1 for none
I_MODE = 11  # the user's Mode.rank where the mode keeps baselines, -1 otherwise: a session
# start in a lower mode may erase them (drift.fold.may_erase)
I_WINDOW_N = 12  # WindowSums.n of each window, then nothing after
# fcols: one float64 row per slot.
F_CLOCK = 0
F_LAST = 1  # SessionState.last_s
F_EXPIRE = 2  # no baseline can be past its TTL before this event time
F_STARTED = 3  # SessionState.started_s (a memory-only user's older events are not theirs)
F_WIDTH = 4
# tcols: one float64 row per open session that keeps baselines: each window's totals and
# squares from 0 (Geometry.total_at), then the rows at Geometry's offsets.

# Bits of icols[:, I_FLAGS].
PY_ONLY = 1  # the state does not fit the columns: every event goes to the reference
HAS_SESSION = 2
BASELINING = 4  # the open session's mode keeps baselines (it has a turn log)
SESSION_EPHEMERAL = 8
HIGH_RES_BLOCK = 16  # Guard.high_res_block
DIRTY_USER = 32  # the clock or the ring moved since the slot's state object was made
DIRTY_SESSION = 64  # so did the open session (last_s, guard, turn log)
MEMORY_ONLY = 128  # UserState.memory_only: an event older than the open session is not taken

#: Guard.blocking names, one bit each in this order (drift.governance builds them so).
BLOCKING_NAMES = ("ae_active", "care_override", "care_cooloff", "crisis", "legal_hold")

# Event kinds, and the bits of an event's flags.
KIND_TURN = 0
KIND_OTHER = 1
KIND_MAY_ERASE = 2  # session_start, memory_erase, continuity_mode_changed
KIND_SIDE = 3  # semantic, model_change_notice_shown, memory_write(_blocked): of the open
# session only fields the columns do not hold change (drift.fold.dispatch); a write's audit
# may answer with violations
KIND_START = 4  # session_start: it may erase too (a start in a lower mode)
KIND_END = 5  # session_end
EV_EPHEMERAL = 1
EV_BLOCKING_SHIFT = 1  # BLOCKING_NAMES bits start at bit 1 of an event's flags
EV_REFLECTION = 64
EV_START = 128  # a session_start (of any kind): its mode's rank is at EV_RANK_SHIFT
EV_RANK_SHIFT = 8

# Kernel results per event.
ST_PENDING = 0
ST_APPLIED = 1
ST_DUPLICATE = 2
ST_SIDE = 3  # taken; its change to the open session's other fields is the caller's to make
ST_SCORED = 4  # a checkpoint or re-attunement turn, taken; the caller scores it next
ST_STARTED = 5  # a session start with no session open, taken for the clock and the ring; the
# caller opens the session next (drift.fold.dispatch), or hands it to the reference whole
ST_ENDED = 6  # a session_end of the open session, taken for the clock, the ring and last_s;
# the caller closes the session next (drift.fold.dispatch), or hands it over whole
ST_HANDOFF = 7  # not taken: the reference's, whole
ST_DONE = 8  # marked for the caller, and applied by it

#: A baseline can be past its TTL from one second before its hint: a margin far wider than
#: the rounding of ``now - used > ttl`` at epoch seconds, so the kernel only ever hands off
#: early (the reference then decides exactly).
EXPIRY_SLACK_S = 1.0


_MASKS = {tuple(n for b, n in enumerate(BLOCKING_NAMES) if m >> b & 1): m for m in range(32)}
_NAMES = {m: names for names, m in _MASKS.items()}


def blocking_mask(blocking: tuple[str, ...]) -> int:
    """The bit mask of a guard's blocking states; -1 if they are not in the guard's order.

    >>> blocking_mask(("ae_active", "crisis")), blocking_mask(()), blocking_mask(("crisis", "x"))
    (9, 0, -1)
    """
    return _MASKS.get(blocking, -1)


def blocking_names(mask: int) -> tuple[str, ...]:
    """
    >>> blocking_names(9)
    ('ae_active', 'crisis')
    """
    return _NAMES[mask]


def mode_rank(state: UserState) -> int:
    """What a slot holds of the user's mode (``I_MODE``): its rank where it keeps baselines,
    -1 otherwise, so that a session start in a lower mode (which may erase them) is one of
    a lower rank.

    >>> from drift.model import Mode
    >>> mode_rank(UserState("u", Mode.FULL)), mode_rank(UserState("u", Mode.SESSION_ONLY))
    (3, -1)
    """
    mode = state.mode
    return mode.rank if mode is not None and mode.keeps_baselines else -1


def expiry_hint(state: UserState, baselines: UserBaselines, config: DriftConfig) -> float:
    """An event time before which none of ``baselines`` can be past its TTL (the kernel
    hands off from there; :func:`drift.erasure.expiry_due` decides exactly).

    >>> expiry_hint(UserState("u"), UserBaselines(), DriftConfig())
    inf
    """
    metas = baselines.metas()
    if not metas:
        return float("inf")
    used = state.last_used_s
    soonest = float("inf")
    for m in metas:  # a loop, not min() over a generator: this runs at every session's start
        soonest = min(soonest, max(m.created_at_s, used) + config.ttl_s(m.mode))
    return soonest - EXPIRY_SLACK_S


@dataclass(frozen=True)
class Geometry:
    """The shape of a slot under one configuration.

    >>> g = Geometry.of(DriftConfig())
    >>> g.windows, g.current, g.early, g.late, g.ring, g.supported
    (3, 5, 5, 3, 128, True)
    >>> g.t_current, g.t_early, g.t_late, g.t_width, g.i_width
    (36, 66, 96, 114, 15)
    """

    windows: int
    current: int
    early: int
    late: int
    ring: int
    supported: bool
    t_current: int
    t_early: int
    t_late: int
    t_width: int
    i_width: int
    geom: npt.NDArray[np.int64]
    params: npt.NDArray[np.float64]

    @staticmethod
    def of(config: DriftConfig) -> Geometry:
        """The geometry of ``config``; ``supported`` False puts every slot on the reference."""
        windows = max(config.windows, 1)
        current = max(config.checkpoint_turn, config.checkpoint_every, 1)
        early = max(config.reattune_checkpoint_turn, 1)
        late = max(config.late_profile_turns, 1)
        ring = max(config.recent_event_ids, 1)
        supported = (config.windows >= 1 and config.checkpoint_every >= 1
                     and config.checkpoint_turn >= 1 and config.late_profile_turns >= 1
                     and config.recent_event_ids >= 1 and config.reattune_checkpoint_turn >= 0)
        t_current = windows * 2 * N_FEATURES
        t_early = t_current + current * N_FEATURES
        t_late = t_early + early * N_FEATURES
        t_width = t_late + late * N_FEATURES
        geom = np.array([windows, current, early, late, ring, t_current, t_early, t_late,
                         config.checkpoint_turn, config.checkpoint_every,
                         config.reattune_checkpoint_turn, config.high_resonance_turns],
                        dtype=np.int64)
        params = np.array([config.idle_timeout_s, config.high_resonance], dtype=np.float64)
        return Geometry(windows, current, early, late, ring, supported, t_current, t_early,
                        t_late, t_width, I_WINDOW_N + windows, geom, params)

    @staticmethod
    def total_at(window: int) -> int:
        """Offset in the turn row of window ``window``'s sums (its squares follow).

        >>> Geometry.total_at(1)
        12
        """
        return window * 2 * N_FEATURES


class TurnRows:
    """The open sessions' turn rows (``tcols``): given to a slot at a session's start, taken
    back at its end, grown by a quarter (at least 16 rows) when none is free.

    >>> rows = TurnRows(4)
    >>> rows.give(), rows.give(), rows.tcols.shape
    (0, 1, (16, 4))
    >>> rows.take_back(0); rows.give()
    0
    """

    def __init__(self, width: int) -> None:
        self.tcols: npt.NDArray[np.float64] = np.zeros((0, width), np.float64)
        self._free: list[int] = []

    def give(self) -> int:
        if not self._free:
            old = self.tcols.shape[0]
            more = max(old // 4, 16)
            self.tcols = np.pad(self.tcols, ((0, more), (0, 0)))
            self._free = list(range(old + more - 1, old - 1, -1))
        return self._free.pop()

    def take_back(self, row: int) -> None:
        self._free.append(row)


Saved = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64],
              npt.NDArray[np.uint64]]
"""Slots' rows (of ``icols``, ``fcols``, the turn row and ``rings``) as the kernel saved them."""


class SavedRows:
    """Rows for the kernel to save slots in before an event whose rest is its caller's, who
    puts one back if that raises: one per user of a pass at most, grown as a batch needs.

    >>> rows = SavedRows(Geometry.of(DriftConfig()))
    >>> [a.shape[0] for a in rows.at_least(40)], rows.at_least(3)[2].shape
    ([40, 40, 40, 40], (40, 114))
    """

    def __init__(self, g: Geometry) -> None:
        self._g = g
        self.arrays: Saved = self._rows(16)

    def _rows(self, n: int) -> Saved:
        g = self._g
        return (np.zeros((n, g.i_width), np.int64), np.zeros((n, F_WIDTH), np.float64),
                np.zeros((n, g.t_width), np.float64), np.zeros((n, g.ring), np.uint64))

    def at_least(self, users: int) -> Saved:
        if len(self.arrays[0]) < users:
            self.arrays = self._rows(max(users, 2 * len(self.arrays[0])))
        return self.arrays
