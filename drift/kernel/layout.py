"""Where each part of a user's kernel state sits in the columns, and the event codes.

A user's slot is one row in each of three arrays: ``icols`` (int64: counts, flags,
the guard's streak), ``fcols`` (float64: the clock, the open session's last event
time, the expiry hint, the open session's start, then the turn log's window sums and
row buffers) and ``rings`` (uint64: the dedupe ring of event-id fingerprints). :class:`Geometry`
holds the offsets a configuration gives the float row, and the two small arrays
the kernel reads them from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from drift.model import FEATURES, DriftConfig

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
I_WINDOW_N = 10  # WindowSums.n of each window, then nothing after
# fcols: one float64 row per slot; the turn log's parts follow at Geometry's offsets.
F_CLOCK = 0
F_LAST = 1  # SessionState.last_s
F_EXPIRE = 2  # no baseline can be past its TTL before this event time
F_STARTED = 3  # SessionState.started_s (a memory-only user's older events are not theirs)
F_WINDOWS = 4

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
KIND_SIDE = 3  # semantic, model_change_notice_shown, memory_write_blocked: no effects, and
# of the open session only fields the columns do not hold change (drift.fold.dispatch)
EV_EPHEMERAL = 1
EV_BLOCKING_SHIFT = 1  # BLOCKING_NAMES bits start at bit 1 of an event's flags
EV_REFLECTION = 64

# Kernel results per event.
ST_PENDING = 0
ST_APPLIED = 1
ST_DUPLICATE = 2
ST_SIDE = 3  # taken; its change to the open session's other fields is the caller's to make
ST_SCORED = 4  # a checkpoint or re-attunement turn, taken; the caller scores it next

#: A baseline can be past its TTL from one second before its hint: a margin far wider than
#: the rounding of ``now - used > ttl`` at epoch seconds, so the kernel only ever hands off
#: early (the reference then decides exactly).
EXPIRY_SLACK_S = 1.0


@dataclass(frozen=True)
class Geometry:
    """The shape of a slot under one configuration.

    >>> g = Geometry.of(DriftConfig())
    >>> g.windows, g.current, g.early, g.late, g.ring, g.supported
    (3, 5, 5, 3, 128, True)
    >>> g.f_current, g.f_early, g.f_late, g.f_width, g.i_width
    (40, 70, 100, 118, 13)
    """

    windows: int
    current: int
    early: int
    late: int
    ring: int
    supported: bool
    f_current: int
    f_early: int
    f_late: int
    f_width: int
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
        f_current = F_WINDOWS + windows * 2 * N_FEATURES
        f_early = f_current + current * N_FEATURES
        f_late = f_early + early * N_FEATURES
        f_width = f_late + late * N_FEATURES
        geom = np.array([windows, current, early, late, ring, f_current, f_early, f_late,
                         config.checkpoint_turn, config.checkpoint_every,
                         config.reattune_checkpoint_turn, config.high_resonance_turns],
                        dtype=np.int64)
        params = np.array([config.idle_timeout_s, config.high_resonance], dtype=np.float64)
        return Geometry(windows, current, early, late, ring, supported, f_current, f_early,
                        f_late, f_width, I_WINDOW_N + windows, geom, params)

    def total_at(self, window: int) -> int:
        """Offset in the float row of window ``window``'s sums (its squares follow).

        >>> Geometry.of(DriftConfig()).total_at(1)
        16
        """
        return F_WINDOWS + window * 2 * N_FEATURES
