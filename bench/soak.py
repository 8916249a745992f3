"""Soak: a steady stream into ``run --workers N`` while one worker is SIGKILLed at intervals.

On one embedded broker (Tansu, memory storage, loopback only):

1. build ``--events`` simulated events of ``--users`` users of every scenario, merged by event
   time (``bench.throughput.build_stream``), and compute in process, with the pure replay
   (``drift.replay.MemoryReplay`` on the same records decoded as the worker decodes them),
   every output the service must publish: its id, topic, cause and exact bytes
   (``streams.wire.encode``);
2. start ``continuity-drift run --workers N`` (a supervisor and N workers of one group, each
   restarted by the supervisor when it dies) and a reader of every output topic and the
   dead-letter topic from the beginning;
3. offer the events at ``--rate`` per second, each record stamped with the wall-clock time at
   which it is offered; every ``--kill-every`` seconds while the offer runs, SIGKILL one
   worker (round robin over the supervisor's children, ``/proc/<pid>/task/<pid>/children``);
4. after the offer: wait until every expected output id has arrived (or ``--drain-timeout``),
   then until nothing new arrives for ``--settle`` seconds, then write a marker to every
   partition of every output topic and read up to it (the broker's end offsets are not
   trusted); read ``fhr.events`` back for the records' Kafka timestamps;
5. stop the supervisor with SIGTERM and read its log (all workers log to it).

It prints: events produced, expected outputs, outputs LOST (expected, never received), EXTRA
ids (received, not in the replay; those a timer can add after a user's last event, idle
closes, are counted apart), DUPLICATES (messages beyond the first per id: the service is
at-least-once, a worker killed before its checkpoint re-publishes on replay), outputs whose
bytes differ from the replay's, kills done and restarts seen, and the delay from an input
record's Kafka timestamp to the Kafka timestamp of the first copy of each output naming it as
its cause (``source_event_id`` on scores, ``cause_event_id`` on responses, escalations and
receipts, ``event_id`` on violations). It reports and never asserts: the exit status is 0 when
the run completed, whatever it found, and 1 only when the harness itself failed.

``python bench/soak.py`` (1,000,000 events at 5,000/s, a kill every 120 s: about 10 minutes
plus the drain on two cores), ``--quick`` (50,000 events at 1,000/s, a kill every 20 s: about
2 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import math
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.restore import git_commit
from bench.throughput import build_stream, clean_env, partition_of
from streams import topics
from streams.broker import EmbeddedBroker

DEFAULTS: dict[str, Any] = {"events": 1_000_000, "users": 2000, "rate": 5000.0,
                            "kill_every": 120.0, "drain_timeout": 900.0}
QUICK: dict[str, Any] = {"events": 50_000, "users": 240, "rate": 1000.0, "kill_every": 20.0,
                         "drain_timeout": 180.0}
DEFAULT_SEED = 20261208
MARKER_PREFIX = "bench-soak-marker-"

EXAMPLES = """\
examples:
  python bench/soak.py                              # 1M events at 5,000/s, a kill every 120 s
  python bench/soak.py --quick                      # 50k events at 1,000/s, a kill every 20 s
  python bench/soak.py --events 300000 --rate 3000 --kill-every 30 --json /tmp/soak.json
  python bench/soak.py --quick --work-dir /tmp/soak-logs   # keep the broker and worker logs
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=12).digest()


def scenario_of(user_id: str | None) -> str:
    """The simulator names users ``<scenario>-<nnnn>``."""
    if not user_id:
        return "?"
    return user_id.rsplit("-", 1)[0]


# --------------------------------------------------------------------------- expected


@dataclass
class Expected:
    outputs: dict[str, tuple[str, str | None, str, bytes]]  # id -> (topic, cause, user, digest)
    by_topic: Counter[str]
    events: int
    rejected: int
    replay: Any  # the MemoryReplay at the end of the stream
    partition_last_ts: dict[int, float]
    user_partition: dict[str, int]
    seconds: float


def _cause(out: Any) -> str | None:
    for name in ("source_event_id", "cause_event_id", "event_id"):
        value = getattr(out, name, None)
        if value:
            return str(value)
    return None


