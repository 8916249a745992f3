"""Shared fixtures: a real embedded broker, real worker processes, real DuckDB files."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from drift.model import FhrEvent
from streams import topics
from streams.broker import EmbeddedBroker, free_loopback_port
from streams.edge.codec import encode_event
from tests.changelog_rows import plain_rows

REPO = Path(__file__).resolve().parent.parent
TOKEN = "test-review-token"

#: ``quick`` (the default) runs a fifth of each property test's examples;
#: ``HYPOTHESIS_PROFILE=full`` runs every one (docs/testing.md). No example has a deadline:
#: the suite runs two tests at a time on two cores, and a time limit is a timed assertion.
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "quick")
settings.register_profile("quick", max_examples=20, deadline=None)
settings.register_profile("full", max_examples=100, deadline=None)
settings.load_profile(PROFILE)


def examples(full: int) -> int:
    """How many examples a property test written for ``full`` runs under the profile."""
    return full if PROFILE == "full" else max(10, full // 5)


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str,
               interval_s: float = 0.2, detail: Callable[[], str] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout_s``.

    ``detail`` adds context to the failure (a log, the last state seen).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}{extra}")
        time.sleep(interval_s)


@dataclass
class Broker:
    bootstrap: str
    _producer: KafkaProducer | None = None

    def producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=2)
        return self._producer

    def send_events(self, events: Iterable[FhrEvent]) -> int:
        n = 0
        p = self.producer()
        for e in events:
            p.send(topics.INPUT, key=e.user_id.encode(), value=encode_event(e))
            n += 1
        p.flush()
        return n

    def send_raw(self, key: bytes | None, value: bytes) -> None:
        p = self.producer()
        p.send(topics.INPUT, key=key, value=value)
        p.flush()

    def drift_scores(self, user_id: str) -> list[dict[str, Any]]:
        """The continuity-drift scores of one user so far."""
        return [m for m in self.read(topics.SCORES)
                if m["user_id"] == user_id and m.get("score_kind") == "continuity_drift"]

    def read(self, topic: str) -> list[dict[str, Any]]:
        """Every message on ``topic`` so far, decoded, in partition order."""
        return [dict(json.loads(value), _key=key.decode() if key else None)
                for key, value in self.read_raw(topic)]

    def read_raw(self, topic: str, timeout_s: float = 30.0) -> list[tuple[bytes | None, bytes]]:
        """Every record of ``topic`` so far, up to the high watermark each partition's fetch
        response reports (never ListOffsets, which can be a batch short on this broker), in
        partition order. A slow broker makes this wait, not return less."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                 enable_auto_commit=False)
        try:
            parts = [TopicPartition(topic, p) for p in
                     sorted(consumer.partitions_for_topic(topic) or [])]
            if not parts:
                return []  # no such topic (any more)
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            got: dict[int, list[tuple[bytes | None, bytes]]] = {tp.partition: [] for tp in parts}
            deadline = time.monotonic() + timeout_s
            while True:
                for tp, msgs in consumer.poll(timeout_ms=200).items():
                    got[tp.partition].extend((m.key, m.value) for m in msgs)
                marks = [consumer.highwater(tp) for tp in parts]
                if all(h is not None and consumer.position(tp) >= h
                       for tp, h in zip(parts, marks, strict=True)):
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"{topic}: not read to its high watermark in "
                                         f"{timeout_s:.0f} s")
            return [r for p in sorted(got) for r in got[p]]
        finally:
            consumer.close()

    def committed(self, group: str = "continuity-drift", topic: str = topics.INPUT) -> int:
        """The offsets ``group`` has committed on ``topic``, summed over its partitions: a
        worker commits them once what it published for the records before them is acked."""
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group,
                                 enable_auto_commit=False)
        try:
            parts = sorted(consumer.partitions_for_topic(topic) or [])
            return sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in parts)
        finally:
            consumer.close()

    def changelog_bytes(self) -> bytes:
        """The rows of every changelog topic, each snapshot and delta decoded and its tables
        written out uncompressed (their strings and blobs as they are, for a byte search);
        read again if a worker rolled a generation meanwhile (topics came or went)."""
        from kafka.admin import KafkaAdminClient

        def names() -> list[str]:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
            try:
                return sorted(n for n in admin.list_topics() if ".changelog." in n)
            finally:
                admin.close()

        for _ in range(10):
            before = names()
            assert before, "no changelog topic: the check would see nothing"
            data = b"".join(plain_rows(self.read_raw(name)) for name in before)
            if names() == before:
                return data
        raise AssertionError("the changelog kept rolling while it was read")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None


@pytest.fixture
def broker() -> Iterator[Broker]:
    with EmbeddedBroker() as b:
        topics.create_topics(b.bootstrap, 4)
        handle = Broker(b.bootstrap)
        try:
            yield handle
        finally:
            handle.close()


