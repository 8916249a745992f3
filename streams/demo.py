"""``continuity-drift demo``: embedded broker, a worker, simulated traffic and a live summary."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer

from drift.model import FhrEvent, MemoryErase
from drift.simulation import Scenario, SimParams, TruthRow
from streams import topics
from streams.broker import EmbeddedBroker
from streams.simulate import kafka_producer, merged_events, produce


def cmd_demo(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="continuity-drift-demo-"))
    truth: list[TruthRow] = []
    events = list(merged_events(args.seed, list(Scenario), args.users,
                                time.time() - 10 * 86400, SimParams(), truth))
    with EmbeddedBroker(log_path=None) as broker:
        print(f"embedded broker (in memory) at {broker.bootstrap}")
        topics.create_topics(broker.bootstrap, 4)
        env = dict(os.environ, CONTINUITY_REVIEW_TOKEN=os.environ.get(
            "CONTINUITY_REVIEW_TOKEN", "demo-token"))
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "run", "--broker", broker.bootstrap,
             "--data-dir", str(data_dir), "--web-port", str(args.web_port)], env=env)
        try:
            return _watch(args, broker.bootstrap, worker, events, data_dir,
                          env["CONTINUITY_REVIEW_TOKEN"])
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def _watch(args: argparse.Namespace, bootstrap: str, worker: subprocess.Popen[bytes],
           events: list[FhrEvent], data_dir: Path, token: str) -> int:
    """Send the traffic and print what the service publishes until Ctrl-C or --duration."""
    consumer = KafkaConsumer(
        topics.SCORES, topics.RESPONSES, topics.ESCALATIONS, topics.VIOLATIONS,
        topics.RECEIPTS, topics.DEADLETTER, bootstrap_servers=bootstrap,
        auto_offset_reset="earliest", group_id=None, consumer_timeout_ms=200)
    stop = {"now": False}

    def _stop(*_: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        print(f"metrics:  http://127.0.0.1:{args.web_port}/metrics")
        print(f"review:   curl -H 'Authorization: Bearer {token}' "
              f"http://127.0.0.1:{args.web_port}/v1/users/{events[0].user_id}/baselines")
        print(f"data:     {data_dir}")
        print(f"sending {len(events)} events from {len(Scenario)} scenarios x {args.users} users "
              f"at {args.rate:.0f}/s; Ctrl-C stops")
        events.extend(_governance_erasures(events))
        sender = threading.Thread(target=_send_traffic,
                                  args=(bootstrap, events, args.rate), daemon=True)
        sender.start()
        tally: dict[str, Counter[str]] = {t: Counter() for t in (
            "scores", "tiers", "responses", "violations", "escalations", "receipts",
            "deadletters")}
        started = time.monotonic()
        last_print = 0.0
        while not stop["now"]:
            if worker.poll() is not None:
                print("worker exited; stopping", file=sys.stderr)
                return 1
            for msg in consumer:
                _tally(tally, msg.topic, json.loads(msg.value))
            now = time.monotonic()
            if now - last_print >= 2.0:
                last_print = now
                print(_summary(tally, now - started), flush=True)
            if args.duration and now - started >= args.duration:
                break
        print(_summary(tally, time.monotonic() - started))
        print(f"data and DuckDB file: {data_dir}; governance summary: "
              f"continuity-drift report --data-dir {data_dir}")
        return 0
    finally:
        consumer.close()


def _governance_erasures(events: list[FhrEvent]) -> list[FhrEvent]:
    """One relational erasure per governance user, after their traffic."""
    last: dict[str, FhrEvent] = {}
    for e in events:
        if e.user_id.startswith(Scenario.GOVERNANCE.value):
            last[e.user_id] = e
    return [FhrEvent(f"{e.event_id}-erase", "memory_erase", e.ts_s + 60.0, e.user_id,
                     e.session_id, False,
                     MemoryErase("relational", "all", "user_request", f"demo-erase-{e.user_id}"))
            for e in last.values()]


def _send_traffic(bootstrap: str, events: list[FhrEvent], rate: float) -> None:
    """The simulated traffic, then records a producer gets wrong, to show dead letters."""
    produce(bootstrap, iter(events), rate, False)
    producer = kafka_producer(bootstrap)
    try:
        producer.send(topics.INPUT, key=b"demo-user", value=b"{not json")
        producer.send(topics.INPUT, key=b"demo-user", value=json.dumps(
            {"schema": "fhr/1", "event_id": "demo-bad-1", "event_type": "turn",
             "ts": "2026-11-30T10:00:00+00:00", "user_id": "demo-user",
             "session_id": "demo-s", "turn": 0}).encode())
        producer.send(topics.INPUT, key=b"someone-else", value=json.dumps(
            {"schema": "fhr/1", "event_id": "demo-bad-2", "event_type": "session_end",
             "ts": "2026-11-30T10:00:00+00:00", "user_id": "demo-user",
             "session_id": "demo-s", "turns": 1, "reason": "closed"}).encode())
        producer.flush()
    finally:
        producer.close()


def _tally(tally: dict[str, Counter[str]], topic: str, p: dict[str, Any]) -> None:
    """Count one published output into the live summary's counters."""
    if topic == topics.SCORES:
        kind = p.get("score_kind", "")
        tally["scores"][kind] += 1
        if kind == "continuity_drift":
            tally["tiers"][p["tier"]] += 1
    elif topic == topics.RESPONSES:
        tally["responses"][p["action"]] += 1
    elif topic == topics.VIOLATIONS:
        tally["violations"][p["rule"]] += 1
    elif topic == topics.ESCALATIONS:
        tally["escalations"][p["kind"]] += 1
    elif topic == topics.RECEIPTS:
        tally["receipts"][p["outcome"]] += 1
    elif topic == topics.DEADLETTER:
        tally["deadletters"][p["reason"]] += 1


def _summary(tally: dict[str, Counter[str]], elapsed: float) -> str:
    """The live summary's lines.

    >>> tally = {t: Counter() for t in ("scores", "tiers", "responses", "violations",
    ...                                 "escalations", "receipts", "deadletters")}
    >>> _tally(tally, topics.SCORES, {"score_kind": "continuity_drift", "tier": "low"})
    >>> print(_summary(tally, 4.0))
    [    4s] scores: continuity_drift=1 | tiers: low=1
            responses: -
            violations: - | escalations: - | receipts: - | dead letters: -
    """
    def fmt(c: Counter[str]) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(c.items())) or "-"
    return (f"[{elapsed:5.0f}s] scores: {fmt(tally['scores'])} | tiers: {fmt(tally['tiers'])}\n"
            f"        responses: {fmt(tally['responses'])}\n"
            f"        violations: {fmt(tally['violations'])} | escalations: "
            f"{fmt(tally['escalations'])} | receipts: {fmt(tally['receipts'])} | "
            f"dead letters: {fmt(tally['deadletters'])}")