def compute_expected(records: Sequence[tuple[bytes, bytes, str]], partitions: int
                     ) -> Expected:
    """Every output of the pure replay of ``records``, decoded as the worker decodes them."""
    from drift.model import DriftConfig, FhrEvent
    from drift.replay import MemoryReplay
    from streams.codec import decode_event
    from streams.wire import encode

    started = time.monotonic()
    replay = MemoryReplay(DriftConfig())
    outputs: dict[str, tuple[str, str | None, str, bytes]] = {}
    by_topic: Counter[str] = Counter()
    rejected = 0
    last_ts: dict[int, float] = {}
    user_partition: dict[str, int] = {}
    total = len(records)
    step = max(50_000, total // 10)
    for i, (key, value, _) in enumerate(records):
        event = decode_event(key, value)
        if not isinstance(event, FhrEvent):
            rejected += 1
            continue
        p = user_partition.get(event.user_id)
        if p is None:
            p = user_partition[event.user_id] = partition_of(key, partitions)
        if event.ts_s > last_ts.get(p, 0.0):
            last_ts[p] = event.ts_s
        for out in replay.feed(event):
            topic = topics.OUTPUT_TOPICS[out.kind]
            if out.id in outputs:  # an id the replay repeats: keep the first, say so
                by_topic["(repeated id in the replay)"] += 1
                continue
            outputs[out.id] = (topic, _cause(out), out.user_id, digest(encode(out)))
            by_topic[topic] += 1
        if (i + 1) % step == 0:
            log(f"  replay: {i + 1:,} / {total:,} events, {len(outputs):,} outputs "
                f"({time.monotonic() - started:.0f}s)")
    return Expected(outputs, by_topic, total - rejected, rejected, replay, last_ts,
                    user_partition, time.monotonic() - started)


def timer_outputs(expected: Expected, wall_s: float) -> dict[str, tuple[str, str | None, str]]:
    """What a worker's timer may add after the stream: idle closes and expiries due by each
    partition's last event time plus ``wall_s`` (an upper bound of the wall time since)."""
    from drift.baseline import UserBaselines
    from drift.fold import sweep

    replay = expected.replay
    out: dict[str, tuple[str, str | None, str]] = {}
    for user_id, state in replay.states.items():
        p = expected.user_partition.get(user_id, 0)
        now_s = expected.partition_last_ts.get(p, 0.0) + wall_s
        result = sweep(state, replay.baselines.get(user_id, UserBaselines()), now_s,
                       replay.config)
        for o in result.effects.outputs:
            out[o.id] = (topics.OUTPUT_TOPICS[o.kind], _cause(o), o.user_id)
    return out


# --------------------------------------------------------------------------- producer


class PacedProducer(threading.Thread):
    """Offers the records at ``rate``/s from its own event loop; counts sends and acks."""

    def __init__(self, bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
                 partitions: int, rate: float) -> None:
        super().__init__(name="paced-producer", daemon=True)
        self.bootstrap, self.records, self.partitions, self.rate = (
            bootstrap, records, partitions, rate)
        self.sent = 0
        self.acked = 0
        self.acked_per_partition: Counter[int] = Counter()
        self.failed = 0
        self.errors: list[str] = []
        self.max_behind = 0
        self.started_wall = math.nan
        self.started_at = math.nan
        self.finished_at = math.nan
        self.stop_flag = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as exc:  # noqa: BLE001 - reported
            self.errors.append(repr(exc))
        finally:
            self.finished_at = time.monotonic()

    def _acked(self, fut: asyncio.Future[Any], part: int, n: int) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.failed += n
            if len(self.errors) < 5:
                self.errors.append(repr(fut.exception()) if not fut.cancelled() else "cancelled")
        else:
            self.acked += n
            self.acked_per_partition[part] += n

    async def _run(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=0,
                                    max_batch_size=1 << 20, max_request_size=8 << 20,
                                    request_timeout_ms=120_000, client_id="bench-soak")
        await producer.start()
        futures: list[asyncio.Future[Any]] = []
        try:
            total = len(self.records)
            self.started_wall = time.time()
            self.started_at = start = time.monotonic()
            while self.sent < total and not self.stop_flag.is_set():
                due = min(total, int((time.monotonic() - start) * self.rate))
                if due <= self.sent:
                    await asyncio.sleep(0.004)
                    continue
                self.max_behind = max(self.max_behind, due - self.sent)
                ts_ms = int(time.time() * 1000)
                batches: dict[int, Any] = {}
                counts: Counter[int] = Counter()
                for key, value, _ in self.records[self.sent:due]:
                    part = partition_of(key, self.partitions)
                    batch = batches.get(part)
                    if batch is None:
                        batch = batches[part] = producer.create_batch()
                    if batch.append(key=key, value=value, timestamp=ts_ms) is None:
                        fut = await producer.send_batch(batch, topics.INPUT, partition=part)
                        fut.add_done_callback(lambda f, p=part, n=counts[part]:
                                              self._acked(f, p, n))
                        futures.append(fut)
                        batch = batches[part] = producer.create_batch()
                        counts[part] = 0
                        batch.append(key=key, value=value, timestamp=ts_ms)
                    counts[part] += 1
                for part, batch in batches.items():
                    fut = await producer.send_batch(batch, topics.INPUT, partition=part)
                    fut.add_done_callback(lambda f, p=part, n=counts[part]: self._acked(f, p, n))
                    futures.append(fut)
                self.sent = due
                if len(futures) > 2000:
                    futures = [f for f in futures if not f.done()]
            await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 300)
        finally:
            await producer.stop()


# --------------------------------------------------------------------------- reader


class _Out(msgspec.Struct):
    id: str = ""
    user_id: str | None = None
    source_event_id: str | None = None
    cause_event_id: str | None = None
    event_id: str | None = None
    reason: str | None = None


@dataclass
class Seen:
    topic: str
    ts_ms: int
    cause: str | None
    user: str | None
    digest: bytes
    copies: int = 1
    differing_copies: int = 0


