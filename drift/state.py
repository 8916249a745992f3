"""The per-user state the fold carries between events: frozen values, bounded in size.

:class:`UserState` is what a worker keeps about one user; the fold never changes
one in place, it returns the next. Each part belongs to one concern: the turn log
to scoring, the guard to the governance audit, :class:`ModelChangeProgress` to the
model-change protocol, the ladder to the responses.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from drift import ladder
from drift.evolve import evolve, fast_init
from drift.features import WindowStats
from drift.model import FEATURES, DriftConfig, Mode, ModelTriple, Tier

Row = tuple[float, ...]
if len(FEATURES) != 6:  # WindowSums.add names each of the six
    raise ImportError("drift.state.WindowSums.add is written for six features")
_HASH_BYTES = 8


_BLANK = hashlib.blake2b(digest_size=_HASH_BYTES)  # copied: cheaper than a new one's arguments


def event_hash(event_id: str) -> bytes:
    """The 64-bit fingerprint the dedupe window keeps of an event id (BLAKE2b, 8 bytes).

    >>> event_hash("e1").hex(), hashlib.blake2b(b"e1", digest_size=8).hexdigest()
    ('1b5d5e51f54f0f04', '1b5d5e51f54f0f04')
    """
    h = _BLANK.copy()
    h.update(event_id.encode("utf-8"))
    return h.digest()


def event_hashes(event_ids: Iterable[str]) -> bytes:
    """:func:`event_hash` of each id, joined: a batch's fingerprints in one loop.

    >>> event_hashes(["e1", "e2"]) == event_hash("e1") + event_hash("e2")
    True
    """
    copy = _BLANK.copy
    out = []
    for event_id in event_ids:
        h = copy()
        h.update(event_id.encode("utf-8"))
        out.append(h.digest())
    return b"".join(out)


@fast_init
@dataclass(frozen=True, slots=True)
class RecentEvents:
    """The last ``size`` event ids of a user, as fixed-size fingerprints, oldest first.

    >>> r = RecentEvents().remember("e1", 2).remember("e2", 2)
    >>> r.seen("e1"), r.remember("e3", 2).seen("e1"), len(r.ring)
    (True, False, 16)
    """

    ring: bytes = b""

    def seen(self, event_id: str) -> bool:
        return self.holds(event_hash(event_id))

    def holds(self, fingerprint: bytes) -> bool:
        i = self.ring.find(fingerprint)
        while i != -1 and i % _HASH_BYTES:
            i = self.ring.find(fingerprint, i + 1)
        return i != -1

    def remember(self, event_id: str, size: int) -> RecentEvents:
        return self.keep(event_hash(event_id), size)

    def keep(self, fingerprint: bytes, size: int) -> RecentEvents:
        ring = self.ring
        if len(ring) >= size * _HASH_BYTES:
            ring = ring[len(ring) - (size - 1) * _HASH_BYTES:]
        return RecentEvents(ring + fingerprint)


@fast_init
@dataclass(frozen=True, slots=True)
class WindowSums:
    """Running sums of one turn window, on the transformed scale, for the six features."""

    n: int = 0
    total: Row = (0.0,) * len(FEATURES)
    squares: Row = (0.0,) * len(FEATURES)

    def add(self, row: Row) -> WindowSums:
        """
        >>> WindowSums().add((1.0,) * 6).add((3.0,) * 6).stats([0])
        WindowStats(n=2, mean=array('d', [2.0]), m2=array('d', [2.0]))
        """
        # Unpacked by name: three times faster than map() over six values, and read per turn.
        t0, t1, t2, t3, t4, t5 = self.total
        s0, s1, s2, s3, s4, s5 = self.squares
        r0, r1, r2, r3, r4, r5 = row
        return WindowSums(self.n + 1, (t0 + r0, t1 + r1, t2 + r2, t3 + r3, t4 + r4, t5 + r5),
                          (s0 + r0 * r0, s1 + r1 * r1, s2 + r2 * r2, s3 + r3 * r3,
                           s4 + r4 * r4, s5 + r5 * r5))

    def stats(self, idx: list[int]) -> WindowStats | None:
        n = self.n
        if n == 0:
            return None
        total, squares = self.total, self.squares
        mean = array("d", [total[j] / n for j in idx])
        m2 = array("d", [max(0.0, squares[j] - n * m * m) for j, m in zip(idx, mean)])
        return WindowStats(n, mean, m2)


@fast_init
@dataclass(frozen=True)
class TurnLog:
    """A session's turn dynamics as scoring and re-attunement need them."""

    n_turns: int = 0
    looks: int = 0
    windows: tuple[WindowSums, ...] = ()
    current_rows: tuple[Row, ...] = ()
    early_rows: tuple[Row, ...] = ()
    late_rows: tuple[Row, ...] = ()

    @staticmethod
    def start(config: DriftConfig) -> TurnLog:
        return TurnLog(windows=(WindowSums(),) * config.windows)

    def add(self, row: Row, config: DriftConfig) -> TurnLog:
        """The log with one more turn: into its checkpoint window, the current look,
        the early window (re-attunement; emptied past its turn) and the late profile.

        >>> log = TurnLog.start(DriftConfig())
        >>> for _ in range(7):
        ...     log = log.add((0.5,) * 6, DriftConfig())
        >>> log.n_turns, [w.n for w in log.windows], len(log.early_rows), len(log.late_rows)
        (7, [5, 2, 0], 0, 3)
        """
        n = self.n_turns + 1
        w = min((n - 1) // config.checkpoint_every, config.windows - 1)
        windows = self.windows[:w] + (self.windows[w].add(row),) + self.windows[w + 1:]
        # The early rows are read at the re-attunement turn only: let go of them after it.
        early = self.early_rows + (row,) if n <= config.reattune_checkpoint_turn else ()
        late = (self.late_rows + (row,))[-config.late_profile_turns:]
        return TurnLog(n, self.looks, windows, self.current_rows + (row,), early, late)

    def looked(self) -> TurnLog:
        """The log after a checkpoint: the next look starts with no turns of its own."""
        return evolve(self, looks=self.looks + 1, current_rows=())


@fast_init
@dataclass(frozen=True, slots=True)
class Guard:
    """The session's blocking states for relational writes (SPEC section 6)."""

    blocking: tuple[str, ...] = ()
    high_res_streak: int = 0
    high_res_block: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class ModelChangeProgress:
    """Where a session stands in the model-change protocol (SPEC section 5)."""

    detected: bool = False
    notice_shown: bool = False
    reattune_done: bool = False
    reattune_completed: bool = False
    disclosure_checked: bool = False


@dataclass(frozen=True)
class SessionState:
    session_id: str
    mode: Mode
    started_s: float
    last_s: float
    model: ModelTriple
    safety: tuple[str, str, str]
    ephemeral: bool
    turns: TurnLog
    foldable: bool = True
    guard: Guard = Guard()
    model_change: ModelChangeProgress = ModelChangeProgress()
    referenced: Mapping[str, str] = field(default_factory=dict)
    affirmed: Mapping[str, str] = field(default_factory=dict)
    scores: int = 0
    max_tier: Tier = Tier.LOW
    reattune_quality: float | None = None

    @property
    def summarized(self) -> bool:
        """Whether the review API keeps a summary of this session."""
        return not self.ephemeral and self.mode.keeps_baselines


@dataclass(frozen=True)
class UserState:
    """Everything the service keeps about one user between events (bounded in size)."""

    user_id: str
    mode: Mode | None = None
    clock_s: float = 0.0
    last_used_s: float = 0.0
    recent: RecentEvents = RecentEvents()
    session: SessionState | None = None
    ladder: ladder.LadderState = field(default_factory=ladder.initial)
    reattune_required: bool = False
    low_streak: int = 0
    escalated: bool = False
    durable: bool = False
    rebaseline_attunement: bool = False

    @property
    def persistable(self) -> bool:
        """Whether anything about this user may be written to disk (SPEC section 3).

        Only users in a baselining mode who have had a session that was not
        ephemeral; never while an ephemeral session is open.

        >>> UserState("u").persistable, UserState("u", Mode.FULL, durable=True).persistable
        (False, True)
        """
        if not self.durable or self.mode is None or not self.mode.keeps_baselines:
            return False
        return self.session is None or not self.session.ephemeral

    @property
    def memory_only(self) -> bool:
        """Whether nothing of this user may outlive the process: a mode that keeps no
        baselines, or no session yet that was not ephemeral. Such a user is kept only while
        a session is open (:func:`drift.fold.step`, :func:`drift.fold.sweep`), and after a
        crash rebuilt from the log alone. A durable user in an ephemeral session is not
        memory-only: their state from before it stays stored.

        >>> UserState("u").memory_only, UserState("u", Mode.FULL, durable=True).memory_only
        (True, False)
        """
        return not (self.durable and self.mode is not None and self.mode.keeps_baselines)

    def open_session(self, session_id: str) -> SessionState | None:
        """The open session if it is ``session_id``."""
        s = self.session
        return s if s is not None and s.session_id == session_id else None
