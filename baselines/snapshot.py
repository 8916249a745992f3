"""The persisted shape of a user's state, versioned.

A snapshot is msgpack. Version 1 is what the first release wrote: the in-memory
state encoded as a map, field by field, with no version (:mod:`baselines.snapshot_v1`
reads it). From version 2 on a
snapshot is an array whose first element is its version, so any reader can tell
what it holds; its layout is :class:`UserSnapshot` and never follows the
in-memory types by accident. :func:`decode_state` reads every version.

Version 3 packs the open session's numbers (SPEC 11: at most 2 KB encoded per user). Its
window sums are one string of doubles, and its turn rows are kept once each: the current
look, the early window and the late profile are mostly the same turns (the late profile is
the current look's tail), so the distinct rows are one string of doubles and each list is a
string of indices into them. Doubles are stored bit for bit (little-endian), so a state
round-trips exactly.

A checkpoint encodes most of its states from the kernel's columns (:func:`encode_taken`),
without the state objects: the same bytes as :func:`encode_state` of each.
"""

from __future__ import annotations

import struct
import sys
from typing import TYPE_CHECKING, Generic, TypeVar

import msgspec

from baselines.snapshot_v1 import V1User, from_v1
from drift.ladder import LadderState
from drift.model import FEATURES, BaselineKind, Mode, ModelTriple, Tier
from drift.state import (
    Guard,
    ModelChangeProgress,
    RecentEvents,
    Row,
    SessionState,
    TurnLog,
    UserState,
    WindowSums,
)

if TYPE_CHECKING:  # the columns are read by attribute: no import of the kernel at run time
    from drift.kernel.parts import TakenSlots

VERSION = 3
_MSGPACK_MAPS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}



class _Window(msgspec.Struct, array_like=True, frozen=True):
    """Version 2's window sums."""

    n: int
    total: Row
    squares: Row


class _Windows(msgspec.Struct, array_like=True, frozen=True):
    """Version 3's window sums: each window's count, and their totals then squares as one
    string of doubles, without the trailing windows whose sums are all zero bytes (the
    windows a session has not reached yet); a reader pads it with zero bytes."""

    n: tuple[int, ...]
    sums: bytes


class _Rows(msgspec.Struct, array_like=True, frozen=True):
    """Version 3's turn rows: the distinct rows of the session's log as one string of
    doubles, in the order first met, and the current look's indices into them."""

    rows: bytes
    current: bytes


W = TypeVar("W", tuple[_Window, ...], _Windows)
C = TypeVar("C", tuple[Row, ...], _Rows)
R = TypeVar("R", tuple[Row, ...], bytes)


class _Session(msgspec.Struct, Generic[W, C, R], array_like=True, frozen=True):
    """An open session. Version 2 holds its turn log as it is in memory
    (:data:`_V2Session`); version 3 packs it (:data:`_V3Session`): the early window and
    the late profile are indices into the rows ``current_rows`` holds."""

    session_id: str
    mode: Mode
    started_s: float
    last_s: float
    model: tuple[str, str, str, str | None]
    safety: tuple[str, str, str]
    ephemeral: bool
    foldable: bool
    n_turns: int
    looks: int
    windows: W
    current_rows: C
    early_rows: R
    late_rows: R
    referenced: dict[str, str]
    affirmed: dict[str, str]
    blocking: tuple[str, ...]
    high_res_streak: int
    high_res_block: bool
    model_change: tuple[bool, bool, bool, bool, bool]
    scores: int
    max_tier: Tier
    reattune_quality: float | None


_V2Session = _Session[tuple[_Window, ...], tuple[Row, ...], tuple[Row, ...]]
_V3Session = _Session[_Windows, _Rows, bytes]
S = TypeVar("S", _V2Session, _V3Session)


class UserSnapshot(msgspec.Struct, Generic[S], array_like=True, frozen=True):
    """One user's state, as stored in DuckDB and in a changelog: version 3, or version 2
    (``UserSnapshot[_V2Session]``), which differs in its open session only."""

    version: int
    user_id: str
    mode: Mode | None
    clock_s: float
    last_used_s: float
    recent: bytes
    session: S | None
    session_tier: Tier
    prompted: bool
    hold: bool
    hold_kinds: tuple[BaselineKind, ...]
    hold_cause: str
    reattune_required: bool
    low_streak: int
    escalated: bool
    durable: bool
    rebaseline_attunement: bool


class _Version(msgspec.Struct, array_like=True, frozen=True):
    """A snapshot's first element (from version 2 on); the rest is skipped."""

    version: int


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(UserSnapshot[_V3Session])
_v2_decoder = msgspec.msgpack.Decoder(UserSnapshot[_V2Session])
_version_decoder = msgspec.msgpack.Decoder(_Version)
_ROW = struct.Struct(f"<{len(FEATURES)}d")
_SUMS = struct.Struct(f"<{2 * len(FEATURES)}d")


