"""The per-user fold, event by event: model change, re-attunement, sustained low, governance.

Streams are built by hand from ``drift.model`` events. Their turn dynamics cycle
through three fixed rows, so every three-turn window has the same mean: a
session that repeats the cycle re-joins the prior late profile exactly, and the
outcomes below do not hang on random draws.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from drift.baseline import UserBaselines
from drift.evolve import evolve
from drift.fold import initial, step
from drift.model import (
    BaselineKind,
    DriftConfig,
    FhrEvent,
    MemoryErase,
    MemoryWrite,
    MemoryWriteBlocked,
    Mode,
    ModelTriple,
    NoticeShown,
    SessionEnd,
    SessionStart,
    Turn,
    event_type_of,
)
from drift.outputs import Output, OutputKind
from drift.replay import MemoryReplay, replay
from drift.simulation import Scenario, simulate
from drift.state import UserState
from streams.wire import payload

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


# --------------------------------------------------------------------------- model change


def test_a_changed_model_gives_notice_downgrade_and_requires_reattunement() -> None:
    log = Log()
    log.baseline()
    start = log.start("s1", model=MODEL_B)
    result = run(log.events)
    responses = [p for p in result.by_event[start.event_id] if p.kind is OutputKind.RESPONSE]
    assert [payload(p)["action"] for p in responses] == ["model_change_notice",
                                                          "posture_downgrade"]
    for out in map(payload, responses):
        assert out["reattune_required"] is True
        assert out["cause_event_id"] == start.event_id
        assert out["previous_model"]["model_version"] == MODEL_A.model_version
        assert out["model"]["model_version"] == MODEL_B.model_version
    session = result.state().session
    assert result.state().reattune_required is True
    assert session is not None and session.model_change.detected


@pytest.mark.parametrize("changed", [
    replace(MODEL_A, model_version="companion-2026.11"),
    replace(MODEL_A, tokenizer_id="tok-6"),
    replace(MODEL_A, precision_tag="fp8"),
    replace(MODEL_A, adapter_id="adapter-7"),
])
def test_any_field_of_the_triple_is_a_model_change(changed: ModelTriple) -> None:
    log = Log()
    log.baseline(1)
    log.start("s1", model=changed)
    assert run(log.events).actions("s1") == ["model_change_notice", "posture_downgrade"]


def test_the_same_model_or_a_mode_without_baselines_detects_nothing() -> None:
    log = Log()
    log.baseline(1)
    log.start("same")
    log.end("same", 0)
    log.start("off", mode=Mode.SESSION_ONLY, model=MODEL_B)
    result = run(log.events)
    assert result.actions("same") == []
    assert result.actions("off") == []
    assert result.state().reattune_required is False


def test_a_first_session_has_no_model_to_compare_with() -> None:
    log = Log()
    log.session("s0", model=MODEL_B, turns=6)
    result = run(log.events)
    assert result.actions("s0") == []
    assert result.of(OutputKind.SCORE, "s0") == []


def test_a_healthy_change_completes_and_the_next_version_carries_the_new_triple() -> None:
    log = Log()
    log.baseline()
    before = run(log.events).baselines()
    log.session("s1", model=MODEL_B, notice=True)
    result = run(log.events)
    assert result.actions("s1") == ["model_change_notice", "posture_downgrade",
                                    "reattune_completed"]
    done = next(p for p in result.of(OutputKind.RESPONSE, "s1")
                if p["action"] == "reattune_completed")
    assert done["reattune_quality_score"] == 1.0
    assert done["reattune_turns_to_baseline"] == CFG.reattune_window
    assert done["posture"] == "restored"
    assert done["threshold"] == CFG.reattune_threshold
    after = result.baselines()
    assert after.attunement is not None and before.attunement is not None
    assert after.attunement.meta.model == MODEL_B
    assert after.attunement.meta.version == before.attunement.meta.version + 1
    assert after.attunement.meta.baseline_id == before.attunement.meta.baseline_id
    assert after.model() == MODEL_B
    assert result.state().reattune_required is False
    log.start("s2", model=MODEL_B)
    assert run(log.events).actions("s2") == []


def test_a_collapsed_change_fails_with_offers_and_keeps_the_old_triple() -> None:
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B, notice=True, dynamics=collapsed)
    result = run(log.events)
    actions = result.actions("s1")
    assert actions[:2] == ["model_change_notice", "posture_downgrade"]
    assert "reattune_failed" in actions and "reattune_completed" not in actions
    failed = next(p for p in result.of(OutputKind.RESPONSE, "s1")
                  if p["action"] == "reattune_failed")
    assert failed["offers"] == OFFERS
    assert failed["posture"] == "conservative"
    assert failed["reattune_quality_score"] < CFG.reattune_threshold
    assert failed["reattune_turns_to_baseline"] is None
    assert result.baselines().model() == MODEL_A
    assert result.state().reattune_required is True
    log.start("s2", model=MODEL_B)
    assert run(log.events).actions("s2")[:2] == ["model_change_notice", "posture_downgrade"]


def test_a_model_already_reattuned_to_is_not_a_change_after_relational_erasure() -> None:
    # The relational baselines carry the new triple once re-attunement completes; the
    # safety baseline is the one left after the user erases relational memory, and it
    # must not turn the model the user already re-attuned to into a change again.
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B, notice=True)
    log.start("s2", model=MODEL_B)
    log.add("s2", MemoryErase("relational", "all", "user_request", "req-1"))
    log.end("s2", 0)
    log.session("s3", model=MODEL_B)
    result = run(log.events)
    assert "reattune_completed" in result.actions("s1")
    assert result.actions("s3") == []
    assert result.rules() == []


def ramp(k: int) -> Turn:
    """A session that warms up: low for the first five turns, high after."""
    return turn(k, shift=-0.3 if k <= 5 else 0.0)


def test_a_failed_change_that_is_folded_keeps_the_old_triple() -> None:
    # Warm-up sessions: the early turns match the baseline's early windows (no drift,
    # no HOLD) but not the prior late profile, so re-attunement fails and the session
    # is still folded into a new version.
    log = Log()
    log.session("base0", dynamics=ramp)
    log.session("s1", model=MODEL_B, notice=True, dynamics=ramp)
    result = run(log.events)
    assert not result.state().ladder.hold
    assert "reattune_failed" in result.actions("s1")
    after = result.baselines()
    assert after.attunement is not None and after.attunement.meta.version == 2
    assert after.attunement.meta.source_session == "s1"
    assert after.model() == MODEL_A
    log.start("s2", model=MODEL_B)
    assert run(log.events).actions("s2") == ["model_change_notice", "posture_downgrade"]


def test_a_short_session_is_scored_at_its_end() -> None:
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B, notice=True, turns=3)
    result = run(log.events)
    done = [p for p in result.of(OutputKind.RESPONSE, "s1") if p["action"] == "reattune_completed"]
    assert len(done) == 1 and done[0]["cause_event_id"] == log.events[-1].event_id


def test_every_later_session_gets_a_reattune_quality_score() -> None:
    log = Log()
    log.baseline(2)
    result = run(log.events)
    assert "reattune_quality_score" not in str(result.payloads("base0"))
    score = result.reattune("base1")
    assert score["score_kind"] == "reattune_quality"
    assert score["reattune_quality_score"] == 1.0
    assert score["turn"] == CFG.reattune_checkpoint_turn


# --------------------------------------------------------------------------- disclosure


def test_an_undisclosed_change_is_a_violation_at_the_checkpoint() -> None:
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B)
    result = run(log.events)
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["model_change_undisclosed"]
    checkpoint = next(e for e in log.events if e.session_id == "s1"
                      and isinstance(e.body, Turn) and e.body.turn == CFG.reattune_checkpoint_turn)
    assert violations[0]["event_id"] == checkpoint.event_id
    assert violations[0]["session_id"] == "s1"
    assert violations[0]["reason"] == "notice_not_shown"


def test_a_disclosed_change_is_not_a_violation() -> None:
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B, notice=True)
    assert run(log.events).rules() == []


def test_a_notice_after_the_checkpoint_is_too_late() -> None:
    log = Log()
    log.baseline()
    log.start("s1", model=MODEL_B)
    for k in range(1, 7):
        log.add("s1", turn(k))
    log.add("s1", NoticeShown(MODEL_B))
    log.end("s1", 6)
    assert run(log.events).rules() == ["model_change_undisclosed"]


def test_a_short_undisclosed_session_is_a_violation_at_its_end() -> None:
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B, turns=2)
    result = run(log.events)
    assert result.rules("s1") == ["model_change_undisclosed"]
    assert result.of(OutputKind.VIOLATION)[0]["event_id"] == log.events[-1].event_id


def test_an_undisclosed_session_closed_as_idle_is_a_violation_of_that_session() -> None:
    log = Log()
    log.baseline()
    log.start("s1", model=MODEL_B)
    log.add("s1", turn(1))
    log.ts_s += CFG.idle_timeout_s + 60.0
    log.start("s2", model=MODEL_B)
    violations = run(log.events).of(OutputKind.VIOLATION)
    assert [(v["rule"], v["session_id"]) for v in violations] == [
        ("model_change_undisclosed", "s1")]


def test_an_undisclosed_session_closed_by_the_next_start_names_its_own_session() -> None:
    log = Log()
    log.baseline()
    log.start("s1", model=MODEL_B)
    log.add("s1", turn(1))
    log.add("s1", turn(2))
    log.start("s2", model=MODEL_B)
    violations = run(log.events).of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["model_change_undisclosed"]
    assert violations[0]["session_id"] == "s1"


# --------------------------------------------------------------------------- sustained low


def test_three_low_sessions_escalate_once_and_a_good_one_rearms() -> None:
    log = Log()
    log.baseline()
    for i in range(4):
        log.session(f"low{i}", dynamics=collapsed)
    log.session("good")
    for i in range(3):
        log.session(f"again{i}", dynamics=collapsed)
    result = run(log.events)
    for sid in ("low0", "low1", "low2", "low3", "again0", "again1", "again2"):
        assert result.reattune(sid)["reattune_quality_score"] < CFG.reattune_threshold
    assert result.reattune("good")["reattune_quality_score"] >= CFG.reattune_threshold
    escalations = result.escalations()
    assert [e["session_id"] for e in escalations] == ["low2", "again2"]
    for e in escalations:
        assert e["kind"] == "sustained_low_reattune"
        assert e["route"] == "continuity_review"
        assert e["sessions"] == CFG.sustained_low_sessions
        assert e["threshold"] == CFG.reattune_threshold
        assert e["schema"] == "drift/1" and e["user_id"] == "u1"
    checkpoint = [ev for ev in log.events if ev.session_id == "low2"
                  and isinstance(ev.body, Turn) and ev.body.turn == CFG.reattune_checkpoint_turn]
    assert escalations[0]["cause_event_id"] == checkpoint[0].event_id
    assert escalations[0]["id"] != escalations[1]["id"]


def test_two_low_sessions_do_not_escalate() -> None:
    log = Log()
    log.baseline()
    log.session("low0", dynamics=collapsed)
    log.session("low1", dynamics=collapsed)
    log.session("good")
    log.session("low2", dynamics=collapsed)
    assert run(log.events).escalations() == []


def test_the_streak_length_is_configuration() -> None:
    log = Log()
    log.baseline()
    log.session("low0", dynamics=collapsed)
    log.session("low1", dynamics=collapsed)
    escalations = run(log.events, replace(CFG, sustained_low_sessions=2)).escalations()
    assert [e["session_id"] for e in escalations] == ["low1"]


def test_sessions_without_a_score_neither_count_nor_rearm() -> None:
    log = Log()
    log.baseline()
    log.session("low0", dynamics=collapsed)
    log.session("low1", dynamics=collapsed)
    log.session("empty", turns=0)
    log.session("low2", dynamics=collapsed)
    assert [e["session_id"] for e in run(log.events).escalations()] == ["low2"]


# --------------------------------------------------------------------------- governance


def _write(category: str = "style", confirmed: bool = True, k: int = 1) -> MemoryWrite:
    return MemoryWrite(k, "relational", category, "scope-1", CONSENT, confirmed)


def governance(mode: Mode, turns: Iterable[Turn], write: MemoryWrite) -> Run:
    log = Log()
    log.start("g", mode=mode)
    for t in turns:
        log.add("g", t)
    log.add("g", write)
    return run(log.events)


@pytest.mark.parametrize("mode", [Mode.STATELESS, Mode.SESSION_ONLY])
def test_relational_writes_are_forbidden_without_continuity(mode: Mode) -> None:
    result = governance(mode, [turn(1)], _write("style"))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_mode_forbidden"]
    assert violations[0]["reason"] == f"mode_{mode.value}"


def test_light_mode_forbids_topic_and_permits_style() -> None:
    forbidden = governance(Mode.LIGHT, [turn(1)], _write("topic"))
    assert forbidden.rules() == ["relational_write_mode_forbidden"]
    assert forbidden.of(OutputKind.VIOLATION)[0]["reason"] == "category_not_permitted_in_light"
    for category in ("style", "boundaries", "friction_history"):
        assert governance(Mode.LIGHT, [turn(1)], _write(category)).rules() == []


def test_full_mode_permits_every_category_once_confirmed() -> None:
    for category in ("topic", "emotional_trajectory", "resonance", "trust_trajectory"):
        assert governance(Mode.FULL, [turn(1)], _write(category)).rules() == []


def test_other_memory_classes_and_blocked_writes_are_not_audited() -> None:
    log = Log()
    log.start("g", mode=Mode.SESSION_ONLY)
    log.add("g", turn(1, crisis=True))
    log.add("g", MemoryWrite(1, "explicit", "style", "pin", CONSENT, False))
    log.add("g", MemoryWriteBlocked(1, "relational", "crisis"))
    assert run(log.events).outputs == []


@pytest.mark.parametrize(("states", "reason"), [
    ({"crisis": True}, "crisis"),
    ({"ae_severity": "med"}, "ae_active"),
    ({"ae_severity": "high"}, "ae_active"),
    ({"care_override": True}, "care_override"),
    ({"care_cooloff": True}, "care_cooloff"),
    ({"legal_hold": True}, "legal_hold"),
])
def test_a_write_in_a_blocking_state_is_a_violation(states: dict[str, Any], reason: str
                                                    ) -> None:
    result = governance(Mode.FULL, [turn(1), turn(2, **states)], _write(k=2))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_in_blocked_state"]
    assert violations[0]["reason"] == reason


@pytest.mark.parametrize("states", [{}, {"ae_severity": "low"}])
def test_a_write_outside_a_blocking_state_is_compliant(states: dict[str, Any]) -> None:
    assert governance(Mode.FULL, [turn(1), turn(2, **states)], _write(k=2)).rules() == []


def test_a_blocking_state_ends_with_the_next_clear_turn() -> None:
    result = governance(Mode.FULL, [turn(1, crisis=True), turn(2)], _write(k=2))
    assert result.rules() == []


def _resonant(k: int, reflection: bool = False) -> Turn:
    return turn(k, resonance_depth=0.85, reflection=reflection)


def test_sustained_high_resonance_without_reflection_blocks_writes() -> None:
    result = governance(Mode.FULL, [_resonant(1), _resonant(2), _resonant(3)], _write(k=3))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_in_blocked_state"]
    assert violations[0]["reason"] == "high_resonance_no_reflection"


def test_a_reflection_turn_clears_high_resonance() -> None:
    turns = [_resonant(1), _resonant(2), _resonant(3), _resonant(4, reflection=True)]
    assert governance(Mode.FULL, turns, _write(k=4)).rules() == []


def test_two_resonant_turns_are_not_yet_sustained() -> None:
    assert governance(Mode.FULL, [_resonant(1), _resonant(2)], _write(k=2)).rules() == []


def test_high_resonance_stays_blocking_until_a_reflection_even_if_it_eases() -> None:
    turns = [_resonant(1), _resonant(2), _resonant(3), turn(4)]
    assert governance(Mode.FULL, turns, _write(k=4)).rules() == [
        "relational_write_in_blocked_state"]


def test_exactly_the_threshold_resonance_counts_as_high() -> None:
    turns = [turn(k, resonance_depth=CFG.high_resonance) for k in (1, 2, 3)]
    assert governance(Mode.FULL, turns, _write(k=3)).rules() == [
        "relational_write_in_blocked_state"]


def test_an_unconfirmed_write_in_full_mode_is_a_violation() -> None:
    result = governance(Mode.FULL, [turn(1)], _write(confirmed=False))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_unconfirmed"]
    assert violations[0]["reason"] == "not_confirmed"
    assert governance(Mode.FULL, [turn(1)], _write(confirmed=True)).rules() == []


def test_confirmation_is_required_only_in_full_mode() -> None:
    assert governance(Mode.LIGHT, [turn(1)], _write(confirmed=False)).rules() == []


def test_a_violation_names_its_event_user_and_session() -> None:
    log = Log(user_id="u9")
    log.start("g", mode=Mode.SESSION_ONLY)
    write = log.add("g", _write())
    violation = run(log.events).of(OutputKind.VIOLATION)[0]
    assert (violation["event_id"], violation["user_id"], violation["session_id"]) == (
        write.event_id, "u9", "g")
    assert violation["schema"] == "drift/1"


def test_one_write_can_break_several_rules() -> None:
    log = Log()
    log.start("g", mode=Mode.FULL)
    log.add("g", turn(1, crisis=True))
    log.add("g", _write(confirmed=False))
    assert sorted(run(log.events).rules()) == [
        "relational_write_in_blocked_state", "relational_write_unconfirmed"]


# --------------------------------------------------------------------------- idempotency


def _mixed_log() -> Log:
    log = Log()
    log.baseline()
    log.session("s1", model=MODEL_B)
    for i in range(3):
        log.session(f"low{i}", model=MODEL_B, notice=True, dynamics=collapsed)
    log.start("g", mode=Mode.FULL, model=MODEL_B)
    log.add("g", turn(1, crisis=True))
    log.add("g", _write("topic", confirmed=False))
    log.end("g", 1)
    return log


def test_duplicated_events_change_nothing() -> None:
    log = _mixed_log()
    clean = run(log.events)
    runner = MemoryReplay(CFG)
    doubled: list[Output] = []
    for event in log.events:
        doubled.extend(runner.feed(event))
        assert runner.feed(event) == ()
    assert doubled == clean.outputs
    assert runner.baselines == clean.runner.baselines


def test_a_duplicate_id_with_another_body_is_ignored() -> None:
    log = Log()
    log.baseline(1)
    log.start("s1")
    first = log.add("s1", turn(1))
    state = initial("u1")
    baselines = UserBaselines()
    for event in log.events:
        done = step(state, baselines, event, CFG)
        state, baselines = done.state, done.baselines
    assert state.session is not None
    turns_before = state.session.turns.n_turns
    copy = evolve(first, body=turn(2, crisis=True), ts_s=first.ts_s + 5.0)
    again = step(state, baselines, copy, CFG)
    effects, after = again.effects, again.baselines
    assert effects.duplicate and effects.outputs == () and after is baselines
    assert again.state is state
    assert state.session.turns.n_turns == turns_before and state.session.guard.blocking == ()


def test_replaying_the_same_events_gives_identical_outputs() -> None:
    log = _mixed_log()
    first = run(log.events).outputs
    second = run(log.events).outputs
    assert first == second
    ids = [o.id for o in first]
    assert len(ids) == len(set(ids))
    kinds = {o.kind for o in first}
    assert {OutputKind.SCORE, OutputKind.RESPONSE, OutputKind.ESCALATION,
            OutputKind.VIOLATION} <= kinds


def test_simulated_model_change_streams_replay_identically_with_unique_ids() -> None:
    scenarios = [Scenario.MODEL_CHANGE_HEALTHY, Scenario.MODEL_CHANGE_COLLAPSED,
                 Scenario.MODEL_CHANGE_UNDISCLOSED, Scenario.SUSTAINED_LOW,
                 Scenario.GOVERNANCE]
    events = [e for user, _ in simulate(7, scenarios, 3, 1.7e9) for e in user]
    first = replay(events, CFG)
    assert replay(events, CFG) == first
    ids = [o.id for o in first]
    assert len(ids) == len(set(ids))


def test_every_output_is_keyed_by_its_user() -> None:
    for out in run(_mixed_log().events).outputs:
        assert out.user_id == payload(out)["user_id"] == "u1"


def test_one_continuity_session_writes_every_kind_of_baseline_with_the_model() -> None:
    log = Log()
    log.baseline(1)
    baselines = run(log.events).baselines()
    assert {m.kind for m in baselines.metas()} == set(BaselineKind)
    assert {m.model for m in baselines.metas()} == {MODEL_A}
    assert baselines.attunement is not None
    assert np.isfinite(np.asarray(baselines.attunement.late_profile)).all()


def test_a_late_copy_of_a_forgotten_users_write_gives_the_same_violation() -> None:
    """A memory-only user is forgotten when their session ends; a copy of one of its
    relational writes that comes back after the user's next session started (nothing of
    the first is kept to call it a duplicate) is a violation under the same id, with the
    same payload: its time is the write's own, not the user's clock."""
    from tests.builders import UserScript, relational_writes

    script = UserScript("forgotten", seed=3)
    script.session("eph", turns=6, ephemeral=True, extra=relational_writes(6, False))
    write = next(e for e in script.events if e.event_type == "memory_write")
    script.session("back", turns=3)
    first = run(script.events).by_event[write.event_id]
    again = run([*script.events, write]).by_event[write.event_id]
    assert [o.kind for o in first] == [OutputKind.VIOLATION]
    assert {payload(o) == payload(first[0]) for o in again} == {True}
    assert len(again) == 2  # taken for new: the user was a user never seen since
