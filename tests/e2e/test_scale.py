"""State follows its partition: workers of one group hand partitions over through the changelog.

Every test compares with the pure replay of the same events (which a single worker
matches, ``test_pipeline.py``): after a handover, a restore or a killed worker of ``run
--workers``, the set of output ids is the replay's, so nothing is lost, nothing is new, and a new
owner scored with the baselines, holds and ladder it restored (without them its
scores, HOLDs and responses would differ from the replay's). Three workers of one group
killed, added and stopped are in ``test_log_function.py``, against the fold of the log.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from functools import partial
from pathlib import Path

from drift.model import FhrEvent
from drift.simulation import Scenario, SimParams, simulate
from streams.metrics import CHECKPOINT_STEPS
from tests.conftest import FAST, Broker, WorkerProcess, samples, wait_until
from tests.e2e.group import owned, settled
from tests.e2e.outputs import REPLAYED, published_ids, replay_ids


def _events(users: int, scenarios: list[Scenario]) -> list[FhrEvent]:
    events: list[FhrEvent] = []
    for evs, _ in simulate(31, scenarios, users, 1.7e9, SimParams()):
        events.extend(evs)
    events.sort(key=lambda e: e.ts_s)
    return events


def _wait_for(broker: Broker, want: dict[str, set[str]], what: str) -> None:
    def caught_up() -> bool:
        got = published_ids(broker)
        return all(got[k] >= want[k] for k in want)

    wait_until(caught_up, 180, what, interval_s=0.5,
               detail=lambda: str({k: len(want[k] - v) for k, v in published_ids(broker).items()}))


def test_a_new_owner_restores_state_and_goes_on_as_one_worker_would(broker, start_worker):
    events = _events(8, [Scenario.STABLE, Scenario.ATTUNEMENT_SHIFT, Scenario.SAFETY_MISMATCH,
                         Scenario.MODEL_CHANGE_HEALTHY])
    cut = len(events) // 2
    first = start_worker("first")
    broker.send_events(events[:cut])
    _wait_for(broker, replay_ids(events[:cut]), "the first half's outputs")
    assert first.stop() == 0

    second = start_worker("second")  # a fresh data directory: all it has is the changelog
    broker.send_events(events[cut:])
    want = replay_ids(events)
    _wait_for(broker, want, "every output after the handover")
    assert published_ids(broker) == want
    for kind, topic in REPLAYED.items():
        got = broker.read(topic)
        assert len(got) == len(want[kind]), f"a {kind} was published twice"
    status, body = second.get("/readyz")
    assert status == 200 and body["restoring"] is False


def test_run_workers_n_shares_the_group_and_restarts_a_killed_worker(broker, tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from streams.broker import free_loopback_port
    from tests.conftest import REPO, TOKEN

    base = free_loopback_port()
    while any(_port_taken(base + i) for i in range(3)):
        base = free_loopback_port()
    cfg = tmp_path / "fast.toml"
    cfg.write_text("[worker]\n" + "".join(f"{k} = {v}\n" for k, v in FAST["worker"].items()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
    env.update(CONTINUITY_REVIEW_TOKEN=TOKEN, PYTHONWARNINGS="ignore")
    log = open(tmp_path / "supervisor.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "streams.cli", "run", "--workers", "3",
                             "--broker", broker.bootstrap, "--data-dir", str(tmp_path / "data"),
                             "--web-port", str(base), "--config", str(cfg)],
                            cwd=REPO, env=env, stdout=log, stderr=log)

    def readyz(i: int) -> dict:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{base + i}/readyz", timeout=2) as r:
                return dict(json.loads(r.read()), status=r.status)
        except (OSError, http.client.HTTPException):  # not up yet
            return {}

    def divided() -> bool:
        answers = [readyz(i) for i in range(3)]
        owned = sorted(p for a in answers for p in a.get("partitions", []))
        return all(a.get("status") == 200 for a in answers) and owned == [0, 1, 2, 3]

    try:
        wait_until(divided, 90, "three workers sharing the four partitions")
        assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
            "worker-0", "worker-1", "worker-2"]
        events = _events(6, [Scenario.STABLE, Scenario.SAFETY_MISMATCH, Scenario.ATTUNEMENT_SHIFT])
        half = len(events) // 2
        broker.send_events(events[:half])
        _wait_for(broker, replay_ids(events[:half]), "outputs of the first half")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 3
        os.kill(int(children[0]), signal.SIGKILL)
        broker.send_events(events[half:])
        want = replay_ids(events)
        _wait_for(broker, want, "every output after a worker was killed")
        wait_until(divided, 90, "the killed worker restarted and the partitions divided again")
        assert published_ids(broker) == want
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def _port_taken(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


#: The review API's answers that tell a client to retry (``Retry-After``).
_RETRY = {"partition_moving", "owner_unreachable"}


def _as_a_client(call: Callable[[], tuple[int, object]], what: str) -> tuple[int, object]:
    """``call``'s answer once it is not a "retry" one, retried as a client would.

    A worker learns a partition's new owner from the owners topic a moment after
    the owner says it is ready, so a forwarded request can meet a 503 just then.
    """
    def answered() -> tuple[int, object] | None:
        status, body = call()
        moving = status == 503 and isinstance(body, dict) and body.get("error") in _RETRY
        return None if moving else (status, body)
    answer: tuple[int, object] = wait_until(answered, 30, what, interval_s=0.5)
    return answer


def test_any_worker_answers_the_review_api_for_any_user(broker, start_worker):
    from streams.kafka.owners import partition_of
    from tests.builders import UserScript
    from tests.conftest import TOKEN

    one, two = start_worker("one", wait_ready=False), start_worker("two", wait_ready=False)
    one.wait_ready()
    two.wait_ready()
    wait_until(settled([one, two]), 60, "two workers sharing the partitions")
    users = [UserScript(f"review-{i}", seed=40 + i) for i in range(8)]
    for u in users:
        for s in range(3):
            u.session(f"{u.user_id}-s{s}")
    broker.send_events([e for u in users for e in u.events])
    for u in users:
        wait_until(lambda u=u: any(w.get(f"/v1/users/{u.user_id}/baselines", TOKEN)[0] == 200
                                   for w in (one, two)), 90, f"baselines of {u.user_id}")

    def owner(user_id: str) -> WorkerProcess:
        p = partition_of(user_id, 4)
        return one if p in owned(one) else two

    split = {id(owner(u.user_id)) for u in users}
    assert len(split) == 2, "the users must fall on both workers for the test to mean anything"
    for u in users:
        path = f"/v1/users/{u.user_id}/baselines"
        answers = [_as_a_client(partial(w.get, path, TOKEN), path) for w in (one, two)]
        assert answers[0] == answers[1] and answers[0][0] == 200
        history = [_as_a_client(partial(w.get, path + "/history", TOKEN), path)
                   for w in (one, two)]
        assert history[0] == history[1] and history[0][0] == 200
    for w in (one, two):
        nobody = _as_a_client(partial(w.get, "/v1/users/nobody-at-all/baselines", TOKEN),
                              "an unknown user")
        assert nobody == w.get(f"/v1/users/{users[0].user_id}/baselines", "wrong-token")
        assert nobody[0] == 404

    target = users[0].user_id
    elsewhere = two if owner(target) is one else one
    status, receipt = _as_a_client(lambda: elsewhere.post(
        f"/v1/users/{target}/erase", TOKEN, {"Idempotency-Key": "forwarded-erase-1"}),
        "the forwarded erasure")
    assert status == 200 and receipt["outcome"] == "verified"
    assert all(t["versions"] >= 1 for t in receipt["targets"]), "the owner erased the versions"
    assert owner(target).get(f"/v1/users/{target}/baselines", TOKEN)[0] == 404

    victim = owner(users[1].user_id)
    survivor = two if victim is one else one
    victim.kill()
    assert survivor.get(f"/v1/users/{users[1].user_id}/baselines", "wrong-token")[0] == 404, \
        "the token is checked before anything is forwarded"
    wait_until(lambda: survivor.get(f"/v1/users/{users[1].user_id}/baselines", TOKEN)[0] == 200,
               60, "the survivor answering after it took the partition over")


def _step_counts(worker: WorkerProcess) -> dict[str, float]:
    """How many times each checkpoint step was timed, from the worker's metrics."""
    return {labels["step"]: value for labels, value
            in samples(worker, "continuity_checkpoint_step_seconds", "_count")}


