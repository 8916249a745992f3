"""The model-change protocol and sustained-low escalation, end to end."""

from __future__ import annotations

from drift.model import Mode, NoticeShown, SessionEnd, SessionStart
from drift.simulation import MODEL_A, MODEL_B
from streams import topics
from tests.builders import UserScript
from tests.conftest import events_processed, wait_until


def _baseline(script: UserScript, prefix: str, n: int = 3) -> None:
    for i in range(n):
        script.session(f"{prefix}-{i}")


def test_model_change_protocol(broker, start_worker):
    worker = start_worker()
    healthy = UserScript("mc-healthy", seed=11)
    collapsed = UserScript("mc-collapsed", seed=12)
    undisclosed = UserScript("mc-undisclosed", seed=13)
    for s, p in ((healthy, "h"), (collapsed, "c"), (undisclosed, "u")):
        _baseline(s, p)
    for script, sid, trust, resonance in ((healthy, "h-new", 0.6, 0.5),
                                          (collapsed, "c-new", 0.2, 0.1)):
        script.emit(sid, SessionStart(Mode.FULL, "consent-1", MODEL_B, "gate-1", "policy-1"))
        script.emit(sid, NoticeShown(MODEL_B))
        for k in range(1, 13):
            script.emit(sid, script.turn(k, trust=trust, resonance=resonance))
        script.emit(sid, SessionEnd(12, "closed"))
    undisclosed.session("u-new", model=MODEL_B)
    events = healthy.events + collapsed.events + undisclosed.events
    broker.send_events(events)
    wait_until(lambda: events_processed(worker) >= len(events), 90, "every event processed")

    responses = broker.read(topics.RESPONSES)

    def actions(session_id):
        return [m["action"] for m in responses if m["session_id"] == session_id]

    assert actions("h-new")[:2] == ["model_change_notice", "posture_downgrade"]
    assert "reattune_completed" in actions("h-new")
    completed = next(m for m in responses if m["action"] == "reattune_completed")
    assert completed["posture"] == "restored" and completed["reattune_quality_score"] >= 0.6
    assert "reattune_failed" in actions("c-new")
    failed = next(m for m in responses if m["action"] == "reattune_failed")
    assert failed["offers"] == ["reset_session_only", "continue_conservative"]
    assert failed["reattune_quality_score"] < 0.6
    notice = next(m for m in responses if m["action"] == "model_change_notice")
    assert notice["previous_model"]["model_version"] == MODEL_A.model_version
    assert notice["model"]["model_version"] == MODEL_B.model_version

    violations = broker.read(topics.VIOLATIONS)
    undisclosed_v = [m for m in violations if m["rule"] == "model_change_undisclosed"]
    assert [m["session_id"] for m in undisclosed_v] == ["u-new"]


def test_sustained_low_escalates_once_per_streak_and_rearms(broker, start_worker):
    worker = start_worker()
    user = UserScript("low-user", seed=14)
    _baseline(user, "l")
    for i in range(4):
        user.session(f"low-a{i}", trust=0.15, resonance=0.1)
    user.session("recovered")
    for i in range(3):
        user.session(f"low-b{i}", trust=0.15, resonance=0.1)
    broker.send_events(user.events)
    wait_until(lambda: events_processed(worker) >= len(user.events), 90, "every event processed")
    escalations = [m for m in broker.read(topics.ESCALATIONS) if m["user_id"] == "low-user"]
    assert [m["session_id"] for m in escalations] == ["low-a2", "low-b2"]
    assert all(m["kind"] == "sustained_low_reattune" and m["route"] == "continuity_review"
               for m in escalations)
    quality = {m["session_id"]: m["reattune_quality_score"] for m in broker.read(topics.SCORES)
               if m.get("score_kind") == "reattune_quality"}
    assert quality["recovered"] >= 0.6
    assert all(quality[f"low-a{i}"] < 0.6 for i in range(4))
