"""The persisted shape of a user's state, versioned, and the state of the first release.

A snapshot is msgpack. Version 1 is what the first release wrote: the in-memory
state encoded as a map, field by field, with no version. From version 2 on a
snapshot is an array whose first element is its version, so any reader can tell
what it holds; its layout is :class:`UserSnapshot` and never follows the
in-memory types by accident. :func:`decode_state` reads every version.
"""

from __future__ import annotations

import sys

import msgspec

from drift.ladder import LadderState
from drift.model import BaselineKind, Mode, ModelTriple, Tier
from drift.state import (
    Guard,
    ModelChangeProgress,
    RecentEvents,
    SessionState,
    TurnLog,
    UserState,
    WindowSums,
)

VERSION = 2
_MSGPACK_MAPS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}

Row = tuple[float, ...]


class _Window(msgspec.Struct, array_like=True, frozen=True):
    n: int
    total: Row
    squares: Row


class _Session(msgspec.Struct, array_like=True, frozen=True):
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
    windows: tuple[_Window, ...]
    current_rows: tuple[Row, ...]
    early_rows: tuple[Row, ...]
    late_rows: tuple[Row, ...]
    referenced: dict[str, str]
    affirmed: dict[str, str]
    blocking: tuple[str, ...]
    high_res_streak: int
    high_res_block: bool
    model_change: tuple[bool, bool, bool, bool, bool]
    scores: int
    max_tier: Tier
    reattune_quality: float | None


class UserSnapshot(msgspec.Struct, array_like=True, frozen=True):
    """Version 2: one user's state, as stored in DuckDB and (later) in a changelog."""

    version: int
    user_id: str
    mode: Mode | None
    clock_s: float
    last_used_s: float
    recent: bytes
    session: _Session | None
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


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(UserSnapshot)


def _session_snapshot(s: SessionState) -> _Session:
    m, t, mc = s.model, s.turns, s.model_change
    return _Session(
        s.session_id, s.mode, s.started_s, s.last_s,
        (m.model_version, m.tokenizer_id, m.precision_tag, m.adapter_id), s.safety,
        s.ephemeral, s.foldable, t.n_turns, t.looks,
        tuple(_Window(w.n, w.total, w.squares) for w in t.windows), t.current_rows,
        t.early_rows, t.late_rows, dict(s.referenced), dict(s.affirmed), s.guard.blocking,
        s.guard.high_res_streak, s.guard.high_res_block,
        (mc.detected, mc.notice_shown, mc.reattune_done, mc.reattune_completed,
         mc.disclosure_checked),
        s.scores, s.max_tier, s.reattune_quality)


def _session_state(s: _Session) -> SessionState:
    turns = TurnLog(s.n_turns, s.looks, tuple(WindowSums(w.n, w.total, w.squares)
                                              for w in s.windows),
                    s.current_rows, s.early_rows, s.late_rows)
    # As the fold holds them: the ids of the safety check, the stances and kinds shared
    # between users (interned), a commitment's id shared by the two maps that name it.
    safety = (sys.intern(s.safety[0]), sys.intern(s.safety[1]), sys.intern(s.safety[2]))
    referenced = {cid: sys.intern(stance) for cid, stance in s.referenced.items()}
    ids = {cid: cid for cid in referenced}
    affirmed = {ids.get(cid, cid): sys.intern(kind) for cid, kind in s.affirmed.items()}
    return SessionState(
        s.session_id, s.mode, s.started_s, s.last_s, ModelTriple(*s.model), safety,
        s.ephemeral, turns, s.foldable, Guard(s.blocking, s.high_res_streak, s.high_res_block),
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
    snap = _decoder.decode(data)
    if snap.version != VERSION:
        raise ValueError(f"user state snapshot version {snap.version} is newer than this "
                         f"release reads ({VERSION}); upgrade the worker")
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
