"""Labelled synthetic FHR traffic with ground truth, by scenario and seed.

Each simulated user has their own process: per-feature means and turn-level
standard deviations, a friction rate, log-normal token counts and latencies,
and a mild warm-up of trust over the first turns of every session. Baseline
sessions come from that process; test sessions either come from it too
(``stable``) or change it in a labelled way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

# The event bodies it writes, imported by name as drift.fold imports the ones it folds.
from drift.model import (
    BaselineKind,
    Body,
    FhrEvent,
    MemoryWrite,
    MemoryWriteBlocked,
    Mode,
    ModelTriple,
    NoticeShown,
    Semantic,
    SessionEnd,
    SessionStart,
    Turn,
    event_type_of,
)

MODEL_A = ModelTriple("companion-7b-2026.10", "tok-v5", "bf16")
MODEL_B = ModelTriple("companion-7b-2026.11", "tok-v6", "fp8")
GATE = "gate-cfg-3"
POLICY = "drift-policy-1"


# The same form as drift.outputs' enums: one closed set of values, the simulator's scenarios.
class Scenario(str, enum.Enum):
    STABLE = "stable"
    ATTUNEMENT_SHIFT = "attunement_shift"
    SEMANTIC_CONTRADICTION = "semantic_contradiction"
    COMBINED = "combined"
    SAFETY_MISMATCH = "safety_mismatch"
    MODEL_CHANGE_HEALTHY = "model_change_healthy"
    MODEL_CHANGE_COLLAPSED = "model_change_collapsed"
    MODEL_CHANGE_UNDISCLOSED = "model_change_undisclosed"
    SUSTAINED_LOW = "sustained_low"
    STATELESS = "stateless"
    EPHEMERAL = "ephemeral"
    GOVERNANCE = "governance"


@dataclass(frozen=True)
class SimParams:
    baseline_sessions: int = 3
    test_sessions: int = 1
    turns: int = 12
    shift_sd: float = 1.5
    contradicted_share: float = 0.5
    commitments: int = 4
    mode: Mode = Mode.FULL
    turn_gap_s: float = 20.0
    low_sessions: int = 3
    low_streaks: int = 1


@dataclass(frozen=True)
class TruthRow:
    """Ground truth for one session of one user."""

    user_id: str
    session_id: str
    scenario: str
    phase: str
    shift_sd: float
    contradicted_share: float
    safety_changed: bool
    model_changed: bool
    notice_shown: bool
    expected: str


@dataclass
class UserProcess:
    mean: np.ndarray
    sd: np.ndarray
    friction: float

    @staticmethod
    def draw(rng: np.random.Generator) -> UserProcess:
        mean = np.array([rng.uniform(0.45, 0.65), rng.uniform(0.4, 0.6), rng.uniform(-0.1, 0.4),
                         0.0, rng.uniform(3.0, 4.5), rng.uniform(6.3, 7.2)])
        sd = np.array([rng.uniform(0.05, 0.09), rng.uniform(0.05, 0.09), rng.uniform(0.08, 0.15),
                       0.0, rng.uniform(0.3, 0.5), rng.uniform(0.2, 0.35)])
        return UserProcess(mean, sd, float(rng.uniform(0.05, 0.2)))


def _turn(rng: np.random.Generator, proc: UserProcess, k: int, offset: np.ndarray,
          states: dict[str, object] | None = None) -> Turn:
    warm = np.zeros(6)
    warm[0] = 0.04 * (1.0 - np.exp(-(k - 1) / 3.0))
    x = proc.mean + warm + offset + proc.sd * rng.standard_normal(6)
    s = {"ae_severity": "none", "care_override": False, "care_cooloff": False, "crisis": False,
         "legal_hold": False, "reflection": bool(rng.random() < 0.2)}
    if states:
        s.update(states)
    return Turn(
        turn=k,
        trust=float(np.clip(x[0], 0.0, 1.0)),
        resonance_depth=float(np.clip(x[1], 0.0, 1.0)),
        valence=float(np.clip(x[2], -1.0, 1.0)),
        friction=bool(rng.random() < proc.friction),
        reflection=bool(s["reflection"]),
        user_tokens=int(max(0.0, np.expm1(x[4]))),
        latency_ms=float(max(0.0, np.expm1(x[5]))),
        ae_severity=str(s["ae_severity"]),
        care_override=bool(s["care_override"]),
        care_cooloff=bool(s["care_cooloff"]),
        crisis=bool(s["crisis"]),
        legal_hold=bool(s["legal_hold"]),
    )


class _Writer:
    """Builds one user's event list with increasing event time and unique ids."""

    def __init__(self, user_id: str, start_ts: float, turn_gap_s: float) -> None:
        self.user_id = user_id
        self.ts = start_ts
        self.n = 0
        self.turn_gap_s = turn_gap_s
        self.events: list[FhrEvent] = []

    def emit(self, session_id: str, body: Body, ephemeral: bool = False) -> None:
        self.n += 1
        self.events.append(FhrEvent(f"{self.user_id}-e{self.n}", event_type_of(body), self.ts,
                                    self.user_id, session_id, ephemeral, body))
        self.ts += self.turn_gap_s