@dataclass
class WorkerProcess:
    bootstrap: str
    data_dir: Path
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    token: str | None = TOKEN
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _log_from: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_ready: bool = True) -> WorkerProcess:
        """Start the worker on a free port; waiting until it is ready, start it again on
        another port if the one it was given was taken before it could bind it (the port is
        free when asked for, and any socket may take it before the worker binds it)."""
        for _ in range(3):
            self._spawn()
            if not wait_ready or self._ready(90.0):
                return self
        raise AssertionError("the worker found its port taken three times")

    def _spawn(self) -> None:
        self.port = free_loopback_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir.parent / f"{self.data_dir.name}.toml"
        lines = []
        for section, values in self.config.items():
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {json.dumps(v)}" for k, v in values.items())
        cfg.write_text("\n".join(lines) + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
        if self.token:
            env["CONTINUITY_REVIEW_TOKEN"] = self.token
        env["PYTHONWARNINGS"] = "ignore"
        with open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab") as log:
            self._log_from = log.tell()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams.cli", "run", "--broker", self.bootstrap,
                 "--data-dir", str(self.data_dir), "--web-port", str(self.port),
                 "--config", str(cfg)],
                cwd=REPO, env=env, stdout=log, stderr=log)

    def get(self, path: str, token: str | None = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        return _call(req)

    def post(self, path: str, token: str | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path, data=b"", method="POST")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        return _call(req)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        if not self._ready(timeout_s):
            raise AssertionError(f"the worker's port {self.port} was taken before it bound it")

    def _ready(self, timeout_s: float) -> bool:
        """Wait until this worker (its /readyz answered by its own pid) is ready; False if it
        exited because its port was taken."""
        log = self.data_dir.parent / (self.data_dir.name + ".log")

        def ready() -> str | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                if b"address already in use" in log.read_bytes()[self._log_from:]:
                    return "port taken"
                raise AssertionError(f"worker exited with {self.proc.returncode}; see {log}")
            try:
                status, body = self.get("/readyz")
            except (OSError, ValueError):  # nothing listening yet, or not a worker answering
                return None
            ours = isinstance(body, dict) and body.get("pid") == self.proc.pid
            return "ready" if status == 200 and ours else None
        if wait_until(ready, timeout_s, "worker /readyz") == "ready":
            return True
        self.proc = None
        return False

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None


def _call(req: urllib.request.Request) -> tuple[int, Any]:
    """Status and JSON body; ``OSError`` for what is not an HTTP answer (a port nothing
    listens on yet can connect to itself, and the request comes back as the status line)."""
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if body else None
    except http.client.HTTPException as exc:
        raise ConnectionError(f"not an HTTP answer: {exc!r}") from exc


#: The worker settings tests start workers with: shorter than the defaults where a test would
#: wait them out (the group's session timeout, the heartbeat under it, a rebalance's wait for
#: members, the checkpoint's interval). Quiet-partition ticks keep the default (30 s): a tick
#: is an input, and the tests comparing with the pure replay of their events must get none.
FAST = {"worker": {"timer_interval_s": 1.0, "batch_within_s": 0.05, "session_timeout_s": 2.0,
                   "heartbeat_interval_s": 0.5, "rebalance_timeout_s": 3.0,
                   "checkpoint_interval_s": 1.0}}


def fast_env() -> dict[str, str]:
    """The environment for a command that starts its own worker (the demo): this one's
    without ``CONTINUITY_*``, with :data:`FAST` as ``CONTINUITY_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
    env.update({f"CONTINUITY_{k.upper()}": str(v) for k, v in FAST["worker"].items()})
    env["PYTHONWARNINGS"] = "ignore"
    return env


@pytest.fixture
def start_worker(broker: Broker, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(name: str = "w1", config: dict[str, dict[str, Any]] | None = None,
              token: str | None = TOKEN, wait_ready: bool = True) -> WorkerProcess:
        merged = {k: dict(v) for k, v in FAST.items()}
        for section, values in (config or {}).items():
            merged.setdefault(section, {}).update(values)
        w = WorkerProcess(broker.bootstrap, tmp_path / name, merged, token)
        started.append(w)
        return w.start(wait_ready=wait_ready)

    yield start
    for w in started:
        w.stop()


def samples(worker: WorkerProcess, family: str, suffix: str) -> list[tuple[dict[str, str], float]]:
    """The labels and value of each sample of a metric ``family`` of the worker whose name
    ends in ``suffix`` (``_total``, ``_count``...), from its ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    return [(s.labels, s.value) for f in text_string_to_metric_families(worker.metrics_text())
            if f.name == family for s in f.samples if s.name.endswith(suffix)]


def events_processed(worker: WorkerProcess) -> float:
    """Accepted events so far, from the worker's own metrics."""
    return sum(value for _, value in samples(worker, "continuity_events", "_total"))


def output_ids(messages: list[dict[str, Any]]) -> set[str]:
    return {m["id"] for m in messages}


@pytest.fixture(scope="session")
def worker_metrics_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real worker that has processed simulated traffic of every scenario.

    It also saw malformed records and an erase through the review API, so every
    family of metrics has samples.
    """
    from drift.simulation import Scenario, SimParams, simulate

    base = tmp_path_factory.mktemp("live")
    with EmbeddedBroker() as b:
        topics.create_topics(b.bootstrap, 4)
        broker = Broker(b.bootstrap)
        worker = WorkerProcess(b.bootstrap, base / "worker", {k: dict(v) for k, v in
                                                              FAST.items()}).start()
        try:
            events: list[FhrEvent] = []
            for evs, _ in simulate(3, list(Scenario), 2, time.time() - 10 * 86400, SimParams()):
                events.extend(evs)
            events.sort(key=lambda e: e.ts_s)
            broker.send_events(events)
            broker.send_raw(b"u-bad", b"{broken")
            broker.send_raw(b"u-bad", b'{"schema": "fhr/2"}')
            first = events[0].user_id
            wait_until(lambda: len(broker.read(topics.ESCALATIONS)) > 0, 90, "an escalation")
            status, _ = worker.post(f"/v1/users/{first}/erase", token=TOKEN)
            assert status == 200
            wait_until(lambda: len(broker.read(topics.DEADLETTER)) >= 2, 60, "dead letters")
            yield worker.url + "/metrics"
        finally:
            worker.stop()
            broker.close()
