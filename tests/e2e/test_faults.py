"""Broker faults: the broker out of reach for a while, and a durable broker restarted mid-stream.

Both compare with the pure replay of the same events: the set of output ids is the
replay's, and no output id was published twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drift.model import FhrEvent
from drift.simulation import Scenario, SimParams, simulate
from streams import topics
from streams.broker import EmbeddedBroker, free_loopback_port
from tests.conftest import (
    FAST,
    Broker,
    WorkerProcess,
    events_processed,
    output_ids,
    wait_until,
)
from tests.e2e.outputs import REPLAYED, replay_ids
from tests.faults import TcpProxy, loopback_s3

#: How long the broker stays out of reach: five of the session timeouts the tests give a
#: worker, and several rounds of its broker probe, so the worker has given up on every
#: connection and gone on retrying before the broker comes back.
OUTAGE_S = 5 * FAST["worker"]["session_timeout_s"]


def _events() -> list[FhrEvent]:
    events: list[FhrEvent] = []
    for evs, _ in simulate(57, [Scenario.STABLE, Scenario.SAFETY_MISMATCH,
                                Scenario.ATTUNEMENT_SHIFT, Scenario.GOVERNANCE], 6, 1.7e9,
                           SimParams()):
        events.extend(evs)
    events.sort(key=lambda e: e.ts_s)
    return events


def _caught_up(broker: Broker, want: dict[str, set[str]]) -> bool:
    return all(output_ids(broker.read(t)) >= want[k] for k, t in REPLAYED.items())


def _assert_exactly(broker: Broker, want: dict[str, set[str]]) -> None:
    for kind, topic in REPLAYED.items():
        got = broker.read(topic)
        assert output_ids(got) == want[kind], f"{kind}: lost or extra outputs"


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Broker, TcpProxy]]:
    proxy_port = free_loopback_port()
    with EmbeddedBroker(advertised_port=proxy_port) as b:
        proxy = TcpProxy(proxy_port, b.port).restore()
        bootstrap = f"127.0.0.1:{proxy_port}"
        topics.create_topics(bootstrap, 4)
        handle = Broker(bootstrap)
        try:
            yield handle, proxy
        finally:
            handle.close()
            proxy.cut()


@pytest.mark.parametrize("producer", ["aiokafka", "librdkafka"])
def test_a_broker_out_of_reach_degrades_the_worker_and_loses_nothing(proxied, tmp_path,
                                                                      producer):
    broker, proxy = proxied
    config = {k: dict(v) for k, v in FAST.items()}
    config["worker"]["producer"] = producer
    worker = WorkerProcess(broker.bootstrap, tmp_path / "w", config)
    worker.start()
    try:
        events = _events()
        half = len(events) // 2
        broker.send_events(events[:half])
        first = replay_ids(events[:half])
        wait_until(lambda: len(output_ids(broker.read(topics.SCORES))) >= len(first["score"]) // 3,
                   90, "the worker mid-stream", interval_s=0.05)
        broker.close()
        proxy.cut()
        cut_at = time.monotonic()
        wait_until(lambda: worker.get("/healthz")[1]["status"] == "degraded", 20,
                   "/healthz degraded")
        assert worker.get("/readyz")[0] == 503
        while time.monotonic() - cut_at < OUTAGE_S:  # the outage itself: it lasts, on purpose
            assert worker.proc is not None and worker.proc.poll() is None, "the worker exited"
            assert worker.get("/healthz")[0] == 200
            time.sleep(0.5)
        proxy.restore()
        wait_until(lambda: worker.get("/readyz")[0] == 200, 90, "ready again")
        assert worker.get("/healthz")[1] == {"status": "ok"}
        broker.send_events(events[half:])
        want = replay_ids(events)
        wait_until(lambda: _caught_up(broker, want), 120, "every output after the outage")
        _assert_exactly(broker, want)
        assert events_processed(worker) == len(events), "an event was counted twice"
        assert worker.proc is not None and worker.proc.poll() is None
    finally:
        worker.stop()


def test_a_durable_broker_restarted_mid_stream_loses_nothing(tmp_path):
    with loopback_s3("continuity") as env:
        embedded = EmbeddedBroker(storage="s3://continuity/", env=env,
                                  log_path=tmp_path / "broker.log").start()
        broker = Broker(embedded.bootstrap)
        worker = WorkerProcess(embedded.bootstrap, tmp_path / "w",
                               {k: dict(v) for k, v in FAST.items()})
        try:
            topics.create_topics(embedded.bootstrap, 4)
            worker.start()
            events = _events()
            half = len(events) // 2
            broker.send_events(events[:half])
            first = replay_ids(events[:half])
            wait_until(lambda: len(output_ids(broker.read(topics.SCORES)))
                       >= len(first["score"]) // 3, 120, "the worker mid-stream", interval_s=0.05)
            broker.close()
            embedded.stop()
            wait_until(lambda: worker.get("/healthz")[1]["status"] == "degraded", 60,
                       "the worker seeing the broker gone")
            embedded.start()
            wait_until(lambda: worker.get("/readyz")[0] == 200, 120, "ready after the restart")
            broker.send_events(events[half:])
            want = replay_ids(events)
            wait_until(lambda: _caught_up(broker, want), 180, "every output after the restart")
            _assert_exactly(broker, want)
            assert events_processed(worker) == len(events), "an event was counted twice"
            assert worker.proc is not None and worker.proc.poll() is None, "the worker stayed up"
        finally:
            worker.stop()
            broker.close()
            embedded.stop()


def test_a_worker_whose_port_was_taken_starts_again_on_another(broker, start_worker,
                                                               monkeypatch):
    """A port is free when asked for, and any socket may take it before the worker binds
    it. The worker then exits; the harness starts it again on another port, and waits for
    the /readyz of its own process (its pid), never another worker's on the same port."""
    import socket

    import tests.conftest as harness

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: nothing answers on it
        port = taken.getsockname()[1]
        handed: list[int] = []

        def first_taken() -> int:
            handed.append(port if not handed else free_loopback_port())
            return handed[-1]

        monkeypatch.setattr(harness, "free_loopback_port", first_taken)
        worker = start_worker()
    assert handed[0] == port and worker.port == handed[-1] != port
    status, body = worker.get("/readyz")
    assert status == 200 and worker.proc is not None and body["pid"] == worker.proc.pid
