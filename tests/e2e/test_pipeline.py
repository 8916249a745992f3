"""End to end on the embedded broker with a real worker process."""

from __future__ import annotations

import json

from drift.model import BaselineKind, DriftConfig
from drift.replay import replay
from drift.simulation import Scenario, SimParams, simulate
from streams import topics
from tests.builders import UserScript
from tests.conftest import output_ids, wait_until


def test_stable_low_shifted_flagged_and_dead_letters_keep_the_worker_going(broker, start_worker):
    worker = start_worker()
    stable = UserScript("stable-user", seed=1)
    shifted = UserScript("shifted-user", seed=2)
    for i in range(3):
        stable.session(f"st-{i}")
        shifted.session(f"sh-{i}")
    stable.session("st-test")
    shifted.session("sh-test", trust=0.6 - 0.2, resonance=0.5 - 0.2)
    broker.send_raw(b"stable-user", b"{not json")
    broker.send_raw(b"someone-else", json.dumps({"schema": "fhr/1"}).encode())
    long_text = "x" * 700
    broker.send_raw(b"stable-user", json.dumps({
        "schema": "fhr/1", "event_id": "bad-1", "event_type": "semantic",
        "ts": "2026-11-30T10:00:00+00:00", "user_id": "stable-user", "session_id": "s",
        "turn": 1, "commitment_id": long_text, "kind": "commitment",
        "stance": "affirm"}).encode())
    broker.send_events(stable.events + shifted.events)

    wait_until(lambda: any(m["session_id"] == "sh-test" for m in broker.drift_scores("shifted-user"))
               and any(m["session_id"] == "st-test" for m in broker.drift_scores("stable-user")),
               90, "test-session scores")
    stable_test = [m for m in broker.drift_scores("stable-user") if m["session_id"] == "st-test"]
    shifted_test = [m for m in broker.drift_scores("shifted-user") if m["session_id"] == "sh-test"]
    assert {m["tier"] for m in stable_test} == {"low"}
    assert shifted_test[0]["checkpoint"] == "turn_5"
    assert shifted_test[0]["tier"] in ("medium", "high")
    attribution = shifted_test[0]["attribution"]
    assert attribution["component"] == "attunement"
    assert {f["feature"] for f in attribution["features"][:2]} == {"trust", "resonance_depth"}
    assert attribution["baseline"]["version"] >= 1
    assert shifted_test[0]["drift_policy_id"] == DriftConfig().drift_policy_id

    dead = wait_until(lambda: len(broker.read(topics.DEADLETTER)) >= 3 and
                      broker.read(topics.DEADLETTER), 30, "dead letters")
    reasons = sorted(m["reason"] for m in dead)
    assert reasons == ["invalid_json", "missing_field", "raw_content_rejected"]
    raw = json.dumps(dead)
    assert long_text not in raw
    for m in dead:
        assert set(m) >= {"reason", "source", "fields", "id"}
        assert m["source"]["topic"] == topics.INPUT
    assert next(m for m in dead if m["reason"] == "raw_content_rejected")["fields"] == [
        "commitment_id"]
    assert worker.proc is not None and worker.proc.poll() is None


def test_safety_mismatch_holds_across_sessions_until_reconfirmed(broker, start_worker):
    start_worker()
    user = UserScript("held-user", seed=3)
    for i in range(2):
        user.session(f"h-{i}")
    user.session("h-mismatch", gate="gate-2")
    user.session("h-next", gate="gate-2", end=False)
    user.reconfirm("h-next", BaselineKind.ATTUNEMENT)
    release = user.reconfirm("h-next", BaselineKind.SAFETY)
    user.emit("h-next", user.turn(13))
    user.ts += 86400
    user.session("h-after", gate="gate-2")
    broker.send_events(user.events)

    def responses():
        return [m for m in broker.read(topics.RESPONSES) if m["user_id"] == "held-user"]

    wait_until(lambda: any(m["session_id"] == "h-after" for m in broker.drift_scores("held-user")),
               90, "scores of the session after the release")
    scores = broker.drift_scores("held-user")
    start = next(m for m in scores if m["session_id"] == "h-mismatch")
    assert start["checkpoint"] == "session_start"
    assert start["tier"] == "high" and start["components"]["safety_drift"] > 0
    assert start["attribution"]["component"] == "safety"
    next_scores = [m for m in scores if m["session_id"] == "h-next"]
    assert next_scores and all(m["effective_tier"] == "high" for m in next_scores)
    actions = [(m["session_id"], m["action"]) for m in responses()]
    assert actions.count(("h-mismatch", "continuity_rebaseline_required")) == 1
    assert ("h-next", "continuity_rebaseline_required") not in actions
    released = [m for m in responses() if m["action"] == "hold_released"]
    assert len(released) == 1 and released[0]["cause_event_id"] == release.event_id
    after = [m for m in scores if m["session_id"] == "h-after"]
    assert all(m["components"]["safety_drift"] == 0 for m in after)


def test_outputs_match_a_pure_replay_and_duplicates_change_nothing(broker, start_worker):
    start_worker()
    events = []
    for evs, _ in simulate(5, [Scenario.STABLE, Scenario.ATTUNEMENT_SHIFT,
                               Scenario.SEMANTIC_CONTRADICTION, Scenario.GOVERNANCE],
                           2, 1.7e9, SimParams()):
        events.extend(evs)
    expected = replay(events, DriftConfig())
    broker.send_events(events)
    broker.send_events(events[::7])
    want = {kind: {o.id for o in expected if o.kind.value == kind}
            for kind in ("score", "response", "violation")}
    topic_of = {"score": topics.SCORES, "response": topics.RESPONSES,
                "violation": topics.VIOLATIONS}

    def caught_up():
        return all(output_ids(broker.read(topic_of[k])) >= want[k] for k in want)

    wait_until(caught_up, 180, "all expected outputs")
    for kind, ids in want.items():
        got = broker.read(topic_of[kind])
        assert output_ids(got) == ids
        assert len(got) == len(ids), f"duplicate {kind} messages"


def test_a_record_no_decoder_can_read_does_not_stop_the_worker(broker, start_worker):
    worker = start_worker()
    before = UserScript("poison-before", seed=21)
    after = UserScript("poison-after", seed=22)
    for i in range(2):
        before.session(f"pb-{i}")
        after.session(f"pa-{i}")
    broker.send_events(before.events)
    broker.send_raw(b"poison-before", b"[" * 5000 + b"]" * 5000)
    broker.send_raw(b"poison-before", '{"schema": "fhr/1"}'.encode("utf-16"))
    broker.send_raw(None, b"\x00\xff" * 100)
    broker.send_events(after.events)

    def settled():
        scored = {m["user_id"] for m in broker.read(topics.SCORES)}
        return {"poison-before", "poison-after"} <= scored and broker.read(topics.DEADLETTER)

    wait_until(settled, 90, "scores of the users before and after the poison records")
    wait_until(lambda: len(broker.read(topics.DEADLETTER)) >= 3, 30, "three dead letters")
    reasons = sorted(m["reason"] for m in broker.read(topics.DEADLETTER))
    assert reasons == ["invalid_json", "invalid_json", "too_deep"]
    assert worker.proc is not None and worker.proc.poll() is None