class Collector(threading.Thread):
    """Reads every partition of the output topics and the dead-letter topic from offset 0."""

    def __init__(self, bootstrap: str, partitions: int, expected: set[str]) -> None:
        super().__init__(name="output-reader", daemon=True)
        self.bootstrap, self.partitions, self.expected = bootstrap, partitions, expected
        self.seen: dict[str, Seen] = {}
        self.messages: Counter[str] = Counter()
        self.found_expected = 0
        self.deadletters: Counter[str] = Counter()
        self.undecodable = 0
        self.last_new = time.monotonic()
        self.finish = threading.Event()
        self.markers_seen = False
        self.error: str | None = None
        self._decode = msgspec.json.Decoder(_Out).decode

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as exc:  # noqa: BLE001 - reported
            self.error = repr(exc)

    def _take(self, topic: str, ts_ms: int, value: bytes | None) -> str | None:
        """Record one message; returns the marker id if it is one of ours."""
        try:
            o = self._decode(value or b"")
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.undecodable += 1
            return None
        if o.id.startswith(MARKER_PREFIX):
            return o.id
        self.last_new = time.monotonic()
        if topic == topics.DEADLETTER:
            self.deadletters[o.reason or "?"] += 1
            return None
        self.messages[topic] += 1
        d = digest(value or b"")
        s = self.seen.get(o.id)
        if s is not None:
            s.copies += 1
            if d != s.digest:
                s.differing_copies += 1
            return None
        self.seen[o.id] = Seen(topic, ts_ms, o.source_event_id or o.cause_event_id or o.event_id,
                               o.user_id, d)
        if o.id in self.expected:
            self.found_expected += 1
        return None

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        names = [*topics.OUTPUT_TOPICS.values(), topics.DEADLETTER]
        tps = [TopicPartition(t, p) for t in names for p in range(self.partitions)]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                    client_id="bench-soak-reader")
        await consumer.start()
        try:
            consumer.assign(tps)
            await consumer.seek_to_beginning()
            while not self.finish.is_set():
                got = await consumer.getmany(timeout_ms=300)
                for tp, msgs in got.items():
                    for m in msgs:
                        self._take(tp.topic, m.timestamp, m.value)
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                        client_id="bench-soak-marker")
            await producer.start()
            marker = MARKER_PREFIX + uuid.uuid4().hex
            try:
                await asyncio.gather(*[
                    await producer.send(tp.topic, json.dumps({"id": marker}).encode(),
                                        partition=tp.partition) for tp in tps])
            finally:
                await producer.stop()
            remaining = set(tps)
            deadline = time.monotonic() + 120
            while remaining and time.monotonic() < deadline:
                got = await consumer.getmany(timeout_ms=300)
                for tp, msgs in got.items():
                    for m in msgs:
                        if self._take(tp.topic, m.timestamp, m.value) == marker:
                            remaining.discard(tp)
            self.markers_seen = not remaining
            if remaining:
                self.error = (f"markers not read back on {len(remaining)} partitions within "
                              "120 s")
        finally:
            await consumer.stop()


async def _read_input(bootstrap: str, partitions: int, want: set[str],
                      counts: dict[int, int], timeout_s: float
                      ) -> tuple[dict[str, int], dict[int, int]]:
    """Kafka timestamps of the input records whose event id is in ``want``; reads each
    partition until it has seen as many records as were acknowledged on it."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    class _Id(msgspec.Struct):
        event_id: str = ""

    decode = msgspec.json.Decoder(_Id).decode
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                max_partition_fetch_bytes=4 << 20, client_id="bench-soak-input")
    await consumer.start()
    found: dict[str, int] = {}
    read: Counter[int] = Counter()
    try:
        tps = [TopicPartition(topics.INPUT, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        quiet = time.monotonic()
        while time.monotonic() < deadline and any(read[p] < counts.get(p, 0)
                                                  for p in range(partitions)):
            got = await consumer.getmany(timeout_ms=500)
            if got:
                quiet = time.monotonic()
            elif time.monotonic() - quiet > 30:
                break
            for tp, msgs in got.items():
                read[tp.partition] += len(msgs)
                for m in msgs:
                    try:
                        eid = decode(m.value or b"").event_id
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        continue
                    if eid in want:
                        found[eid] = m.timestamp
    finally:
        await consumer.stop()
    return found, dict(read)


# --------------------------------------------------------------------------- processes


def free_port_block(n: int) -> int:
    """A port p such that p .. p+n-1 are free on 127.0.0.1 (checked by binding each)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n > 65535:
            continue
        socks = []
        try:
            for i in range(n):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no block of {n} free ports found")


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def worker_index(pid: int) -> int | None:
    """Index i of a worker child, from the ``--data-dir .../worker-i`` of its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for a, b in itertools.pairwise(argv):
        if a == b"--data-dir":
            name = Path(b.decode()).name
            if name.startswith("worker-") and name[7:].isdigit():
                return int(name[7:])
    return None


def workers_now(sup_pid: int) -> dict[int, int]:
    """index -> pid of the supervisor's live worker children."""
    out = {}
    for pid in children_of(sup_pid):
        i = worker_index(pid)
        if i is not None:
            out[i] = pid
    return out


def readyz(port: int) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of a worker's /readyz (0 when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (urllib.error.URLError, OSError, ValueError):
        return 0, {}