def _session(
    w: _Writer, rng: np.random.Generator, proc: UserProcess, session_id: str, mode: Mode,
    turns: int, offset: np.ndarray, *, model: ModelTriple = MODEL_A, gate: str = GATE,
    commitments: list[str] | None = None, contradict: int = 0, notice: bool = False,
    converge_at: int | None = None, ephemeral: bool = False,
) -> None:
    w.emit(session_id, SessionStart(mode, "consent-1", model, gate, POLICY), ephemeral)
    if notice:
        w.emit(session_id, NoticeShown(model), ephemeral)
    for k in range(1, turns + 1):
        off = offset
        if converge_at is not None:
            off = offset * max(0.0, 1.0 - (k - 1) / max(converge_at - 1, 1))
        w.emit(session_id, _turn(rng, proc, k, off), ephemeral)
        if commitments and k == 2:
            for i, cid in enumerate(commitments):
                stance = "contradict" if i < contradict else "affirm"
                w.emit(session_id, Semantic(k, cid, "commitment", stance), ephemeral)
    w.emit(session_id, SessionEnd(turns, "closed"), ephemeral)
    w.ts += 86400.0


def simulate_user(
    rng: np.random.Generator, scenario: Scenario, user_id: str, start_ts: float,
    params: SimParams = SimParams(),
) -> tuple[list[FhrEvent], list[TruthRow]]:
    """One user's events and ground truth for ``scenario``.

    >>> rng = np.random.default_rng(3)
    >>> events, truth = simulate_user(rng, Scenario.ATTUNEMENT_SHIFT, "u1", 1.7e9)
    >>> [t.phase for t in truth], truth[-1].expected
    (['baseline', 'baseline', 'baseline', 'test'], 'medium_or_higher')
    >>> events[0].event_type, events[-1].event_type, len(events)
    ('session_start', 'session_end', 60)
    """
    p = params
    proc = UserProcess.draw(rng)
    w = _Writer(user_id, start_ts, p.turn_gap_s)
    truth: list[TruthRow] = []
    commitments = [f"{user_id}-c{i}" for i in range(p.commitments)]
    mode = p.mode
    zero = np.zeros(6)

    def row(sid: str, phase: str, expected: str, shift: float = 0.0, share: float = 0.0,
            safety: bool = False, model: bool = False, notice: bool = False) -> None:
        truth.append(TruthRow(user_id, sid, scenario.value, phase, shift, share, safety, model,
                              notice, expected))

    if scenario in (Scenario.STATELESS, Scenario.EPHEMERAL):
        sm = Mode.STATELESS if scenario is Scenario.STATELESS else mode
        for i in range(p.baseline_sessions + p.test_sessions):
            sid = f"{user_id}-s{i}"
            _session(w, rng, proc, sid, sm, p.turns, zero,
                     ephemeral=scenario is Scenario.EPHEMERAL)
            row(sid, "test", "nothing_on_disk")
        return w.events, truth

    n_base = p.baseline_sessions
    for i in range(n_base):
        sid = f"{user_id}-s{i}"
        _session(w, rng, proc, sid, mode, p.turns, zero,
                 commitments=commitments if i == 0 else None)
        row(sid, "baseline", "none")

    sd = proc.sd
    shift = np.zeros(6)
    shift[0] = -p.shift_sd * sd[0]
    shift[1] = -p.shift_sd * sd[1]
    if mode is Mode.LIGHT:
        shift = np.zeros(6)
        shift[4] = -p.shift_sd * sd[4]
        shift[5] = p.shift_sd * sd[5]
    n_contra = round(p.contradicted_share * len(commitments))
    for j in range(p.test_sessions):
        sid = f"{user_id}-s{n_base + j}"
        if scenario is Scenario.STABLE:
            _session(w, rng, proc, sid, mode, p.turns, zero, commitments=commitments)
            row(sid, "test", "low")
        elif scenario is Scenario.ATTUNEMENT_SHIFT:
            _session(w, rng, proc, sid, mode, p.turns, shift)
            row(sid, "test", "medium_or_higher" if p.shift_sd > 0 else "low", shift=p.shift_sd)
        elif scenario is Scenario.SEMANTIC_CONTRADICTION:
            _session(w, rng, proc, sid, mode, p.turns, zero, commitments=commitments,
                     contradict=n_contra)
            row(sid, "test", "medium_or_higher" if p.contradicted_share >= 0.5 else "low",
                share=p.contradicted_share)
        elif scenario is Scenario.COMBINED:
            _session(w, rng, proc, sid, mode, p.turns, shift, commitments=commitments,
                     contradict=n_contra)
            row(sid, "test", "high", shift=p.shift_sd, share=p.contradicted_share)
        elif scenario is Scenario.SAFETY_MISMATCH:
            _session(w, rng, proc, sid, mode, p.turns, zero, gate="gate-cfg-4")
            row(sid, "test", "high", safety=True)
        elif scenario is Scenario.MODEL_CHANGE_HEALTHY:
            _session(w, rng, proc, sid, mode, p.turns, _disruption(mode, sd, 1.0), model=MODEL_B,
                     notice=True, converge_at=2)
            row(sid, "test", "reattune_completed", model=True, notice=True)
        elif scenario is Scenario.MODEL_CHANGE_COLLAPSED:
            collapse = _disruption(mode, sd, 3.0)
            if mode is Mode.FULL:
                collapse[4] = -2.0 * sd[4]
            _session(w, rng, proc, sid, mode, p.turns, collapse, model=MODEL_B, notice=True)
            row(sid, "test", "reattune_failed", model=True, notice=True)
        elif scenario is Scenario.MODEL_CHANGE_UNDISCLOSED:
            _session(w, rng, proc, sid, mode, p.turns, zero, model=MODEL_B, notice=False)
            row(sid, "test", "model_change_undisclosed", model=True)
        elif scenario is Scenario.SUSTAINED_LOW:
            for streak in range(p.low_streaks):
                if streak:
                    sid_r = f"{sid}-rearm{streak}"
                    _session(w, rng, proc, sid_r, mode, p.turns, zero)
                    row(sid_r, "test", "rearm")
                for k in range(p.low_sessions):
                    sid_k = f"{sid}-low{k}" if not streak else f"{sid}-r{streak}-low{k}"
                    _session(w, rng, proc, sid_k, mode, p.turns, _disruption(mode, sd, 3.0))
                    row(sid_k, "test", "sustained_low_reattune" if k == 2 else "low_reattune")
        elif scenario is Scenario.GOVERNANCE:
            _governance_session(w, rng, proc, sid, mode)
            row(sid, "test", "violations")
    return w.events, truth


