"""Reading the output topics for the report, on the embedded broker."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from drift.model import DriftConfig
from drift.replay import replay
from drift.simulation import Scenario, simulate_user
from streams import topics
from streams.broker import free_loopback_port
from streams.edge.wire import DeadLetter, encode, iso
from streams.report.read import read_outputs
from tests.conftest import Broker

Published = list[tuple[str, bytes, bytes]]


def _publish(broker: Broker, scenarios: list[Scenario], users: int) -> Published:
    """The fold's outputs of simulated users on their topics, as a worker publishes them."""
    rng = np.random.default_rng(23)
    producer = broker.producer()
    sent: Published = []
    for scenario in scenarios:
        for u in range(users):
            user = f"{scenario.value}-{u}"
            events, _ = simulate_user(rng, scenario, user, 1.7e9)
            for out in replay(events, DriftConfig()):
                record = (topics.OUTPUT_TOPICS[out.kind], user.encode(), encode(out))
                producer.send(record[0], key=record[1], value=record[2])
                sent.append(record)
    producer.flush()
    return sent


def _count(sent: Published, topic: str) -> int:
    return sum(1 for t, _, _ in sent if t == topic)


def test_every_output_is_read_once_up_to_the_high_watermark(broker: Broker) -> None:
    sent = _publish(broker, [Scenario.STABLE, Scenario.SAFETY_MISMATCH,
                             Scenario.MODEL_CHANGE_COLLAPSED, Scenario.GOVERNANCE], 5)
    producer = broker.producer()
    resent = [r for r in sent if r[0] == topics.VIOLATIONS][:3]  # at least once: a resend
    for topic, key, value in resent:
        producer.send(topic, key=key, value=value)
    before = time.time()
    for i in range(4):
        producer.send(topics.DEADLETTER, key=b"k", value=encode(
            DeadLetter(f"d{i}", "invalid_json", topics.INPUT, 0, i, None, ())))
    producer.send(topics.DEADLETTER, key=b"k", value=b"not json")
    producer.flush()

    out = read_outputs(broker.bootstrap)
    assert out.read[topics.SCORES].records == _count(sent, topics.SCORES)
    assert len(out.scores) + len(out.reattunes) == _count(sent, topics.SCORES)
    assert len(out.responses) == _count(sent, topics.RESPONSES) > 0
    assert out.read[topics.VIOLATIONS].records == _count(sent, topics.VIOLATIONS) + len(resent)
    assert len(out.violations) == _count(sent, topics.VIOLATIONS)
    assert out.read[topics.VIOLATIONS].duplicates == len(resent) == 3
    assert [d.id for d in out.dead_letters] == [f"d{i}" for i in range(4)]
    assert out.read[topics.DEADLETTER].undecodable == 1
    assert all(d.event_ts >= iso(before - 5) for d in out.dead_letters)
    assert {r.partitions for r in out.read.values()} == {4}


def test_a_read_ends_while_workers_keep_publishing(broker: Broker) -> None:
    sent = _publish(broker, [Scenario.STABLE], 3)
    _, key, value = next(r for r in sent if r[0] == topics.SCORES)
    stop = threading.Event()
    extra = [0]

    def keep_publishing() -> None:
        producer = broker.producer()
        while not stop.is_set() and extra[0] < 200_000:
            producer.send(topics.SCORES, key=key, value=value)
            extra[0] += 1
            if extra[0] % 500 == 0:
                producer.flush()

    thread = threading.Thread(target=keep_publishing, daemon=True)
    thread.start()
    try:
        wait = time.monotonic() + 30
        while extra[0] < 1000 and time.monotonic() < wait:  # the publisher is going
            stop.wait(0.05)
        out = read_outputs(broker.bootstrap, stall_s=20.0)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert _count(sent, topics.SCORES) < out.read[topics.SCORES].records
    assert out.read[topics.SCORES].records <= _count(sent, topics.SCORES) + extra[0]
    assert out.read[topics.SCORES].duplicates == out.read[topics.SCORES].records - len(
        {r[2] for r in sent if r[0] == topics.SCORES})


def test_an_unreachable_broker_is_named() -> None:
    port = free_loopback_port()
    with pytest.raises(topics.BrokerUnreachable, match=f"127.0.0.1:{port}"):
        read_outputs(f"127.0.0.1:{port}")