def owners(port: int, workers: int, partitions: int, sup_pid: int) -> dict[int, int] | None:
    """partition -> pid of its owner, when every worker is ready and they own every
    partition exactly once; else None (a rebalance or a restore is going on)."""
    live = workers_now(sup_pid)
    out: dict[int, int] = {}
    for i in range(workers):
        status, body = readyz(port + i)
        if status != 200 or i not in live:
            return None
        for p in body.get("partitions", []):
            if p in out:
                return None
            out[int(p)] = live[i]
    return out if set(out) == set(range(partitions)) else None


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Kill:
    t: float  # seconds since the offer started
    index: int
    pid: int
    was_ready: bool
    new_pid: int | None = None
    restarted_after: float = math.nan
    ready_after: float = math.nan
    owners_before: dict[int, int] | None = None


@dataclass
class Supervisor:
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: Any = None

    def start(self) -> None:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=clean_env(), stdout=self._log,
                                     stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout_s: float = 120.0) -> int | None:
        """SIGTERM (forwarded to the workers); past ``timeout_s`` SIGKILL the workers it
        started, then it."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            kids = children_of(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log(f"supervisor did not stop within {timeout_s:.0f}s; killing it and its "
                    "workers")
                for pid in set(kids) | set(children_of(self.proc.pid)):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode


def scan_log(path: Path) -> dict[str, Any]:
    """What the supervisor and its workers logged: restarts, errors, restores."""
    restarts: Counter[str] = Counter()
    levels: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    restores: list[tuple[float, int, float]] = []  # (wall ts, partition, seconds)
    tracebacks = 0
    other: Counter[str] = Counter()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        s = line.strip()
        if s.startswith("{"):
            try:
                rec = json.loads(s)
            except ValueError:
                other[s[:160]] += 1
                continue
            level = str(rec.get("level", "?"))
            levels[level] += 1
            msg = str(rec.get("msg", ""))
            if msg == "worker ended; restarting it":
                restarts[str(rec.get("exit_code"))] += 1
            elif msg == "partition restored":
                for p in rec.get("partitions", []):
                    restores.append((float(rec.get("ts", math.nan)), int(p),
                                     float(rec.get("seconds", math.nan))))
            if level in ("warning", "error", "critical") and msg != "worker ended; restarting it":
                err = rec.get("error") or rec.get("error_type") or ""
                messages[f"{level}: {msg}" + (f" [{err}]" if err else "")] += 1
        elif s.startswith("Traceback"):
            tracebacks += 1
        elif s and not s.startswith(("worker on ", "created topics", "3 workers started")) \
                and "workers started" not in s:
            other[s[:160]] += 1
    return {"restarts_by_exit_code": dict(restarts), "levels": dict(levels),
            "problems": messages.most_common(12), "tracebacks": tracebacks,
            "restores": len(restores),
            "restore_max_s": max((r[2] for r in restores), default=math.nan),
            "restore_list": restores,
            "other_lines": other.most_common(8)}


# --------------------------------------------------------------------------- run


@dataclass
class Run:
    command: str
    commit: str
    events: int
    users: int
    rate: float
    kill_every: float
    workers: int
    partitions: int
    expected: Expected | None = None
    producer: PacedProducer | None = None
    collector: Collector | None = None
    kills: list[Kill] = field(default_factory=list)
    assignments: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    input_ts: dict[str, int] = field(default_factory=dict)
    input_read: dict[int, int] = field(default_factory=dict)
    drain_s: float = math.nan
    drained: bool = False
    wall_s: float = math.nan
    supervisor_exit: int | None = None
    log: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    work_dir: str = ""


def soak(run: Run, records: Sequence[tuple[bytes, bytes, str]], base: Path, settle_s: float,
         drain_timeout_s: float, seed: int) -> None:
    assert run.expected is not None
    broker = EmbeddedBroker(log_path=base / "broker.log")
    broker.start()
    sup: Supervisor | None = None
    collector: Collector | None = None
    producer: PacedProducer | None = None
    try:
        topics.create_topics(broker.bootstrap, run.partitions)
        port = free_port_block(run.workers)
        app_id = f"bench-soak-{int(time.time())}"
        config = base / "soak.toml"
        config.write_text(f'[worker]\napp_id = "{app_id}"\n')
        argv = [sys.executable, "-m", "streams.cli", "run", "--broker", broker.bootstrap,
                "--data-dir", str(base / "data"), "--web-port", str(port), "--config",
                str(config), "--partitions", str(run.partitions), "--log-level", "info",
                "--workers", str(run.workers)]
        sup = Supervisor(argv, base / "supervisor.log")
        collector = Collector(broker.bootstrap, run.partitions, set(run.expected.outputs))
        run.collector = collector
        collector.start()
        log(f"broker at {broker.bootstrap}; starting {run.workers} workers on ports "
            f"{port}..{port + run.workers - 1} (log: {sup.log_path})")
        sup.start()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if sup.proc is not None and sup.proc.poll() is not None:
                raise RuntimeError(f"supervisor exited with {sup.proc.returncode}; see "
                                   f"{sup.log_path}")
            if all(ready(port + i) for i in range(run.workers)):
                break
            time.sleep(0.5)
        else:
            log("WARNING: not every worker reported ready within 180 s; going on")
        log(f"workers {workers_now(sup.pid)} ready; offering {len(records):,} events at "
            f"{run.rate:.0f}/s")
        producer = PacedProducer(broker.bootstrap, records, run.partitions, run.rate)
        run.producer = producer
        producer.start()
        while math.isnan(producer.started_at) and producer.is_alive():
            time.sleep(0.01)
        t0 = producer.started_at
        next_kill = run.kill_every
        next_progress = 10.0
        pending: list[Kill] = []
        expected_n = len(run.expected.outputs)

        last_sample = [-1e9]

        def sample() -> None:
            now = time.monotonic() - t0
            if now - last_sample[0] < 1.0:
                return
            last_sample[0] = now
            owned = owners(port, run.workers, run.partitions, sup.pid)
            if owned is not None and (not run.assignments or run.assignments[-1][1] != owned):
                run.assignments.append((now, owned))

        def track() -> None:
            sample()
            now = time.monotonic() - t0
            live = workers_now(sup.pid)
            for k in list(pending):
                if k.new_pid is None and live.get(k.index) not in (None, k.pid):
                    k.new_pid = live[k.index]
                    k.restarted_after = now - k.t
                if k.new_pid is not None and ready(port + k.index):
                    k.ready_after = now - k.t
                    pending.remove(k)

        def progress(phase: str) -> None:
            now = time.monotonic() - t0
            live = workers_now(sup.pid)
            n_ready = sum(ready(port + i) for i in live)
            log(f"  {phase} t={now:6.0f}s offered {producer.sent:,}/{len(records):,} "
                f"(acked {producer.acked:,}), expected outputs arrived "
                f"{collector.found_expected:,}/{expected_n:,}, messages "
                f"{sum(collector.messages.values()):,}, kills {len(run.kills)}, workers "
                f"alive {len(live)} ready {n_ready}")

        while producer.is_alive():
            now = time.monotonic() - t0
            if now >= next_kill:
                next_kill += run.kill_every
                live = workers_now(sup.pid)
                order = [(len(run.kills) + j) % run.workers for j in range(run.workers)]
                target = next((i for i in order if i in live), None)
                if target is None:
                    log("  no live worker to kill at this moment; skipped")
                else:
                    pid = live[target]
                    was_ready = ready(port + target)
                    before = run.assignments[-1][1] if run.assignments else None
                    try:
                        os.kill(pid, signal.SIGKILL)
                        run.kills.append(Kill(now, target, pid, was_ready, owners_before=before))
                        pending.append(run.kills[-1])
                        log(f"  t={now:6.0f}s SIGKILL worker-{target} (pid {pid}, "
                            f"{'ready' if was_ready else 'NOT ready'} before the kill)")
                    except OSError as exc:
                        log(f"  kill of pid {pid} failed: {exc}")
            if now >= next_progress:
                next_progress += 10.0
                progress("offer")
            track()
            time.sleep(0.2)
        offer_s = producer.finished_at - t0
        log(f"offer done in {offer_s:.1f}s ({producer.sent / max(offer_s, 1e-9):.0f}/s), "
            f"{producer.acked:,} acked, {producer.failed:,} failed; waiting for the outputs "
            f"(up to {drain_timeout_s:.0f}s)")
        drain0 = time.monotonic()
        next_progress = (time.monotonic() - t0) + 10.0
        while time.monotonic() - drain0 < drain_timeout_s:
            track()
            if collector.found_expected >= expected_n:
                run.drained = True
                break
            if time.monotonic() - t0 >= next_progress:
                next_progress += 10.0
                progress("drain")
            time.sleep(0.5)
        run.drain_s = time.monotonic() - drain0
        log(("every expected output arrived" if run.drained else
             f"drain timeout: {expected_n - collector.found_expected:,} expected outputs "
             "still missing") + f" after {run.drain_s:.1f}s; settling {settle_s:.0f}s")
        settle_end = time.monotonic() + 120
        while time.monotonic() < settle_end:
            track()
            if time.monotonic() - collector.last_new >= settle_s:
                break
            time.sleep(0.5)
        for _ in range(40):  # the last restarts' readiness, for the kill table
            last_kill = run.kills[-1].t if run.kills else -1.0
            if not pending and run.assignments and run.assignments[-1][0] > last_kill:
                break
            track()
            time.sleep(0.5)
        collector.finish.set()
        collector.join(timeout=180)
        if collector.error:
            run.errors.append(f"output reader: {collector.error}")
        run.wall_s = time.monotonic() - t0
        want = {s.cause for s in collector.seen.values() if s.cause}
        log(f"reading fhr.events back for the timestamps of {len(want):,} causes")
        run.input_ts, run.input_read = asyncio.run(_read_input(
            broker.bootstrap, run.partitions, want, dict(producer.acked_per_partition),
            120 + len(records) / 5000))
    finally:
        if producer is not None and producer.is_alive():
            producer.stop_flag.set()
            producer.join(timeout=60)
        if collector is not None and collector.is_alive():
            collector.finish.set()
            collector.join(timeout=60)
        if sup is not None:
            log("stopping the supervisor (SIGTERM)")
            run.supervisor_exit = sup.stop()
            run.log = scan_log(sup.log_path)
        broker.stop()


# --------------------------------------------------------------------------- report


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, float), q)) if values else math.nan


def report(run: Run) -> str:
    exp = run.expected
    col = run.collector
    prod = run.producer
    assert exp is not None
    lines = ["## Soak", "",
             (f"{run.workers} workers (`run --workers {run.workers}`), {run.partitions} "
              "partitions, "
             f"{run.users:,} simulated users of every scenario, offered at {run.rate:,.0f}/s, a "
             f"SIGKILL every {run.kill_every:g}s while the offer ran."), ""]
    if col is None or prod is None:
        lines += ["THE RUN DID NOT GET TO THE OFFER: " + "; ".join(run.errors), "",
                  f"reproduce: {run.command}", f"commit: {run.commit}"]
        return "\n".join(lines)
    seen = col.seen
    expected = exp.outputs
    lost = [i for i in expected if i not in seen]
    extra = [i for i in seen if i not in expected]
    timer = timer_outputs(exp, run.wall_s + 60.0) if extra else {}
    extra_timer = [i for i in extra if i in timer]
    extra_other = [i for i in extra if i not in timer]
    dup_msgs = sum(s.copies - 1 for s in seen.values())
    duplicated = [i for i, s in seen.items() if s.copies > 1]
    dup_ids = len(duplicated)
    differing_copies = sum(s.differing_copies for s in seen.values())
    content = [i for i, s in seen.items() if i in expected and s.digest != expected[i][3]]
    wrong_topic = [i for i, s in seen.items() if i in expected and s.topic != expected[i][0]]
    offer_s = prod.finished_at - prod.started_at
    input_total = sum(run.input_read.values())

    delays: list[tuple[float, str, str, float]] = []  # (delay s, id, topic, input offered t)
    no_cause = 0
    cause_unknown = 0
    for i, s in seen.items():
        if not s.cause:
            no_cause += 1
            continue
        ts_in = run.input_ts.get(s.cause)
        if ts_in is None:
            cause_unknown += 1
            continue
        delays.append(((s.ts_ms - ts_in) / 1000.0, i, s.topic,
                       ts_in / 1000.0 - prod.started_wall))
    d = [x[0] for x in delays]

    def row(label: str, value: str) -> str:
        return f"| {label} | {value} |"

    def by_topic(ids: Sequence[str]) -> str:
        counts = Counter(seen[i].topic if i in seen else expected[i][0] for i in ids)
        return ", ".join(f"{t} {n:,}" for t, n in counts.most_common()) or "-"

    def by_scen(ids: Sequence[str]) -> str:
        counts = Counter(scenario_of(seen[i].user if i in seen else expected[i][2])
                         for i in ids)
        return ", ".join(f"{t} {n:,}" for t, n in counts.most_common(6)) or "-"

    restarts = run.log.get("restarts_by_exit_code", {})
    n_restarts = sum(restarts.values())
    killed_restarts = restarts.get("-9", 0)
    restart_text = ", ".join(f"exit {c}: {n}" for c, n in restarts.items()) or "-"
    lines += ["| figure | value |", "|---|---|",
              row("events offered / acknowledged by the broker",
                  f"{prod.sent:,} / {prod.acked:,} of {run.events:,} "
                  f"({prod.failed:,} failed) in {offer_s:.1f}s = "
                  f"{prod.acked / max(offer_s, 1e-9):,.0f}/s"),
              row("input records read back from fhr.events", f"{input_total:,}"),
              row("expected outputs (pure replay, in process)",
                  f"{len(expected):,}: " + ", ".join(f"{t} {n:,}" for t, n in
                                                    exp.by_topic.most_common())),
              row("distinct output ids received", f"{len(seen):,} (messages "
                  f"{sum(col.messages.values()):,})"),
              row("**LOST** (expected, never received)",
                  f"**{len(lost):,}**" + (f" ({by_topic(lost)}; scenarios {by_scen(lost)})"
                                          if lost else "")),
              row("**EXTRA** ids (received, not in the replay)",
                  f"**{len(extra_other):,}**" + (f" ({by_topic(extra_other)}; scenarios "
                                                 f"{by_scen(extra_other)})" if extra_other
                                                 else "")
                  + f"; plus {len(extra_timer):,} a timer may add after a user's last event "
                    "(idle closes, expiries; not in the pure replay by construction)"),
              row("**DUPLICATES** (messages beyond the first per id)",
                  f"**{dup_msgs:,}** on {dup_ids:,} ids"
                  + (f" ({by_topic(duplicated)})" if dup_ids else "")),
              row("copies whose bytes differ from the first copy of their id",
                  f"{differing_copies:,}"),
              row("outputs whose bytes differ from the replay's",
                  f"{len(content):,}" + (f" ({by_topic(content)})" if content else "")),
              row("outputs on another topic than the replay's", f"{len(wrong_topic):,}"),
              row("dead letters", (", ".join(f"{r} {n:,}" for r, n in col.deadletters.items())
                                   or "0") + f"; undecodable output messages {col.undecodable}"),
              row("kills done (SIGKILL)", f"{len(run.kills)}"),
              row("restarts the supervisor logged",
                  f"{n_restarts} ({restart_text})"
                  + (f"; **{n_restarts - killed_restarts} not caused by our kills**"
                     if n_restarts != killed_restarts else "")),
              row("longest delay, input record timestamp -> its output (first copy)",
                  (f"**{max(d):.2f} s**" if d else "n/a")),
              row("delay p50 / p99 / p99.9",
                  " / ".join(f"{_pct(d, q):.3f} s" for q in (50, 99, 99.9)) if d else "n/a"),
              row("outputs without an input cause / cause not found in fhr.events",
                  f"{no_cause:,} / {cause_unknown:,}"),
              row("all expected outputs arrived",
                  (f"yes, {run.drain_s:.1f}s after the offer ended" if run.drained else
                   f"NO, gave up {run.drain_s:.0f}s after the offer ended")),
              row("supervisor exit after SIGTERM", str(run.supervisor_exit)),
              ""]
    verdict = []
    verdict.append(f"LOST {len(lost):,}" if lost else "nothing lost")
    verdict.append(f"{len(extra_other):,} unexplained extra ids" if extra_other
                   else "no unexplained extra ids")
    verdict.append(f"{dup_msgs:,} duplicate messages (at-least-once re-publish)" if dup_msgs
                   else "no duplicates")
    if content:
        verdict.append(f"{len(content):,} outputs differ from the replay")
    if n_restarts != killed_restarts:
        verdict.append(f"{n_restarts - killed_restarts} worker restarts not caused by a kill")
    lines += ["VERDICT: " + "; ".join(verdict) + ".", ""]

    if delays:
        worst = sorted(delays, reverse=True)[:3]
        kill_ts = [k.t for k in run.kills]
        lines.append("longest delays:")
        for dl, i, t, offered in worst:
            before = [k for k in kill_ts if k <= offered]
            after = [k for k in kill_ts if k > offered]
            where = (f"{offered - before[-1]:.1f}s after kill #{kill_ts.index(before[-1]) + 1}"
                     if before else "before the first kill")
            if after:
                where += f", {after[0] - offered:.1f}s before kill #{kill_ts.index(after[0]) + 1}"
            lines.append(f"  {dl:7.2f} s  {t} id {i}: input offered at t={offered:.1f}s "
                         f"({where})")
        lines.append("")
        bounds = [0.0, *[k.t for k in run.kills], math.inf]
        lines += ["| inputs offered between | outputs | p50 s | p99 s | max s |",
                  "|---|---:|---:|---:|---:|"]
        for a, b in itertools.pairwise(bounds):
            part = [x[0] for x in delays if a <= x[3] < b]
            label = f"t={a:.0f}s and " + (f"kill at t={b:.0f}s" if math.isfinite(b)
                                          else "the end")
            if part:
                lines.append(f"| {label} | {len(part):,} | {_pct(part, 50):.3f} | "
                             f"{_pct(part, 99):.3f} | {max(part):.3f} |")
        lines.append("")
    if run.kills:
        restores = run.log.get("restore_list", [])
        lines += [("| kill | t (s) | worker | pid | ready before | restarted after (s) "
                  "| ready again after (s) | partitions it owned | partitions whose owner "
                  "process changed | partition restores logged until the next kill |"),
                  "|---:|---:|---|---:|---|---:|---:|---|---|---:|"]
        for n, k in enumerate(run.kills, 1):
            end = run.kills[n].t if n < len(run.kills) else math.inf
            settled = next((own for t, own in run.assignments if k.t < t < end), None)
            prior = k.owners_before
            had = sorted(p for p, pid in (prior or {}).items() if pid == k.pid)
            moved = (sorted(p for p in range(run.partitions) if prior.get(p) != settled.get(p))
                     if prior is not None and settled is not None else None)
            moved_text = (str(moved) if moved is not None else "n/a" if prior is None
                          else "n/a (not settled before the next kill)")
            w0, w1 = prod.started_wall + k.t, prod.started_wall + end
            n_rest = sum(1 for ts, _, _ in restores if w0 <= ts < w1)
            lines.append(f"| {n} | {k.t:.1f} | worker-{k.index} | {k.pid} | "
                         f"{'yes' if k.was_ready else 'no'} | {k.restarted_after:.1f} | "
                         f"{k.ready_after:.1f} | {had if prior is not None else 'n/a'} | "
                         f"{moved_text} | {n_rest} |")
        lines += ["",
                  ("partitions whose owner process changed: between the last assignment seen "
                  "before the kill and the first one after it (every worker ready, every "
                  "partition owned once; from /readyz). A restore of more partitions than "
                  "moved means owners restored partitions they kept."), ""]
    if lost:
        lines.append("first lost outputs (id, topic, cause, user):")
        for i in lost[:8]:
            t, c, u, _ = expected[i]
            lines.append(f"  {i} {t} cause={c} user={u}")
        lines.append("")
    if extra_other:
        lines.append("first unexplained extra ids (id, topic, cause, user):")
        for i in extra_other[:8]:
            s = seen[i]
            lines.append(f"  {i} {s.topic} cause={s.cause} user={s.user}")
        lines.append("")
    lg = run.log
    lines.append(f"worker log: {lg.get('levels', {})}, {lg.get('restores', 0)} partition "
                 f"restores (longest {lg.get('restore_max_s', math.nan):.3f}s), "
                 f"{lg.get('tracebacks', 0)} tracebacks")
    for msg, n in lg.get("problems", []):
        lines.append(f"  {n:5d} x {msg}")
    for msg, n in lg.get("other_lines", []):
        lines.append(f"  {n:5d} x (not JSON) {msg}")
    if prod.errors:
        lines.append(f"producer errors: {prod.errors[:3]}")
    if prod.max_behind > run.rate:
        lines.append(f"NOTE: the offer fell up to {prod.max_behind:,} records behind its "
                     "schedule (the load generator shares the machine)")
    for e in run.errors:
        lines.append(f"HARNESS ERROR: {e}")
    lines += ["", (f"replay: {exp.events:,} events ({exp.rejected} rejected by the decoder) in "
              f"{exp.seconds:.0f}s in process"), f"reproduce: {run.command}",
              f"commit: {run.commit}"]
    if run.work_dir:
        lines.append(f"logs: {run.work_dir}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Soak: simulated events at a steady rate into `continuity-drift run "
                    "--workers N` on an embedded broker, one worker SIGKILLed at intervals and "
                    "restarted by the supervisor; then lost, extra and duplicated outputs "
                    "against the pure in-process replay, and input-to-output delays. Reports, "
                    "never asserts: exits 0 when the run completed.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, help="events offered (default 1000000; quick "
                                                   "50000)")
    parser.add_argument("--users", type=int, help="simulated users (default 2000; quick 240)")
    parser.add_argument("--rate", type=float, help="events per second offered (default 5000; "
                                                   "quick 1000, so that kills happen during "
                                                   "the offer)")
    parser.add_argument("--kill-every", type=float,
                        help="seconds between two SIGKILLs while the offer runs (default 120; "
                             "quick 20)")
    parser.add_argument("--workers", type=int, default=3, help="workers (default 3)")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of every topic (default 4)")
    parser.add_argument("--drain-timeout", type=float,
                        help="seconds to wait after the offer for every expected output "
                             "(default 900; quick 180)")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="then wait until nothing new arrived for this long (default 15)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--quick", action="store_true", help="smoke run, about 2 minutes")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep broker and worker logs and data here (default: a temporary "
                             "directory, removed at the end)")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.partitions < 1:
        parser.error("--workers and --partitions must be at least 1")
    signal.signal(signal.SIGTERM, _terminate)
    preset = QUICK if args.quick else DEFAULTS
    events = int(args.events or preset["events"])
    users = int(args.users or preset["users"])
    rate = float(args.rate or preset["rate"])
    kill_every = float(args.kill_every or preset["kill_every"])
    drain = float(args.drain_timeout or preset["drain_timeout"])
    if min(events, users) < 1 or rate <= 0 or kill_every <= 0:
        parser.error("--events, --users, --rate and --kill-every must be positive")

    command = "python bench/soak.py" + (" --quick" if args.quick else "")
    for flag, value, default in (("--events", events, preset["events"]),
                                 ("--users", users, preset["users"]),
                                 ("--rate", rate, preset["rate"]),
                                 ("--kill-every", kill_every, preset["kill_every"]),
                                 ("--workers", args.workers, 3),
                                 ("--partitions", args.partitions, 4),
                                 ("--drain-timeout", drain, preset["drain_timeout"]),
                                 ("--settle", args.settle, 15.0),
                                 ("--seed", args.seed, DEFAULT_SEED)):
        if value != default:
            command += f" {flag} {value:g}" if isinstance(value, float) else f" {flag} {value}"
    if args.json:
        command += f" --json {shlex.quote(str(args.json))}"

    run = Run(command, git_commit(), events, users, rate, kill_every, args.workers,
              args.partitions)
    started = time.monotonic()
    log(f"building {events:,} simulated events of {users:,} users")
    stream = build_stream(events, users, args.seed)
    records = stream.records
    run.users = stream.users
    log(f"built {len(records):,} events in {stream.build_s:.1f}s; replaying them in process")
    run.expected = compute_expected(records, args.partitions)
    log(f"replay: {len(run.expected.outputs):,} expected outputs in "
        f"{run.expected.seconds:.1f}s")
    failed = False
    with tempfile.TemporaryDirectory(prefix="continuity-soak-") as tmpname:
        base = Path(tmpname)
        if args.work_dir is not None:
            base = args.work_dir / time.strftime("%Y%m%d-%H%M%S")
            base.mkdir(parents=True, exist_ok=True)
            run.work_dir = str(base)
        try:
            soak(run, records, base, args.settle, drain, args.seed)
        except (RuntimeError, TimeoutError, OSError) as exc:
            run.errors.append(f"{type(exc).__name__}: {exc}")
            failed = True
            log(f"soak failed: {exc}")
        text = report(run)
    print(text)
    print(f"(soak took {time.monotonic() - started:.0f}s)")
    if args.json:
        exp = run.expected
        col = run.collector
        args.json.write_text(json.dumps({
            "command": command, "commit": run.commit, "report": text,
            "expected": len(exp.outputs) if exp else None,
            "received_ids": len(col.seen) if col else None,
            "kills": [k.__dict__ for k in run.kills], "log": run.log,
            "errors": run.errors}, indent=2, default=str))
        print(f"figures written to {args.json}")
    return 1 if failed or (run.collector is None) else 0


if __name__ == "__main__":
    sys.exit(main())
