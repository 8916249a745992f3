"""The state snapshot of the first release (version 1): the in-memory state encoded as a
map, field by field, with no version. :func:`baselines.snapshot.decode_state` reads it with
:class:`V1User` and :func:`from_v1`; nothing writes it any more.
"""

from __future__ import annotations

import msgspec

from drift.ladder import LadderState
from drift.model import BaselineKind, Mode, ModelTriple, Tier
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


class V1User(msgspec.Struct):
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


def from_v1(u: V1User) -> UserState:
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