def _disruption(mode: Mode, sd: np.ndarray, size: float) -> np.ndarray:
    """An offset of ``size`` turn standard deviations on dynamics ``mode`` may baseline.

    Full mode moves trust, resonance and valence down. Light mode holds only the
    style features, so there the same size moves user tokens down and latency up;
    a change a mode cannot see would not be a change of its re-attunement.

    >>> sd = np.array([0.1, 0.1, 0.1, 0.0, 0.4, 0.2])
    >>> _disruption(Mode.FULL, sd, 2.0).round(2).tolist()
    [-0.2, -0.2, -0.2, 0.0, 0.0, 0.0]
    >>> _disruption(Mode.LIGHT, sd, 2.0).round(2).tolist()
    [0.0, 0.0, 0.0, 0.0, -0.8, 0.4]
    """
    offset = np.zeros(6)
    if mode is Mode.LIGHT:
        offset[4] = -size * sd[4]
        offset[5] = size * sd[5]
    else:
        offset[:3] = -size * sd[:3]
    return offset


def _governance_session(w: _Writer, rng: np.random.Generator, proc: UserProcess, sid: str,
                        mode: Mode) -> None:
    """A session with one compliant and one violating relational write of each kind."""
    w.emit(sid, SessionStart(mode, "consent-1", MODEL_A, GATE, POLICY))
    k = 1
    w.emit(sid, _turn(rng, proc, k, np.zeros(6), {"reflection": True}))
    w.emit(sid, MemoryWrite(k, "relational", "style", "pref", "consent-1", True))
    w.emit(sid, MemoryWrite(k, "relational", "trust_trajectory", "traj", "consent-1", False))
    k += 1
    w.emit(sid, _turn(rng, proc, k, np.zeros(6), {"crisis": True, "reflection": False}))
    w.emit(sid, MemoryWrite(k, "relational", "style", "pref", "consent-1", True))
    w.emit(sid, MemoryWriteBlocked(k, "relational", "crisis"))
    w.emit(sid, SessionEnd(k, "closed"))
    w.ts += 86400.0


def simulate(
    seed: int, scenarios: list[Scenario], users_per_scenario: int, start_ts: float,
    params: SimParams = SimParams(),
) -> Iterator[tuple[list[FhrEvent], list[TruthRow]]]:
    """Users of each scenario, one at a time; each user gets its own child generator.

    >>> users = list(simulate(1, [Scenario.STABLE, Scenario.SAFETY_MISMATCH], 2, 1.7e9))
    >>> len(users), users[0][0][0].user_id, users[2][1][-1].expected
    (4, 'stable-0000', 'high')
    """
    root = np.random.SeedSequence(seed)
    children = root.spawn(len(scenarios) * users_per_scenario)
    i = 0
    for scenario in scenarios:
        for u in range(users_per_scenario):
            rng = np.random.default_rng(children[i])
            i += 1
            yield simulate_user(rng, scenario, f"{scenario.value}-{u:04d}", start_ts, params)


__all__ = ["BaselineKind", "Scenario", "SimParams", "TruthRow", "simulate", "simulate_user"]
