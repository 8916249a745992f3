"""Outputs are a function of the log: kills, restarts and partition moves change none.

The oracle is the pure fold of the log as the broker holds it (duplicates and hostile
records included): each record read back in partition order, decoded, folded per user
(``drift.replay``), or dead-lettered by its place. A run with faults must publish, after
dropping duplicates by ``id``, exactly the oracle's ids with exactly its payloads.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from drift.model import DriftConfig, FhrEvent
from drift.simulation import Scenario, SimParams, simulate
from streams import topics
from streams.edge.codec import encode_event
from streams.oracle import fold_log
from tests.builders import memory_only_users
from tests.conftest import events_processed, wait_until
from tests.e2e.group import owned, settled

APP_ID = "continuity-drift"
OUTPUT_TOPICS = (topics.SCORES, topics.RESPONSES, topics.ESCALATIONS, topics.VIOLATIONS,
                 topics.RECEIPTS, topics.DEADLETTER)
SCENARIOS = [Scenario.STABLE, Scenario.ATTUNEMENT_SHIFT, Scenario.SAFETY_MISMATCH,
             Scenario.MODEL_CHANGE_COLLAPSED, Scenario.GOVERNANCE, Scenario.STATELESS,
             Scenario.EPHEMERAL, Scenario.SUSTAINED_LOW]
HOSTILE = [b"[" * 3000 + b"]" * 3000, b"\x00\xff" * 50, b'{"schema": "fhr/9"}',
           b'{"schema":"fhr/1","event_id":"x","event_type":"turn"}', "{}".encode("utf-16")]
#: Quiet partitions get tick records early, so the log the oracle folds holds them too.
CONFIG = {"worker": {"checkpoint_interval_s": 0.3, "quiet_after_s": 1.0}}


def _log(seed: int) -> list[tuple[bytes | None, bytes]]:
    """Users of every scenario and memory-only users (tests.builders), interleaved a few
    events at a time (so a partition holds users whose clocks are far apart), now and then
    a few of a user's events lost (a producer that drops some: turns missing, sessions
    left open and closed by the next one's start), duplicates re-sent 1 to 300 records
    after their first copy, and hostile records between them."""
    rng = random.Random(seed)
    users = [list(evs) for evs, _ in simulate(seed, SCENARIOS, 3, 1.7e9, SimParams())]
    by_user: dict[str, list[FhrEvent]] = {}
    for e in memory_only_users():  # outputs from state that memory alone holds
        by_user.setdefault(e.user_id, []).append(e)
    users += list(by_user.values())
    events: list[FhrEvent] = []
    while users:
        user = rng.choice(users)
        taken = rng.randint(1, 6)
        events.extend(user[:taken])
        lost = rng.randint(1, 6) if rng.random() < 0.15 else 0
        del user[:taken + lost]
        users = [u for u in users if u]
    records: list[tuple[bytes | None, bytes]] = [
        (e.user_id.encode(), encode_event(e)) for e in events]
    for _ in range(len(records) // 12):
        i = rng.randrange(len(records) - 1)
        records.insert(min(len(records), i + rng.randint(1, 300)), records[i])
    for value in HOSTILE * 4:
        key = rng.choice([None, records[rng.randrange(len(records))][0]])
        records.insert(rng.randrange(len(records)), (key, value))
    return records


def _read_back(bootstrap: str) -> list[tuple[int, int, bytes | None, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False)
    try:
        parts = [TopicPartition(topics.INPUT, p)
                 for p in sorted(consumer.partitions_for_topic(topics.INPUT) or [])]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        out: list[tuple[int, int, bytes | None, bytes]] = []
        while True:
            for tp, msgs in consumer.poll(timeout_ms=200).items():
                out.extend((tp.partition, m.offset, m.key, m.value) for m in msgs)
            if all(consumer.position(tp) >= (consumer.highwater(tp) or 1 << 62)
                   for tp in parts):
                return sorted(out)
    finally:
        consumer.close()


def oracle(log: list[tuple[int, int, bytes | None, bytes]]) -> dict[str, dict[str, Any]]:
    """The outputs of the pure fold of the log (``streams.oracle``), by id, as published
    payloads (a receipt by its user: the store decides its targets)."""
    return {i: json.loads(e.value) if e.value is not None else {"user_id": e.user_id}
            for i, e in fold_log(log, DriftConfig(), APP_ID).items()}


def _published_with_ids(broker: Any) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {}
    for topic in OUTPUT_TOPICS:
        for m in broker.read(topic):
            m.pop("_key")
            body = {"user_id": m["user_id"]} if topic == topics.RECEIPTS else m
            first = got.setdefault(m["id"], body)
            assert first == body, f"two payloads under one id on {topic}: {first} {body}"
    return got


def _compare(expected: dict[str, dict[str, Any]], got: dict[str, dict[str, Any]], seed: int
             ) -> None:
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    differ = sorted(i for i in set(expected) & set(got) if expected[i] != got[i])
    assert not (missing or extra or differ), (
        f"seed {seed}: {len(missing)} missing, {len(extra)} extra, {len(differ)} different "
        f"of {len(expected)}; first missing {[expected[i] for i in missing[:2]]}, extra "
        f"{[got[i] for i in extra[:2]]}, differ {[(expected[i], got[i]) for i in differ[:1]]}")


def _settle_and_compare(broker: Any, seed: int) -> None:
    """Wait until the ids published are the oracle's, then compare the payloads too.

    The oracle is folded from the log as it stands at each look: the workers write tick
    records into partitions that have gone quiet, after the last input, and those are
    part of the log their outputs must be a function of. With ``KILL_DUMP`` set, the
    last look (oracle, outputs, log) is written to that file.
    """
    seen: dict[str, dict[str, dict[str, Any]]] = {}

    def settled() -> bool:
        log = _read_back(broker.bootstrap)
        seen["expected"], seen["got"] = oracle(log), _published_with_ids(broker)
        if os.environ.get("KILL_DUMP"):
            with open(os.environ["KILL_DUMP"], "w") as f:
                json.dump({**seen, "log": [(p, o, k and k.decode("latin1"),
                                            v.decode("latin1")) for p, o, k, v in log]}, f)
        return set(seen["expected"]) == set(seen["got"])

    def difference() -> str:
        expected, got = seen["expected"], seen["got"]
        gone = [expected[i] for i in sorted(set(expected) - set(got))]
        extra = [got[i] for i in sorted(set(got) - set(expected))]
        return (f"seed {seed}: {len(gone)} missing, {len(extra)} extra of {len(expected)}; "
                f"e.g. missing {gone[:2]}, extra {extra[:2]}")

    wait_until(settled, 120, f"the outputs of the oracle (seed {seed})", interval_s=0.5,
               detail=difference)
    _compare(seen["expected"], seen["got"], seed)


def _seed() -> int:
    return int(os.environ.get("KILL_SEED", random.SystemRandom().randrange(1 << 16)))


def _send(broker: Any, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = broker.producer()
    for key, value in records:
        producer.send(topics.INPUT, key=key, value=value)
    producer.flush()


@pytest.mark.parametrize(("kills", "producer"),
                         [(0, "aiokafka"), (3, "aiokafka"), (3, "librdkafka")])
def test_sigkills_at_random_points_publish_exactly_the_pure_fold_of_the_log(
        broker, start_worker, kills, producer):
    seed = _seed()
    print(f"KILL_SEED={seed}")
    rng = random.Random(seed)
    records = _log(seed)
    worker = start_worker("victim", config={
        "worker": {**CONFIG["worker"], "producer": producer}})
    cuts = sorted(rng.sample(range(len(records) // 5, len(records)), kills))
    sent = 0
    for cut in cuts:
        sent_before = sent
        _send(broker, records[sent:cut])
        sent = cut
        goal = rng.randint(1, max(1, (cut - sent_before) // 2))
        wait_until(lambda g=goal: events_processed(worker) >= g, 60,
                   f"{goal} events processed before a kill (seed {seed})", interval_s=0.02)
        worker.kill()
        worker.start()
    _send(broker, records[sent:])
    _settle_and_compare(broker, seed)


def test_partitions_moved_between_workers_publish_exactly_the_pure_fold_of_the_log(
        broker, start_worker):
    """Three workers of one group: one SIGKILLed, one added, one stopped mid-stream; the
    outputs are the oracle's, as one worker without faults would publish them (each new
    owner restores the partitions it takes from the changelog its producer wrote; a
    changelog librdkafka's producer wrote is restored by the kills above). The added
    worker is given partitions, the stopped one stops cleanly, and the group's commits
    reach the end of the log."""
    seed = _seed()
    print(f"KILL_SEED={seed}")
    rng = random.Random(seed)
    records = _log(seed)
    workers = [start_worker(f"w{i}", config=CONFIG) for i in range(3)]
    quarter = len(records) // 4
    _send(broker, records[:quarter])
    goal = rng.randint(1, quarter // 2)
    wait_until(lambda: sum(events_processed(w) for w in workers) >= goal, 60,
               f"{goal} events processed before the kill (seed {seed})", interval_s=0.02)
    workers.pop(0).kill()  # SIGKILL: no revoke, no last checkpoint
    _send(broker, records[quarter:2 * quarter])
    workers.append(start_worker("added", config=CONFIG))
    _send(broker, records[2 * quarter:3 * quarter])
    wait_until(settled(workers), 60, "the added worker given partitions")
    assert owned(workers[-1]), "the added worker owns a partition"
    assert workers.pop(0).stop() == 0
    _send(broker, records[3 * quarter:])
    _settle_and_compare(broker, seed)
    # A record's outputs are acked before the group commits past it: once the commits reach
    # the end of the log, nothing a worker publishes late can still be on its way.
    end = len(_read_back(broker.bootstrap))
    wait_until(lambda: broker.committed() >= end, 60, "the group committed to the end",
               detail=lambda: f"committed {broker.committed()} of {end}")
    _settle_and_compare(broker, seed)  # the log's ticks since may have outputs of their own
