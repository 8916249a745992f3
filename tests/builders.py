"""Hand-built FHR events for tests, on top of the simulator's user processes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from drift.model import (
    BaselineKind,
    BaselineReconfirmed,
    Body,
    FhrEvent,
    MemoryErase,
    MemoryWrite,
    Mode,
    ModeChanged,
    ModelTriple,
    SessionEnd,
    SessionStart,
    Turn,
    event_type_of,
)
from drift.simulation import MODEL_A


@dataclass
class UserScript:
    """Builds one user's events with increasing event time and unique ids."""

    user_id: str
    ts: float = 1.7e9
    seed: int = 0
    n: int = 0
    events: list[FhrEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def emit(self, session_id: str, body: Body, ephemeral: bool = False) -> FhrEvent:
        self.n += 1
        e = FhrEvent(f"{self.user_id}-e{self.n}", event_type_of(body), self.ts,
                     self.user_id, session_id, ephemeral, body)
        self.events.append(e)
        self.ts += 10.0
        return e

    def turn(self, k: int, trust: float = 0.6, resonance: float = 0.5, **states: object) -> Turn:
        noise = self.rng.normal(0.0, 1.0, 4)
        s: dict[str, object] = {"ae_severity": "none", "care_override": False,
                                "care_cooloff": False, "crisis": False, "legal_hold": False,
                                "reflection": False}
        s.update(states)
        return Turn(k, float(np.clip(trust + 0.05 * noise[0], 0, 1)),
                    float(np.clip(resonance + 0.05 * noise[1], 0, 1)),
                    float(np.clip(0.2 + 0.1 * noise[2], -1, 1)), bool(self.rng.random() < 0.1),
                    bool(s["reflection"]), int(40 + 5 * noise[3]),
                    float(900 + 100 * self.rng.normal()), str(s["ae_severity"]),
                    bool(s["care_override"]), bool(s["care_cooloff"]), bool(s["crisis"]),
                    bool(s["legal_hold"]))

    def session(self, session_id: str, turns: int = 12, mode: Mode = Mode.FULL,
                trust: float = 0.6, resonance: float = 0.5, gate: str = "gate-1",
                model: ModelTriple = MODEL_A, ephemeral: bool = False, end: bool = True,
                extra: Sequence[Body] | None = None) -> None:
        self.emit(session_id, SessionStart(mode, "consent-1", model, gate, "policy-1"), ephemeral)
        for k in range(1, turns + 1):
            self.emit(session_id, self.turn(k, trust, resonance), ephemeral)
        for body in extra or []:
            self.emit(session_id, body, ephemeral)
        if end:
            self.emit(session_id, SessionEnd(turns, "closed"), ephemeral)
            self.ts += 86400.0

    def reconfirm(self, session_id: str, *kinds: BaselineKind) -> FhrEvent:
        return self.emit(session_id, BaselineReconfirmed(tuple(kinds)))

    def erase(self, session_id: str, scope: str = "all", request_id: str = "req-1") -> FhrEvent:
        return self.emit(session_id, MemoryErase("relational", scope, "user_request", request_id))


def relational_writes(turns: int, confirmed: bool) -> list[MemoryWrite]:
    """A relational write every third turn of a session of ``turns`` turns."""
    return [MemoryWrite(k, "relational", "topic", "user", "consent-1", confirmed)
            for k in range(2, turns, 3)]


def memory_only_users() -> list[FhrEvent]:
    """Users whose outputs come from state that only memory holds: long stateless and
    session_only sessions with relational writes (violations), a durable user's long
    ephemeral session (scores from its turns; for one of them the ephemeral session's
    start closes a durable session left open, which folds a new baseline version), a
    first session off the record, and downgrades to a mode that keeps nothing, at a
    session start and retroactively."""
    out: list[FhrEvent] = []
    for i in range(3):
        stateless = UserScript(f"mem-stateless-{i}", ts=1.7e9, seed=40 + i)
        stateless.session("sl-1", turns=30, mode=Mode.STATELESS, extra=relational_writes(30, True))
        stateless.session("sl-2", turns=30, mode=Mode.SESSION_ONLY, extra=relational_writes(30, True))
        durable = UserScript(f"mem-durable-{i}", ts=1.7e9, seed=50 + i)
        for k in range(3):
            durable.session(f"d-{k}", end=k < 2 or i != 1)
        durable.session("d-off", turns=30, ephemeral=True, extra=relational_writes(30, False))
        durable.session("d-back", turns=12)
        durable.session("d-down", turns=20, mode=Mode.SESSION_ONLY, extra=relational_writes(20, True))
        first = UserScript(f"mem-first-{i}", ts=1.7e9, seed=60 + i)
        first.session("f-off", turns=25, ephemeral=True, extra=relational_writes(25, False))
        retro = UserScript(f"mem-retro-{i}", ts=1.7e9, seed=70 + i)
        for k in range(3):
            retro.session(f"r-{k}")
        retro.session("r-open", turns=8, end=False)
        retro.emit("r-open", ModeChanged(Mode.FULL, Mode.STATELESS, "consent-2", True))
        for write in relational_writes(20, True):
            retro.emit("r-open", retro.turn(write.turn))
            retro.emit("r-open", write)
        out += stateless.events + durable.events + first.events + retro.events
    return out
