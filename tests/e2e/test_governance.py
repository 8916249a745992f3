"""Memory governance, privacy and forgetting, end to end with real DuckDB files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from drift.model import MemoryWrite, Mode, ModeChanged, Semantic, SessionStart
from drift.simulation import MODEL_A
from streams import topics
from streams.cli import main
from tests.builders import UserScript
from tests.conftest import REPO, TOKEN, events_processed, wait_until


def _bytes_under(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


def test_stateless_and_ephemeral_users_leave_nothing_on_disk(broker, start_worker):
    worker = start_worker()
    stateless = UserScript("ghost-stateless-7781", seed=1)
    ephemeral = UserScript("ghost-ephemeral-5512", seed=2)
    durable = UserScript("durable-user-3301", seed=3)
    for i in range(2):
        stateless.session(f"gs-{i}", mode=Mode.STATELESS,
                          extra=[MemoryWrite(3, "relational", "style", "pref", "consent-1", True)])
        ephemeral.session(f"ge-{i}", ephemeral=True)
        durable.session(f"du-{i}")
    ephemeral.session("ge-2", ephemeral=True)
    broker.send_events(stateless.events + ephemeral.events + durable.events)

    total = len(stateless.events) + len(ephemeral.events) + len(durable.events)
    wait_until(lambda: events_processed(worker) >= total, 90, "every event processed")
    wait_until(lambda: len([m for m in broker.read(topics.VIOLATIONS)
                            if m["user_id"] == "ghost-stateless-7781"]) == 2, 60,
               "violations of the stateless user")
    wait_until(lambda: worker.get("/v1/users/durable-user-3301/baselines", TOKEN)[0] == 200, 60,
               "durable user's baselines")
    assert worker.stop() == 0
    changelog = broker.changelog_bytes()
    assert b"durable-user-3301" in changelog, "the check must be able to see ids in the changelog"
    assert b"ghost-stateless-7781" not in changelog
    assert b"ghost-ephemeral-5512" not in changelog
    data = _bytes_under(worker.data_dir)
    assert b"durable-user-3301" in data, "the check must be able to see ids on disk"
    assert b"ghost-stateless-7781" not in data
    assert b"ghost-ephemeral-5512" not in data


def test_erasure_reaches_every_copy_and_the_next_session_has_no_baseline(broker, start_worker):
    worker = start_worker()
    user = UserScript("erased-user", seed=4)
    marker = "zebra-commitment-4242"
    for i in range(3):
        user.session(f"er-{i}", extra=[Semantic(2, marker, "constraint", "affirm")])
    broker.send_events(user.events)
    wait_until(lambda: worker.get("/v1/users/erased-user/baselines", TOKEN)[0] == 200, 90,
               "baselines")
    status, body = worker.get("/v1/users/erased-user/baselines", TOKEN)
    assert marker in str(body)
    worker.stop()
    assert marker.encode() in _bytes_under(worker.data_dir), "the check must see the value"
    assert marker.encode() in broker.changelog_bytes(), "the check must see it in the changelog"
    worker.start()

    erase = user.erase("er-3", scope="all", request_id="erase-req-1")
    user.ts += 86400
    user.session("er-4")
    broker.send_events(user.events[-15:])
    receipts = wait_until(lambda: [m for m in broker.read(topics.RECEIPTS)
                                   if m["request_id"] == "erase-req-1"], 60, "receipt")
    receipt = receipts[0]
    assert receipt["cause_event_id"] == erase.event_id
    assert receipt["outcome"] == "verified"
    assert {t["kind"] for t in receipt["targets"]} == {"attunement", "semantic"}
    assert all(t["outcome"] == "verified" and t["versions"] >= 1 for t in receipt["targets"])

    after = wait_until(lambda: [m for m in broker.drift_scores("erased-user")
                                if m["session_id"] == "er-4"], 60, "next session's score")
    assert after[0]["baselines"]["attunement"] is None
    assert after[0]["baselines"]["semantic"] is None
    assert after[0]["components"]["attunement_drift"] is None

    status, history = worker.get("/v1/users/erased-user/baselines/history", TOKEN)
    assert status == 200
    tombs = history["tombstones"]
    assert {t["kind"] for t in tombs} == {"attunement", "semantic"}
    assert all(t["request_id"] == "erase-req-1" and t["reason"] == "user_request" for t in tombs)
    assert marker not in str(history)
    assert marker.encode() not in broker.changelog_bytes()
    worker.stop()
    assert marker.encode() not in _bytes_under(worker.data_dir)
    assert marker.encode() not in broker.changelog_bytes()


def test_review_api_refuses_without_a_token_and_hides_unknown_users(broker, start_worker):
    closed = start_worker("closed", token=None)
    for path in ("/v1/users/anyone/baselines", "/v1/users/anyone/baselines/history",
                 "/v1/users/anyone/sessions/s1"):
        assert closed.get(path, "whatever")[0] == 403
    assert closed.post("/v1/users/anyone/erase", "whatever")[0] == 403
    closed.stop()

    worker = start_worker("open")
    user = UserScript("known-user", seed=5)
    for i in range(2):
        user.session(f"kn-{i}")
    broker.send_events(user.events)
    wait_until(lambda: worker.get("/v1/users/known-user/baselines", TOKEN)[0] == 200, 90,
               "baselines")
    unknown = worker.get("/v1/users/nobody-here/baselines", TOKEN)
    for token in (None, "wrong-token"):
        assert worker.get("/v1/users/known-user/baselines", token) == unknown
        assert worker.get("/v1/users/known-user/baselines/history", token) == unknown
    assert unknown[0] == 404
    refused = subprocess.run(
        [sys.executable, "-m", "streams.cli", "baselines", "show", "--user", "known-user",
         "--api", worker.url, "--token", "wrong-token"], cwd=REPO, capture_output=True,
        text=True, timeout=60, check=False)
    assert refused.returncode == 4 and "not visible with this token" in refused.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "streams.cli", "baselines", "show", "--user", "known-user",
         "--api", worker.url, "--token", TOKEN], cwd=REPO, capture_output=True, text=True,
        timeout=60, check=False)
    assert shown.returncode == 0 and json.loads(shown.stdout)["user_id"] == "known-user"
    status, session = worker.get("/v1/users/known-user/sessions/kn-1", TOKEN)
    assert status == 200 and session["turns"] == 12 and session["ended_at"] is not None

    first = worker.post("/v1/users/known-user/erase", TOKEN, {"Idempotency-Key": "api-erase-1"})
    again = worker.post("/v1/users/known-user/erase", TOKEN, {"Idempotency-Key": "api-erase-1"})
    assert first[0] == again[0] == 200
    assert first[1]["id"] == again[1]["id"]
    assert first[1]["targets"] == again[1]["targets"]
    assert first[1]["outcome"] == "verified"
    nobody = worker.post("/v1/users/nobody-here/erase", TOKEN, {"Idempotency-Key": "api-erase-2"})
    assert nobody[0] == 200
    assert set(nobody[1]) == set(first[1])
    assert [t["kind"] for t in nobody[1]["targets"]] == [t["kind"] for t in first[1]["targets"]]
    assert worker.get("/v1/users/known-user/baselines", TOKEN) == unknown


def test_each_violation_rule_fires_on_its_case_and_not_on_its_twin(broker, start_worker):
    start_worker()
    full = UserScript("audit-full", seed=6)
    full.emit("af-1", SessionStart(Mode.FULL, "consent-1", MODEL_A, "g", "p"))
    full.emit("af-1", full.turn(1, reflection=True))
    ok_confirmed = full.emit("af-1", MemoryWrite(1, "relational", "trust_trajectory", "t",
                                                 "consent-1", True))
    unconfirmed = full.emit("af-1", MemoryWrite(1, "relational", "trust_trajectory", "t",
                                                "consent-1", False))
    full.emit("af-1", full.turn(2, crisis=True))
    in_crisis = full.emit("af-1", MemoryWrite(2, "relational", "style", "s", "consent-1", True))
    for k in (3, 4, 5):
        full.emit("af-1", full.turn(k, resonance=0.95))
    intense = full.emit("af-1", MemoryWrite(5, "relational", "style", "s", "consent-1", True))
    full.emit("af-1", full.turn(6, resonance=0.95, reflection=True))
    after_reflection = full.emit("af-1", MemoryWrite(6, "relational", "style", "s", "consent-1",
                                                     True))
    light = UserScript("audit-light", seed=7)
    light.session("al-1", mode=Mode.LIGHT, turns=2, end=False)
    style_ok = light.emit("al-1", MemoryWrite(2, "relational", "style", "s", "consent-1", True))
    topic_bad = light.emit("al-1", MemoryWrite(2, "relational", "topic", "s", "consent-1", True))
    only = UserScript("audit-session-only", seed=8)
    only.session("ao-1", mode=Mode.SESSION_ONLY, turns=2, end=False)
    forbidden = only.emit("ao-1", MemoryWrite(2, "relational", "style", "s", "consent-1", True))
    explicit = only.emit("ao-1", MemoryWrite(2, "explicit", "style", "s", "consent-1", True))
    only.emit("ao-1", ModeChanged(Mode.SESSION_ONLY, Mode.FULL, "consent-2", False))
    broker.send_events(full.events + light.events + only.events)

    expected = {
        (unconfirmed.event_id, "relational_write_unconfirmed"),
        (in_crisis.event_id, "relational_write_in_blocked_state"),
        (intense.event_id, "relational_write_in_blocked_state"),
        (topic_bad.event_id, "relational_write_mode_forbidden"),
        (forbidden.event_id, "relational_write_mode_forbidden"),
    }

    def seen():
        return {(m["event_id"], m["rule"]) for m in broker.read(topics.VIOLATIONS)}

    wait_until(lambda: seen() >= expected, 60, "violations")
    got = seen()
    assert got == expected
    clean = {ok_confirmed.event_id, after_reflection.event_id, style_ok.event_id,
             explicit.event_id}
    assert not clean & {event_id for event_id, _ in got}
    reasons = {m["event_id"]: m["reason"] for m in broker.read(topics.VIOLATIONS)}
    assert reasons[in_crisis.event_id] == "crisis"
    assert reasons[intense.event_id] == "high_resonance_no_reflection"
    assert reasons[forbidden.event_id] == "mode_session_only"


def test_expired_baselines_stop_being_used_and_are_purged_with_a_receipt(broker, start_worker):
    worker = start_worker()
    user = UserScript("returning-user", seed=9)
    for i in range(3):
        user.session(f"rt-{i}", mode=Mode.LIGHT)
    user.ts += 31 * 86400
    user.session("rt-late", mode=Mode.LIGHT)
    broker.send_events(user.events)
    def fresh_baseline():
        status, body = worker.get("/v1/users/returning-user/baselines", TOKEN)
        return status == 200 and all(b["source_session"] == "rt-late" and b["version"] == 1
                                     for b in body["baselines"])

    wait_until(fresh_baseline, 90, "a fresh baseline from the late session")
    late = [m for m in broker.drift_scores("returning-user") if m["session_id"] == "rt-late"]
    assert late == [], "with every baseline expired there is nothing to score against"
    receipts = [m for m in broker.read(topics.RECEIPTS) if m["user_id"] == "returning-user"]
    assert len(receipts) == 1 and receipts[0]["reason"] == "ttl_expired"
    assert {t["kind"] for t in receipts[0]["targets"]} == {"attunement", "semantic", "safety"}
    assert receipts[0]["outcome"] == "verified"


def _partition(user_id: str, partitions: int = 4) -> int:
    from kafka.partitioner import murmur2

    return (murmur2(user_id.encode()) & 0x7FFFFFFF) % partitions


def test_the_sweep_purges_baselines_of_users_who_never_return(broker, start_worker):
    # The sweep runs on a tick, which a partition gets once it has been quiet this long.
    worker = start_worker(config={"worker": {"quiet_after_s": 1.0}})
    quiet = UserScript("quiet-user", seed=10)
    for i in range(2):
        quiet.session(f"q-{i}", mode=Mode.LIGHT)
    broker.send_events(quiet.events)
    wait_until(lambda: worker.get("/v1/users/quiet-user/baselines", TOKEN)[0] == 200, 90,
               "baselines")
    neighbour = next(f"clock-{i}" for i in range(100)
                     if _partition(f"clock-{i}") == _partition("quiet-user"))
    later = UserScript(neighbour, ts=quiet.ts + 31 * 86400, seed=11)
    later.session("n-0", mode=Mode.LIGHT, turns=2)
    broker.send_events(later.events)
    receipts = wait_until(lambda: [m for m in broker.read(topics.RECEIPTS)
                                   if m["user_id"] == "quiet-user"], 60, "the sweep's receipt")
    assert receipts[0]["reason"] == "ttl_expired" and receipts[0]["outcome"] == "verified"
    assert {t["kind"] for t in receipts[0]["targets"]} == {"attunement", "semantic", "safety"}
    assert worker.get("/v1/users/quiet-user/baselines", TOKEN)[0] == 404
    status, history = worker.get("/v1/users/quiet-user/baselines/history", TOKEN)
    assert status == 200 and history["versions"] == []
    assert {t["reason"] for t in history["tombstones"]} == {"ttl_expired"}


def test_baselines_answer_the_same_from_the_api_and_the_data_dir(broker, start_worker, capsys):
    def _cli_json(*argv: str) -> tuple[int, object, str]:
        """The command in this process (a subprocess of it is in the test above)."""
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, json.loads(out) if out.strip() else None, err

    worker = start_worker()
    users = [UserScript(f"same-shape-{i}", seed=60 + i) for i in range(3)]
    for u in users:
        for s in range(3):
            u.session(f"{u.user_id}-s{s}")
    broker.send_events([e for u in users for e in u.events])
    for u in users:
        wait_until(lambda u=u: worker.get(f"/v1/users/{u.user_id}/baselines", TOKEN)[0] == 200,
                   90, "baselines")
    api = ["--api", worker.url, "--token", TOKEN]
    via_api = {action: _cli_json("baselines", action, "--user", "same-shape-1", *api)
               for action in ("show", "history")}
    listed_api = _cli_json("baselines", "list", "--limit", "2", *api)
    assert worker.stop() == 0
    local = ["--data-dir", str(worker.data_dir)]
    for action, (code, body, _) in via_api.items():
        again = _cli_json("baselines", action, "--user", "same-shape-1", *local)
        assert code == again[0] == 0
        assert body == again[1], f"{action}: the API and the file answer differently"
    shown = via_api["show"][1]
    assert isinstance(shown, dict)
    assert all(b["created_at"].endswith("Z") and "T" in b["created_at"]
               for b in shown["baselines"]), "ISO 8601 times"

    code, listed, note = _cli_json("baselines", "list", "--limit", "2", *local)
    assert code == 0 and isinstance(listed, dict)
    assert [u["user_id"] for u in listed["users"]] == ["same-shape-0", "same-shape-1"]
    assert (listed["shown"], listed["total"], listed["truncated"]) == (2, 3, True)
    assert "showing 2 of 3 users" in note
    assert listed_api[0] == 0 and isinstance(listed_api[1], dict)
    assert {k: v for k, v in listed_api[1].items() if k != "scope"} == \
        {k: v for k, v in listed.items() if k != "scope"}

    code, one, _ = _cli_json("baselines", "list", "--user", "same-shape-2", *local)
    assert code == 0 and isinstance(one, dict)
    assert [u["user_id"] for u in one["users"]] == ["same-shape-2"]
    code, _, why = _cli_json("baselines", "show", "--user", "nobody-here", *local)
    assert code == 4 and "no baselines for user 'nobody-here'" in why


def test_an_erasure_right_behind_the_versions_it_erases_finds_them_all(broker, start_worker):
    """The erase request arrives in the same burst as the sessions that built the baselines,
    while checkpoints run back to back: none of the versions may land after the erasure."""
    worker = start_worker(config={"worker": {"checkpoint_interval_s": 0.0}})
    users = [UserScript(f"burst-{i}", seed=80 + i) for i in range(6)]
    for u in users:
        for s in range(3):
            u.session(f"{u.user_id}-s{s}")
        u.erase(f"{u.user_id}-s3", scope="all", request_id=f"burst-erase-{u.user_id}")
    broker.send_events([e for u in users for e in u.events])
    receipts = wait_until(lambda: [m for m in broker.read(topics.RECEIPTS)
                                   if m["request_id"].startswith("burst-erase-")]
                          if len(broker.read(topics.RECEIPTS)) >= len(users) else None,
                          90, "every receipt")
    assert len({r["request_id"] for r in receipts}) == len(users)
    for r in receipts:
        assert r["outcome"] == "verified"
        assert all(t["versions"] >= 1 for t in r["targets"]), "the erasure missed versions"
    for u in users:
        status, history = worker.get(f"/v1/users/{u.user_id}/baselines/history", TOKEN)
        kinds = {v["kind"] for v in history["versions"]} if status == 200 else set()
        assert not kinds & {"attunement", "semantic"}, f"{u.user_id}: versions came back"