def _session_snapshot(s: SessionState, last_s: float, guard: tuple[tuple[str, ...], int, bool],
                      n_turns: int, windows: _Windows, rows: tuple[_Rows, bytes, bytes]
                      ) -> _V3Session:
    """``s`` with the parts given: from the state itself (:func:`_session_of`), or from the
    columns that hold them newer (:func:`encode_taken`)."""
    m, mc = s.model, s.model_change
    return _Session(
        s.session_id, s.mode, s.started_s, last_s,
        (m.model_version, m.tokenizer_id, m.precision_tag, m.adapter_id), s.safety,
        s.ephemeral, s.foldable, n_turns, s.turns.looks, windows, *rows,
        dict(s.referenced), dict(s.affirmed), *guard,
        (mc.detected, mc.notice_shown, mc.reattune_done, mc.reattune_completed,
         mc.disclosure_checked),
        s.scores, s.max_tier, s.reattune_quality)


def _session_of(s: SessionState) -> _V3Session:
    t, g = s.turns, s.guard
    return _session_snapshot(
        s, s.last_s, (g.blocking, g.high_res_streak, g.high_res_block), t.n_turns,
        _Windows(tuple(w.n for w in t.windows),
                 _without_zero_tail(b"".join(_SUMS.pack(*w.total, *w.squares)
                                             for w in t.windows))),
        _packed_rows(t))


def _packed_rows(t: TurnLog) -> tuple[_Rows, bytes, bytes]:
    """The log's distinct rows (bit for bit) with the current look's indices, and the
    early window's and the late profile's indices."""
    rows: dict[bytes, int] = {}
    parts = [[rows.setdefault(_ROW.pack(*row), len(rows)) for row in part]
             for part in (t.current_rows, t.early_rows, t.late_rows)]
    width = _index_width(len(rows))
    current, early, late = (bytes(part) if width == 1
                            else b"".join(i.to_bytes(width, "little") for i in part)
                            for part in parts)
    return _Rows(b"".join(rows), current), early, late


