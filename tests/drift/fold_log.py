"""Hand-built logs for the fold's tests: one user's events, and the outputs of folding them.

Their turn dynamics cycle through three fixed rows, so every three-turn window has the same
mean: a session that repeats the cycle re-joins the prior late profile exactly, and the
outcomes the tests pin do not hang on random draws.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from drift.baseline import UserBaselines
from drift.model import (
    DriftConfig,
    FhrEvent,
    MemoryWrite,
    Mode,
    ModelTriple,
    NoticeShown,
    SessionEnd,
    SessionStart,
    Turn,
    event_type_of,
)
from drift.outputs import Output, OutputKind
from drift.replay import MemoryReplay
from drift.state import UserState
from streams.edge.wire import payload

MODEL_A = ModelTriple("companion-2026.10", "tok-5", "bf16")
MODEL_B = ModelTriple("companion-2026.11", "tok-6", "fp8")
GATE = "gate-1"
POLICY = "drift-policy-1"
CONSENT = "consent-1"
OFFERS = ["reset_session_only", "continue_conservative"]
CFG = DriftConfig()


#: One cycle of turn dynamics: (trust, resonance, valence, friction, tokens, latency_ms).
CYCLE = ((0.55, 0.45, 0.1, False, 40, 800.0),
         (0.60, 0.50, 0.2, False, 50, 1000.0),
         (0.65, 0.55, 0.3, True, 60, 1250.0))


def turn(k: int, shift: float = 0.0, **states: Any) -> Turn:
    """Turn ``k`` of the cycle, with trust, resonance and valence moved by ``shift``."""
    trust, resonance, valence, friction, tokens, latency = CYCLE[(k - 1) % 3]
    values: dict[str, Any] = {
        "ae_severity": "none", "care_override": False, "care_cooloff": False, "crisis": False,
        "legal_hold": False, "reflection": False,
    }
    values.update(states)
    resonance_depth = values.pop("resonance_depth", resonance + shift)
    return Turn(turn=k, trust=trust + shift, resonance_depth=resonance_depth,
                valence=valence + shift, friction=friction, user_tokens=tokens,
                latency_ms=latency, **values)


STEADY: Callable[[int], Turn] = turn


def relational_write(category: str = "style", confirmed: bool = True, k: int = 1
                     ) -> MemoryWrite:
    """A relational memory write at turn ``k`` under the log's consent."""
    return MemoryWrite(k, "relational", category, "scope-1", CONSENT, confirmed)


def collapsed(k: int) -> Turn:
    return turn(k, shift=-0.3)


@dataclass
class Log:
    """One user's events with increasing event time and unique ids."""

    user_id: str = "u1"
    ts_s: float = 1.7e9
    events: list[FhrEvent] = field(default_factory=list)

    def add(self, session_id: str, body: Any, ephemeral: bool = False) -> FhrEvent:
        event = FhrEvent(f"{self.user_id}-e{len(self.events) + 1}", event_type_of(body),
                         self.ts_s, self.user_id, session_id, ephemeral, body)
        self.events.append(event)
        self.ts_s += 20.0
        return event

    def start(self, session_id: str, mode: Mode = Mode.FULL, model: ModelTriple = MODEL_A
              ) -> FhrEvent:
        return self.add(session_id, SessionStart(mode, CONSENT, model, GATE, POLICY))

    def end(self, session_id: str, turns: int) -> FhrEvent:
        event = self.add(session_id, SessionEnd(turns, "closed"))
        self.ts_s += 86400.0
        return event

    def session(self, session_id: str, *, mode: Mode = Mode.FULL, model: ModelTriple = MODEL_A,
                turns: int = 12, dynamics: Callable[[int], Turn] = STEADY,
                notice: bool = False) -> None:
        self.start(session_id, mode, model)
        if notice:
            self.add(session_id, NoticeShown(model))
        for k in range(1, turns + 1):
            self.add(session_id, dynamics(k))
        self.end(session_id, turns)

    def baseline(self, sessions: int = 3, mode: Mode = Mode.FULL) -> None:
        for i in range(sessions):
            self.session(f"base{i}", mode=mode)


@dataclass
class Run:
    """The outputs of a log, event by event, and the replay that produced them."""

    runner: MemoryReplay
    by_event: dict[str, list[Output]]

    @property
    def outputs(self) -> list[Output]:
        return [o for outs in self.by_event.values() for o in outs]

    def of(self, kind: OutputKind, session_id: str | None = None) -> list[dict[str, Any]]:
        return [payload(o) for o in self.outputs if o.kind is kind
                and (session_id is None or o.session_id == session_id)]

    def actions(self, session_id: str) -> list[str]:
        return [p["action"] for p in self.of(OutputKind.RESPONSE, session_id)]

    def rules(self, session_id: str | None = None) -> list[str]:
        return [p["rule"] for p in self.of(OutputKind.VIOLATION, session_id)]

    def escalations(self) -> list[dict[str, Any]]:
        return self.of(OutputKind.ESCALATION)

    def payloads(self, session_id: str) -> list[dict[str, Any]]:
        return [payload(o) for o in self.outputs if o.session_id == session_id]

    def reattune(self, session_id: str) -> dict[str, Any]:
        """The one payload of the session that carries a re-attunement score."""
        found = [p for p in self.payloads(session_id) if "reattune_quality_score" in p]
        assert len(found) == 1, found
        return found[0]

    def baselines(self, user_id: str = "u1") -> UserBaselines:
        return self.runner.baselines[user_id]

    def state(self, user_id: str = "u1") -> UserState:
        return self.runner.states[user_id]


def run(events: Iterable[FhrEvent], config: DriftConfig = CFG) -> Run:
    runner = MemoryReplay(config)
    by_event: dict[str, list[Output]] = {}
    for event in events:
        by_event.setdefault(event.event_id, []).extend(runner.feed(event))
    return Run(runner, by_event)
