"""The fold, event by event: a model change, its disclosure, the re-attunement, and
sustained low re-attunement (logs from :mod:`tests.drift.fold_log`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from drift.model import MemoryErase, Mode, ModelTriple, NoticeShown, Turn
from drift.outputs import OutputKind
from streams.edge.wire import payload
from tests.drift.fold_log import CFG, MODEL_A, MODEL_B, OFFERS, Log, collapsed, run, turn


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