def _without_zero_tail(sums: bytes) -> bytes:
    """``sums`` less its trailing windows of zero bytes only.

    >>> _without_zero_tail(_SUMS.pack(*[1.0] * 12) + bytes(_SUMS.size)) == _SUMS.pack(*[1.0] * 12)
    True
    >>> _without_zero_tail(_SUMS.pack(*[0.0] * 11, 1.0) + bytes(_SUMS.size)) == _SUMS.pack(
    ...     *[0.0] * 11, 1.0)
    True
    """
    kept = -(-len(sums.rstrip(b"\0")) // _SUMS.size)  # the windows up to the last non-zero byte
    return sums[:kept * _SUMS.size]


def _index_width(distinct: int) -> int:
    """Bytes per index into ``distinct`` rows: one up to 256, two beyond (a session whose
    checkpoints are configured hundreds of turns apart).

    >>> _index_width(256), _index_width(257)
    (1, 2)
    """
    return 1 if distinct <= 256 else 2


def _indexed(rows: list[Row], part: bytes) -> tuple[Row, ...]:
    width = _index_width(len(rows))
    if width == 1:
        return tuple(rows[i] for i in part)
    return tuple(rows[int.from_bytes(part[k:k + width], "little")]
                 for k in range(0, len(part), width))


def _turns(s: _V2Session | _V3Session) -> TurnLog:
    if isinstance(s.windows, tuple):  # version 2: as in memory
        return TurnLog(s.n_turns, s.looks, tuple(WindowSums(w.n, w.total, w.squares)
                                                  for w in s.windows),
                       s.current_rows, s.early_rows, s.late_rows)
    k = len(FEATURES)
    windows = tuple(WindowSums(n, v[:k], v[k:])
                    for n, v in zip(s.windows.n, _SUMS.iter_unpack(
                        s.windows.sums.ljust(len(s.windows.n) * _SUMS.size, b"\0")),
                                    strict=True))
    rows = list(_ROW.iter_unpack(s.current_rows.rows))
    return TurnLog(s.n_turns, s.looks, windows, _indexed(rows, s.current_rows.current),
                   _indexed(rows, s.early_rows), _indexed(rows, s.late_rows))


def _session_state(s: _V2Session | _V3Session) -> SessionState:
    # As the fold holds them: the ids of the safety check, the stances and kinds shared
    # between users (interned), a commitment's id shared by the two maps that name it.
    safety = (sys.intern(s.safety[0]), sys.intern(s.safety[1]), sys.intern(s.safety[2]))
    referenced = {cid: sys.intern(stance) for cid, stance in s.referenced.items()}
    ids = {cid: cid for cid in referenced}
    affirmed = {ids.get(cid, cid): sys.intern(kind) for cid, kind in s.affirmed.items()}
    return SessionState(
        s.session_id, s.mode, s.started_s, s.last_s, ModelTriple(*s.model), safety,
        s.ephemeral, _turns(s), s.foldable, Guard(s.blocking, s.high_res_streak, s.high_res_block),
        ModelChangeProgress(*s.model_change), referenced, affirmed, s.scores, s.max_tier,
        s.reattune_quality)


def encode_state(state: UserState) -> bytes:
    """The current snapshot version of ``state``.

    >>> blob = encode_state(UserState("u1", Mode.FULL, clock_s=5.0, durable=True))
    >>> decode_state(blob) == UserState("u1", Mode.FULL, clock_s=5.0, durable=True)
    True
    """
    return _encoder.encode(_user_snapshot(
        state, state.clock_s, state.recent.ring,
        _session_of(state.session) if state.session is not None else None))


def _user_snapshot(state: UserState, clock_s: float, ring: bytes, session: _V3Session | None
                   ) -> UserSnapshot[_V3Session]:
    lad = state.ladder
    return UserSnapshot(
        VERSION, state.user_id, state.mode, clock_s, state.last_used_s, ring, session,
        lad.session_tier, lad.prompted, lad.hold,
        tuple(sorted(lad.hold_kinds, key=lambda k: k.value)), lad.hold_cause,
        state.reattune_required, state.low_streak, state.escalated, state.durable,
        state.rebaseline_attunement)


def encode_taken(taken: TakenSlots) -> list[bytes]:
    """The current snapshot version of each state in ``taken``, the users' states as the
    columns held them (:func:`drift.kernel.parts.take_slots`): byte for byte
    :func:`encode_state` of the state built from the slot, without building it.

    >>> from drift.kernel import UserColumns
    >>> from drift.kernel.parts import take_slots
    >>> from drift.model import DriftConfig
    >>> from drift.state import RecentEvents
    >>> cols = UserColumns(DriftConfig())
    >>> state = UserState("u", Mode.FULL, clock_s=5.0, durable=True,
    ...                   recent=RecentEvents().remember("e1", 128))
    >>> cols.states["u"] = state
    >>> cols.strip("u")
    >>> encode_taken(take_slots(cols, ["u"])[0]) == [encode_state(state)]
    True
    """
    sums = taken.sums.astype("<f8", copy=False).tobytes()
    distinct = taken.distinct.astype("<f8", copy=False).tobytes()
    index = taken.index.astype("<u2", copy=False).tobytes()
    s_width, d_width, i_width = (taken.sums.shape[1] * 8, taken.distinct.shape[1] * 8,
                                 taken.index.shape[1] * 2)
    at_current, at_early, at_late = (2 * k for k in taken.index_at)
    out = []
    for i, state in enumerate(taken.shells):
        session = state.session
        snapshot = None
        if session is not None and taken.in_columns[i]:
            n_current, n_early, n_late = taken.counts[i]
            n_distinct = taken.n_distinct[i]
            idx = index[i * i_width:(i + 1) * i_width]
            parts = (idx[at_current:at_current + 2 * n_current],
                     idx[at_early:at_early + 2 * n_early], idx[at_late:at_late + 2 * n_late])
            if _index_width(n_distinct) == 1:  # the low byte of each little-endian index
                parts = (parts[0][::2], parts[1][::2], parts[2][::2])
            rows = distinct[i * d_width:i * d_width + n_distinct * _ROW.size]
            snapshot = _session_snapshot(
                session, taken.last_s[i], (taken.blocking[i], taken.streaks[i],
                                           taken.high_res[i]), taken.n_turns[i],
                _Windows(tuple(taken.window_n[i]),
                         _without_zero_tail(sums[i * s_width:(i + 1) * s_width])),
                (_Rows(rows, parts[0]), parts[1], parts[2]))
        elif session is not None:
            snapshot = _session_of(session)
        out.append(_encoder.encode(_user_snapshot(state, taken.clocks[i], taken.rings[i],
                                                  snapshot)))
    return out


def decode_state(data: bytes) -> UserState:
    """A state from a snapshot of any version."""
    if data[:1] and data[0] in _MSGPACK_MAPS:
        return from_v1(msgspec.msgpack.decode(data, type=V1User))
    version = _version_decoder.decode(data).version
    if version > VERSION:
        raise ValueError(f"user state snapshot version {version} is newer than this "
                         f"release reads ({VERSION}); upgrade the worker")
    snap = _v2_decoder.decode(data) if version == 2 else _decoder.decode(data)
    return UserState(
        snap.user_id, snap.mode, snap.clock_s, snap.last_used_s, RecentEvents(snap.recent),
        _session_state(snap.session) if snap.session is not None else None,
        LadderState(snap.session_tier, snap.prompted, snap.hold, frozenset(snap.hold_kinds),
                    snap.hold_cause),
        snap.reattune_required, snap.low_streak, snap.escalated, snap.durable,
        snap.rebaseline_attunement)
