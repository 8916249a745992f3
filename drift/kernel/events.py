"""A batch of FHR events as columns, in the order the kernel reads them.

Everything the kernel needs of an event is a number: its user's slot, its kind,
event time, the 64-bit fingerprint of its id (:func:`drift.state.event_hash`), its
session's number (:meth:`~drift.kernel.columns.UserColumns.session_code`), its flags
(ephemeral; a turn's blocking states and reflection) and, for a turn, its six dynamics through
:func:`drift.features.transform_turn` (computed here by the reference function, so
the kernel adds the very floats the fold would).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from drift.features import transform_turn
from drift.governance import BLOCKING_SEVERITIES
from drift.kernel.columns import UserColumns
from drift.kernel.layout import (
    EV_EPHEMERAL,
    EV_RANK_SHIFT,
    EV_REFLECTION,
    EV_START,
    KIND_END,
    KIND_MAY_ERASE,
    KIND_OTHER,
    KIND_SIDE,
    KIND_START,
    KIND_TURN,
    N_FEATURES,
)
from drift.model import (
    FhrEvent,
    MemoryErase,
    MemoryWrite,
    MemoryWriteBlocked,
    ModeChanged,
    NoticeShown,
    Semantic,
    SessionEnd,
    SessionStart,
    Turn,
)
from drift.state import event_hashes

_NO_ROW = (0.0,) * N_FEATURES
_MAY_ERASE = (SessionStart, MemoryErase, ModeChanged)
_SIDE = (Semantic, NoticeShown, MemoryWrite, MemoryWriteBlocked)
_AE, _CARE_OVERRIDE, _CARE_COOLOFF, _CRISIS, _LEGAL_HOLD = 2, 4, 8, 16, 32


def _kind(body: object, ephemeral: bool) -> int:
    """The kind of an event other than a turn. A session's start and end are the kernel's
    only where they keep their user stored (not ephemeral; a start in a baselining mode:
    :func:`drift.kernel.batch._start`): the reference's step keeps or stages the others
    its own way.

    >>> from drift.model import Mode, ModelTriple
    >>> start = SessionStart(Mode.FULL, "c", ModelTriple("m", "t", "p"), "g", "p")
    >>> _kind(start, False) == KIND_START, _kind(start, True) == KIND_MAY_ERASE
    (True, True)
    """
    if not ephemeral:
        if isinstance(body, SessionStart) and body.mode.keeps_baselines:
            return KIND_START
        if isinstance(body, SessionEnd):
            return KIND_END
    if isinstance(body, _MAY_ERASE):
        return KIND_MAY_ERASE
    return KIND_SIDE if isinstance(body, _SIDE) else KIND_OTHER


@dataclass
class EventColumns:
    """One batch's events as arrays (``status`` is the kernel's output, one per event)."""

    slots: npt.NDArray[np.int64]
    kinds: npt.NDArray[np.int64]
    ts_s: npt.NDArray[np.float64]
    fingerprints: npt.NDArray[np.uint64]
    sessions: npt.NDArray[np.int64]
    flags: npt.NDArray[np.int64]
    rows: npt.NDArray[np.float64]
    user: npt.NDArray[np.int64]
    """Per event, its user's number within the batch (0 to :attr:`users` - 1)."""
    status: npt.NDArray[np.int8]
    parked: npt.NDArray[np.int64]
    """Per user of the batch, the kernel's pass that parked them (0: none yet)."""
    save: npt.NDArray[np.int64]
    """Per event the kernel saved a slot before, the row it saved it in."""
    slot_list: list[int]
    users: int

    @staticmethod
    def of(columns: UserColumns, events: Sequence[FhrEvent]) -> EventColumns:
        """Columns of ``events``; gives each new user a slot and numbers the sessions.

        >>> from drift.model import DriftConfig
        >>> e = FhrEvent("e1", "turn", 5.0, "u", "s", False, Turn.neutral(1, crisis=True))
        >>> ev = EventColumns.of(UserColumns(DriftConfig()), [e])
        >>> ev.kinds.tolist(), ev.flags.tolist(), ev.rows.shape
        ([0], [16], (1, 6))
        """
        slots, sessions = columns.begin_batch([e.user_id for e in events],
                                              [e.session_id for e in events])
        kinds: list[int] = []
        flags: list[int] = []
        rows: list[float] = []  # flat: a 2-D array from one list of floats is built faster
        for e in events:
            body = e.body
            f = EV_EPHEMERAL if e.ephemeral else 0
            if type(body) is Turn:
                try:
                    row = transform_turn(body)
                except Exception:  # noqa: BLE001 - the reference raises on it, and says so
                    kinds.append(KIND_OTHER)
                    rows += _NO_ROW
                    flags.append(f)
                    continue
                kinds.append(KIND_TURN)
                rows += row
                if body.ae_severity in BLOCKING_SEVERITIES:
                    f |= _AE
                if body.care_override:
                    f |= _CARE_OVERRIDE
                if body.care_cooloff:
                    f |= _CARE_COOLOFF
                if body.crisis:
                    f |= _CRISIS
                if body.legal_hold:
                    f |= _LEGAL_HOLD
                if body.reflection:
                    f |= EV_REFLECTION
            else:
                kinds.append(_kind(body, e.ephemeral))
                rows += _NO_ROW
                if type(body) is SessionStart:  # whether it may erase is read in the columns
                    f |= EV_START | body.mode.rank << EV_RANK_SHIFT
            flags.append(f)
        for s in set(slots):
            columns.bind_session(s)
        n = len(slots)
        fps = np.frombuffer(event_hashes([e.event_id for e in events]), dtype="<u8")
        slot_array = np.array(slots, dtype=np.int64)
        distinct, user = np.unique(slot_array, return_inverse=True)
        return EventColumns(
            slot_array, np.array(kinds, dtype=np.int64),
            np.array([e.ts_s for e in events], dtype=np.float64), fps.astype(np.uint64),
            np.array(sessions, dtype=np.int64), np.array(flags, dtype=np.int64),
            np.array(rows, dtype=np.float64).reshape(n, N_FEATURES),
            user.astype(np.int64).reshape(n), np.zeros(n, dtype=np.int8),
            np.zeros(len(distinct), dtype=np.int64), np.zeros(n, dtype=np.int64), slots,
            len(distinct))

    def arrays(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                              npt.NDArray[np.float64], npt.NDArray[np.uint64],
                              npt.NDArray[np.int64], npt.NDArray[np.int64],
                              npt.NDArray[np.float64], npt.NDArray[np.int64],
                              npt.NDArray[np.int8], npt.NDArray[np.int64],
                              npt.NDArray[np.int64]]:
        """The event arrays in the kernel's argument order."""
        return (self.slots, self.kinds, self.ts_s, self.fingerprints, self.sessions,
                self.flags, self.rows, self.user, self.status, self.parked, self.save)