def test_readyz_is_503_while_a_partition_is_restored(broker, start_worker):
    import json
    import threading
    import urllib.error
    import urllib.request

    from tests.builders import UserScript

    first = start_worker("before", {"worker": {"log_level": "debug"}})
    users = [UserScript(f"bulk-{i:05d}", seed=i) for i in range(1500)]
    for u in users:
        u.session(f"{u.user_id}-s0", turns=6)
    events = [e for u in users for e in u.events]
    broker.send_events(events)
    from tests.conftest import events_processed
    wait_until(lambda: events_processed(first) >= len(events), 180, "every event processed")
    wait_until(lambda: _step_counts(first)["rows"] >= 1, 30, "a checkpoint written")
    counts = _step_counts(first)
    assert set(counts) == set(CHECKPOINT_STEPS)
    assert counts["states"] == counts["rows"] == counts["duckdb"] >= 1
    assert first.stop() == 0
    # At debug, each checkpoint says what it covered and how long each step took (to match a
    # spell of slow outputs with it), and names no user.
    first_log = (first.data_dir.parent / "before.log").read_text()
    assert "bulk-" not in first_log
    committed = [json.loads(line) for line in first_log.splitlines()
                 if line.startswith("{") and '"checkpoint committed"' in line]
    assert sum(c["records"] for c in committed) >= len(events)
    assert sum(c["states"] for c in committed) >= len(users)
    for c in committed:
        steps = [s for s in CHECKPOINT_STEPS
                 if s != "roll" or "roll" in c["steps_ms"]]  # a roll only when one was due
        assert list(c["steps_ms"]) == steps and min(c["steps_ms"].values()) >= 0

    seen: list[tuple[int, bool]] = []
    done = threading.Event()
    second = WorkerProcess(broker.bootstrap, first.data_dir.parent / "after",
                           {"worker": {"log_level": "info"}})

    def poll() -> None:
        while not done.is_set():
            try:
                with urllib.request.urlopen(second.url + "/readyz", timeout=2) as r:
                    seen.append((r.status, json.loads(r.read())["restoring"]))
            except urllib.error.HTTPError as exc:
                seen.append((exc.code, json.loads(exc.read())["restoring"]))
            except (OSError, http.client.HTTPException):  # not up yet
                pass
            done.wait(0.01)

    second.start(wait_ready=False)
    poller = threading.Thread(target=poll)
    poller.start()
    try:
        second.wait_ready()
        # the poller's newest answer can predate the one wait_ready saw: let it see it too
        wait_until(lambda: bool(seen) and seen[-1][0] == 200, 10, "the poller seeing ready")
    finally:
        done.set()
        poller.join()
        second.stop()
    log = (second.data_dir.parent / "after.log").read_text()
    restored = [json.loads(line) for line in log.splitlines()
                if line.startswith("{") and '"partition restored"' in line]
    assert sorted(r["partitions"][0] for r in restored) == [0, 1, 2, 3]
    # 1,500 users' rows, about 0.65 MB as the changelog holds them (compressed)
    assert sum(r["bytes"] for r in restored) > 500_000, "the state must be worth restoring"
    assert (503, True) in seen, f"never saw 503 while restoring: {sorted(set(seen))}"
    assert seen[-1] == (200, False)
    first_ready = seen.index((200, False))
    assert (503, True) not in seen[first_ready:], "ready, then restoring again"
