"""The persisted shape of a user's state, versioned, and the state of the first release.

A snapshot is msgpack. Version 1 is what the first release wrote: the in-memory
state encoded as a map, field by field, with no version. From version 2 on a
snapshot is an array whose first element is its version, so any reader can tell
what it holds; its layout is :class:`UserSnapshot` and never follows the
in-memory types by accident. :func:`decode_state` reads every version.

Version 3 packs the open session's numbers (SPEC 11: at most 2 KB encoded per user). Its
window sums are one string of doubles, and its turn rows are kept once each: the current
look, the early window and the late profile are mostly the same turns (the late profile is
the current look's tail), so the distinct rows are one string of doubles and each list is a
string of indices into them. Doubles are stored bit for bit (little-endian), so a state
round-trips exactly.
"""

from __future__ import annotations

import struct
import sys
from typing import Generic, TypeVar

import msgspec

from drift.ladder import LadderState
from drift.model import FEATURES, BaselineKind, Mode, ModelTriple, Tier
from drift.state import (
    Guard,
    ModelChangeProgress,
    RecentEvents,
    SessionState,
    TurnLog,
    UserState,
    WindowSums,
)

VERSION = 3
_MSGPACK_MAPS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}

Row = tuple[float, ...]


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


def _session_snapshot(s: SessionState) -> _V3Session:
    m, t, mc = s.model, s.turns, s.model_change
    return _Session(
        s.session_id, s.mode, s.started_s, s.last_s,
        (m.model_version, m.tokenizer_id, m.precision_tag, m.adapter_id), s.safety,
        s.ephemeral, s.foldable, t.n_turns, t.looks,
        _Windows(tuple(w.n for w in t.windows),
                 _without_zero_tail(b"".join(_SUMS.pack(*w.total, *w.squares)
                                             for w in t.windows))),
        *_packed_rows(t), dict(s.referenced), dict(s.affirmed), s.guard.blocking,
        s.guard.high_res_streak, s.guard.high_res_block,
        (mc.detected, mc.notice_shown, mc.reattune_done, mc.reattune_completed,
         mc.disclosure_checked),
        s.scores, s.max_tier, s.reattune_quality)


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
    """
    n = len(sums)
    while n and not any(sums[n - _SUMS.size:n]):
        n -= _SUMS.size
    return sums[:n]


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
    lad = state.ladder
    return _encoder.encode(UserSnapshot(
        VERSION, state.user_id, state.mode, state.clock_s, state.last_used_s, state.recent.ring,
        _session_snapshot(state.session) if state.session is not None else None,
        lad.session_tier, lad.prompted, lad.hold,
        tuple(sorted(lad.hold_kinds, key=lambda k: k.value)), lad.hold_cause,
        state.reattune_required, state.low_streak, state.escalated, state.durable,
        state.rebaseline_attunement))


def decode_state(data: bytes) -> UserState:
    """A state from a snapshot of any version."""
    if data[:1] and data[0] in _MSGPACK_MAPS:
        return _from_v1(msgspec.msgpack.decode(data, type=_V1User))
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


# ------------------------------------------------------------------ version 1 (first release)


class _V1Model(msgspec.Struct):
    model_version: str
    tokenizer_id: str
    precision_tag: str
    adapter_id: str | None = None


class _V1Window(msgspec.Struct):
    n: int
    total: list[float]
    squares: list[float]


class _V1Session(msgspec.Struct):
    session_id: str
    mode: Mode
    started_s: float
    last_s: float
    model: _V1Model
    safety: tuple[str, str, str]
    ephemeral: bool
    foldable: bool
    n_turns: int
    looks: int
    windows: list[_V1Window]
    current_rows: list[Row]
    early_rows: list[Row]
    late_rows: list[Row]
    referenced: dict[str, str]
    affirmed: dict[str, str]
    blocking: tuple[str, ...]
    high_res_streak: int
    high_res_block: bool
    model_change: bool
    notice_shown: bool
    reattune_done: bool
    reattune_completed: bool
    undisclosed_checked: bool


class _V1Ladder(msgspec.Struct):
    session_tier: Tier
    prompted: bool
    hold: bool
    hold_kinds: frozenset[BaselineKind]
    hold_cause: str


class _V1User(msgspec.Struct):
    user_id: str
    mode: Mode | None
    pending_mode: Mode | None
    clock_s: float
    last_used_s: float
    recent_ids: dict[str, None]
    session: _V1Session | None
    ladder: _V1Ladder
    reattune_required: bool
    low_streak: int
    escalated: bool
    durable: bool
    rebaseline_attunement: bool


def _from_v1(u: _V1User) -> UserState:
    """The first release's state. It kept no per-session score count or tier for the
    review API (those lived in worker memory), so an open session restarts them."""
    recent = RecentEvents()
    for event_id in u.recent_ids:
        recent = recent.remember(event_id, len(u.recent_ids))
    session = None
    if u.session is not None:
        s = u.session
        m = s.model
        turns = TurnLog(s.n_turns, s.looks, tuple(WindowSums(w.n, tuple(w.total),
                                                             tuple(w.squares))
                                                  for w in s.windows),
                        tuple(s.current_rows), tuple(s.early_rows), tuple(s.late_rows))
        session = SessionState(
            s.session_id, s.mode, s.started_s, s.last_s,
            ModelTriple(m.model_version, m.tokenizer_id, m.precision_tag, m.adapter_id),
            s.safety, s.ephemeral, turns, s.foldable,
            Guard(s.blocking, s.high_res_streak, s.high_res_block),
            ModelChangeProgress(s.model_change, s.notice_shown, s.reattune_done,
                                s.reattune_completed, s.undisclosed_checked),
            s.referenced, s.affirmed)
    lad = u.ladder
    return UserState(
        u.user_id, u.mode, u.clock_s, u.last_used_s, recent, session,
        LadderState(lad.session_tier, lad.prompted, lad.hold, lad.hold_kinds, lad.hold_cause),
        u.reattune_required, u.low_streak, u.escalated, u.durable, u.rebaseline_attunement)
