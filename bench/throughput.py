"""Throughput, latency, memory, checkpoints and per-user state size of one worker (SPEC 11).

Everything runs on one embedded broker (Tansu, memory storage, loopback only) in one
invocation, on the same pre-produced simulated events:

1. baselines: (a) a plain aiokafka consumer that decodes every record with
   ``streams.codec.decode_event``, the SPEC's yardstick, and (b) a bare faust agent
   (decode only, ``stream.take_events``), the rate a first version on faust reaches.
   Each runs in its own subprocess, with its own consumer group, from the beginning of
   ``fhr.events``; records/s are measured inside the subprocess from the first batch to
   the last record.
2. (c) the real worker (``continuity-drift run``, fresh data dir and group) on the same
   events: records/s from polling its ``/metrics`` (events + rejections) until it has
   seen them all. Reported as c/a (SPEC goal >= 20%) and c/b.
3. latency, once per offered rate (``--rate``, a comma-separated list): a fresh worker,
   whose group starts after every record produced so far, gets its own slice of the
   events offered at that rate for ``--duration`` seconds; p50/p95/p99 from its
   end-to-end histogram (interpolated from buckets) and, exactly, from the broker
   timestamps of its outputs on ``drift.scores`` / ``drift.responses`` /
   ``governance.violations`` against the timestamp of the source record they name
   (``source_event_id`` / ``cause_event_id`` / ``event_id``). Goals: p99 < 250 ms at
   5,000/s, < 500 ms at 10,000/s.
4. memory: another worker reads the whole topic (at least ``--memory-events``, 1M by
   default) while its VmRSS is sampled; reports the samples and the slope.
5. checkpoints and consumer batches of every worker, from its ``/metrics`` at the end of
   its run: ``continuity_checkpoint_seconds`` (one DuckDB transaction + group commit),
   ``continuity_checkpoint_records`` and ``continuity_batch_size`` (records per
   consumer batch).
6. per-user state, in process: simulated users run through the fold to steady state
   (half of them stopped mid-session), replicated to ``--state-users`` users; encoded
   bytes and resident (tracemalloc) bytes per user of the state and the baselines. Goal:
   at most 4 KB encoded and 10 KB resident per user. Plus the encoded size of one
   user's state after few and after many sessions, per scenario.

Run ``python bench/throughput.py`` (about 15 minutes on two cores), ``--quick`` for a
smoke run (about 5 minutes), ``--json PATH`` to keep the figures, ``--profile DIR`` to
record py-spy stacks of the throughput worker, ``--split`` to time the engine and the
DuckDB transaction in-process on the same records.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import tracemalloc
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import itertools

import msgspec
from kafka.partitioner.default import murmur2

from streams import topics
from streams.broker import EmbeddedBroker, free_loopback_port

DEFAULTS: dict[str, Any] = {
    "events": 200_000, "users": 1200, "rates": (1000.0, 5000.0, 10000.0), "duration": 60.0,
    "memory_events": 1_000_000, "state_users": (10_000, 100_000), "state_templates": 240}
QUICK: dict[str, Any] = {
    "events": 30_000, "users": 240, "rates": (1000.0, 5000.0, 10000.0), "duration": 15.0,
    "memory_events": 100_000, "state_users": (2000, 10_000), "state_templates": 120}
#: SPEC section 11: p99 from an input record's Kafka timestamp to its output, by offered rate
LATENCY_GOALS_S = {5000.0: 0.250, 10000.0: 0.500}
THROUGHPUT_GOAL = 0.20  # c/a: worker rate over the plain aiokafka consumer's
STATE_ENCODED_GOAL_B = 4096
STATE_RESIDENT_GOAL_B = 10240
RSS_SLOPE_GOAL_MB = 1.0  # per 100k events over the second half of the memory run
DEFAULT_SEED = 20261201
PARTITIONS = 4
#: The latency floor's topic: the same records as a latency phase, read by a plain consumer
#: just before, kept out of the worker's input so that no worker counts them.
FLOOR_TOPIC = "bench.floor"
POLL_S = 0.5
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- events


@dataclass
class Stream:
    """Pre-encoded records in event-time order: (key, value, event_id)."""

    records: list[tuple[bytes, bytes, str]]
    users: int
    sessions_per_user: int
    build_s: float


def build_stream(total: int, users: int, seed: int, start: float | None = None) -> Stream:
    """``total`` simulated events of every scenario, merged by event time.

    The simulator starts every user at the same instant; each user is shifted by a
    random offset up to one session length, so that at any point the stream holds
    many users at different turns of their sessions (as live traffic does), and the
    stream is cut by event time so that every user has had the same number of days.
    """
    from drift.simulation import Scenario, SimParams, simulate
    from streams.codec import encode_event

    started = time.monotonic()
    per_scenario = max(1, round(users / len(Scenario)))
    n_users = per_scenario * len(Scenario)
    params = SimParams()
    session_span = (params.turns + 2) * params.turn_gap_s
    # about 15 events per session; generate with a margin and cut by event time
    test_sessions = max(1, math.ceil(1.25 * total / (n_users * 15)) - params.baseline_sessions)
    while True:
        params = SimParams(test_sessions=test_sessions)
        days = params.baseline_sessions + test_sessions * params.low_sessions + 2
        begin = time.time() - days * 86400.0 if start is None else start
        rng = np.random.default_rng(seed ^ 0x5EED)
        rows: list[tuple[float, bytes, bytes, str]] = []
        for events, _ in simulate(seed, list(Scenario), per_scenario, begin, params):
            shift = float(rng.uniform(0.0, session_span))
            key = events[0].user_id.encode()
            for e in events:
                e2 = replace(e, ts_s=e.ts_s + shift)
                rows.append((e2.ts_s, key, encode_event(e2), e2.event_id))
        if len(rows) >= total:
            break
        test_sessions = math.ceil(test_sessions * 1.5 * total / max(len(rows), 1))
    rows.sort(key=lambda r: r[0])
    del rows[total:]
    sessions = round(len(rows) / n_users / 15)
    return Stream([(k, v, i) for _, k, v, i in rows], n_users, sessions,
                  time.monotonic() - started)


def partition_of(key: bytes, partitions: int) -> int:
    """The partition kafka-python's and the Java client's default partitioner pick."""
    return int((murmur2(key) & 0x7FFFFFFF) % partitions)


async def _produce(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
                   partitions: int, rate: float = 0.0,
                   acks: list[float] | None = None, topic: str = topics.INPUT
                   ) -> tuple[int, float]:
    """Send records to ``topic`` in per-partition batches; paced at ``rate``/s when ``rate`` > 0.

    Paced records carry the wall-clock time at which they are offered as their Kafka
    timestamp. ``acks`` collects, per batch, seconds from offer to broker acknowledgement.
    """
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0,
                                max_batch_size=1 << 20, max_request_size=8 << 20,
                                client_id="bench-throughput")
    await producer.start()
    futures: list[asyncio.Future[Any]] = []
    started = time.monotonic()
    sent = 0
    try:
        total = len(records)
        while sent < total:
            if rate > 0:
                due = min(total, int((time.monotonic() - started) * rate))
                if due <= sent:
                    await asyncio.sleep(0.004)
                    continue
            else:
                due = min(total, sent + 5000)
            offered = time.time()
            ts_ms = int(offered * 1000) if rate > 0 else None
            batches: dict[int, Any] = {}
            for key, value, _ in records[sent:due]:
                part = partition_of(key, partitions)
                batch = batches.get(part)
                if batch is None:
                    batch = batches[part] = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=ts_ms) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=part))
                    batch = batches[part] = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=ts_ms)
            for part, batch in batches.items():
                fut = await producer.send_batch(batch, topic, partition=part)
                if acks is not None:
                    fut.add_done_callback(lambda _f, t=offered: acks.append(time.time() - t))
                futures.append(fut)
            sent = due
            if rate <= 0 and len(futures) > 200:
                await asyncio.gather(*futures)
                futures.clear()
        await asyncio.wait_for(asyncio.gather(*futures), timeout=120)
    finally:
        await producer.stop()
    return sent, time.monotonic() - started


def produce(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
            partitions: int) -> float:
    sent, elapsed = asyncio.run(_produce(bootstrap, records, partitions))
    return float(sent / max(elapsed, 1e-9))


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create one topic explicitly (the embedded broker would auto-create it with 4
    partitions)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-admin")
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def delete_topic(bootstrap: str, name: str) -> None:
    """Delete one topic (the embedded broker keeps its log in memory)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-admin")
    try:
        admin.delete_topics([name])
    finally:
        admin.close()


def offsets_after(records: Sequence[tuple[bytes, bytes, str]], partitions: int
                  ) -> dict[int, int]:
    """Next offset of each partition of a fresh topic after ``records``.

    Counted here rather than asked of the broker: the embedded broker (Tansu 0.6)
    answers ListOffsets(latest) with the base offset of the last batch plus one,
    not the end of the log (fetch responses carry the right high watermark).
    """
    counts = Counter(partition_of(key, partitions) for key, _, _ in records)
    return {p: counts.get(p, 0) for p in range(partitions)}


async def _read_all(bootstrap: str, topic: str, idle_s: float,
                    timeout_s: float) -> list[tuple[int, bytes]]:
    """(timestamp ms, value) of every record of ``topic``, until nothing new for ``idle_s``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    out: list[tuple[int, bytes]] = []
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or [])
        consumer.assign([TopicPartition(topic, p) for p in parts])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < idle_s:
            batches = await consumer.getmany(timeout_ms=200)
            for msgs in batches.values():
                if msgs:
                    quiet_since = time.monotonic()
                out.extend((msg.timestamp, msg.value) for msg in msgs)
    finally:
        await consumer.stop()
    return out


def read_all(bootstrap: str, topic: str, idle_s: float = 3.0,
             timeout_s: float = 300.0) -> list[tuple[int, bytes]]:
    return asyncio.run(_read_all(bootstrap, topic, idle_s, timeout_s))


def commit_group_offsets(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """Give a fresh consumer group committed offsets, so that it starts there."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topics.INPUT, p): OffsetAndMetadata(o, "", -1)
                         for p, o in offsets.items()})
    finally:
        consumer.close()


# --------------------------------------------------------------------------- processes


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def stop_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM,
                 timeout_s: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    return env


# --------------------------------------------------------------------------- baselines

AIOKAFKA_SCRIPT = """
import asyncio, json, sys, time
from aiokafka import AIOKafkaConsumer
from streams.codec import decode_event

bootstrap, group, n, out, timeout_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])

async def main():
    consumer = AIOKafkaConsumer("fhr.events", bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                session_timeout_ms=6000, heartbeat_interval_ms=1000)
    began = time.perf_counter()
    await consumer.start()
    seen = 0
    first = None
    deadline = time.monotonic() + timeout_s
    try:
        while seen < n and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, msgs in batches.items():
                for msg in msgs:
                    decode_event(msg.key, msg.value)
                seen += len(msgs)
            if seen and first is None:
                first = (time.perf_counter(), seen, time.process_time())
        done, cpu_done = time.perf_counter(), time.process_time()
    finally:
        await consumer.stop()
    t0, c0, cpu0 = first or (done, 0, cpu_done)
    json.dump({"records": seen, "first_batch": c0, "seconds": done - t0,
               "cpu_s": cpu_done - cpu0,
               "startup_s": t0 - began, "complete": seen >= n,
               "rate": (seen - c0) / max(done - t0, 1e-9)}, open(out, "w"))

asyncio.run(main())
"""

FAUST_SCRIPT = """
import json, os, sys, time
import faust
from streams.codec import decode_event

bootstrap, app_id, n, out, datadir, batch_max, within = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6]),
    float(sys.argv[7]))
began = time.perf_counter()
app = faust.App(app_id, broker=f"kafka://{bootstrap}", store="memory://", datadir=datadir,
                web_enabled=False, topic_allow_declare=False, topic_disable_leader=True,
                consumer_auto_offset_reset="earliest", broker_session_timeout=6.0,
                broker_heartbeat_interval=1.0, broker_rebalance_timeout=10.0,
                broker_commit_every=batch_max, broker_commit_interval=1.0,
                stream_wait_empty=False, producer_acks=-1)
source = app.topic("fhr.events", key_serializer="raw", value_serializer="raw")
state = {"seen": 0, "first": None}

@app.agent(source, name="bare-decode")
async def bare(stream):
    async for events in stream.take_events(batch_max, within=within):
        for e in events:
            decode_event(e.message.key, e.message.value)
        state["seen"] += len(events)
        if state["first"] is None:
            state["first"] = (time.perf_counter(), state["seen"], time.process_time())
        if state["seen"] >= n:
            done, cpu_done = time.perf_counter(), time.process_time()
            t0, c0, cpu0 = state["first"]
            with open(out, "w") as fh:
                json.dump({"records": state["seen"], "first_batch": c0, "seconds": done - t0,
                           "cpu_s": cpu_done - cpu0,
                           "startup_s": t0 - began, "complete": True,
                           "rate": (state["seen"] - c0) / max(done - t0, 1e-9)}, fh)
            os._exit(0)

faust.Worker(app, quiet=True, loglevel="WARN", redirect_stdouts=False).execute_from_commandline()
"""


def baseline_aiokafka(bootstrap: str, n: int, tmp: Path, timeout_s: float) -> dict[str, Any]:
    out = tmp / "aiokafka.json"
    group = f"bench-aiokafka-{os.getpid()}-{int(time.time())}"
    argv = [bootstrap, group, str(n)]
    path = tmp / "aiokafka_consumer.py"
    path.write_text(textwrap.dedent(AIOKAFKA_SCRIPT))
    logf = open(tmp / "aiokafka_consumer.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(path), *argv, str(out), str(timeout_s)],
                            cwd=ROOT, env=clean_env(), stdout=logf, stderr=logf)
    try:
        proc.wait(timeout=timeout_s + 30)
        if not out.exists():
            raise RuntimeError(f"aiokafka baseline exited with {proc.returncode}; "
                               f"see {tmp / 'aiokafka_consumer.log'}")
        result = dict(json.loads(out.read_text()))
    finally:
        stop_process(proc, timeout_s=10)
        logf.close()
    result["script"] = str(path)
    return result


def baseline_faust(bootstrap: str, n: int, tmp: Path, timeout_s: float, batch_max: int,
                   within_s: float) -> dict[str, Any]:
    out = tmp / "faust.json"
    app_id = f"bench-faust-{os.getpid()}-{int(time.time())}"
    datadir = tmp / "faust-bare"
    path = tmp / "faust_bare.py"
    path.write_text(textwrap.dedent(FAUST_SCRIPT))
    logf = open(tmp / "faust_bare.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(path), bootstrap, app_id, str(n), str(out),
                             str(datadir), str(batch_max), str(within_s)],
                            cwd=ROOT, env=clean_env(), stdout=logf, stderr=logf)
    try:
        deadline = time.monotonic() + timeout_s
        result: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            if out.exists():
                try:
                    result = dict(json.loads(out.read_text()))
                    break
                except json.JSONDecodeError:
                    pass
            if proc.poll() is not None and not out.exists():
                raise RuntimeError(f"bare faust agent exited with {proc.returncode}; "
                                   f"see {tmp / 'faust_bare.log'}")
            time.sleep(0.1)
        if result is None:
            raise TimeoutError(f"bare faust agent did not read {n} records in {timeout_s:.0f}s")
    finally:
        stop_process(proc, timeout_s=10)
        logf.close()
    result["script"] = str(path)
    return result


# --------------------------------------------------------------------------- the worker


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def metric_sum(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
               name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


@dataclass
class Histogram:
    buckets: list[tuple[float, float]]  # (upper bound, cumulative count), +Inf last
    count: float
    total: float

    @staticmethod
    def of(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
           name: str) -> Histogram:
        buckets = []
        for (n, labels), v in samples.items():
            if n == f"{name}_bucket":
                le = dict(labels)["le"]
                buckets.append((math.inf if le == "+Inf" else float(le), v))
        buckets.sort()
        return Histogram(buckets, samples.get((f"{name}_count", ()), 0.0),
                         samples.get((f"{name}_sum", ()), 0.0))

    def minus(self, other: Histogram) -> Histogram:
        before = dict(other.buckets)
        return Histogram([(le, c - before.get(le, 0.0)) for le, c in self.buckets],
                         self.count - other.count, self.total - other.total)

    def quantile(self, q: float) -> float:
        """Linear interpolation inside the bucket, as Prometheus' histogram_quantile.

        ``inf`` when the rank falls beyond the last finite bucket bound.
        """
        if self.count <= 0 or not self.buckets:
            return math.nan
        rank = q * self.count
        prev_le, prev_c = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if math.isinf(le):
                    return math.inf
                if c == prev_c:
                    return le
                return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            prev_le, prev_c = le, c
        return self.buckets[-1][0]

    def share_le(self, bound: float) -> float:
        for le, c in self.buckets:
            if le >= bound - 1e-12:
                return c / self.count if self.count else math.nan
        return 1.0

    def summary(self) -> dict[str, Any]:
        return {"count": self.count, "sum": self.total,
                "mean": self.total / self.count if self.count else math.nan,
                "p50": self.quantile(0.5), "p95": self.quantile(0.95),
                "p99": self.quantile(0.99),
                "buckets": [[("+Inf" if math.isinf(le) else le), c] for le, c in self.buckets]}


#: The worker's histograms of its checkpoints and consumer batches, by the key they are
#: reported under.
COMMIT_HISTOGRAMS = {"checkpoint_seconds": "continuity_checkpoint_seconds",
                     "checkpoint_records": "continuity_checkpoint_records",
                     "batch_size": "continuity_batch_size"}


def commit_histograms(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
                      before: dict[tuple[str, tuple[tuple[str, str], ...]], float] | None = None
                      ) -> dict[str, Any]:
    """Summaries of the checkpoint and batch histograms; the delta since ``before`` if given.

    ``checkpoints_le_1_record`` counts the checkpoints that covered at most one record:
    the worker also checkpoints every ``checkpoint_interval_s`` while nothing arrives.
    """
    hists: dict[str, Histogram] = {}
    for key, name in COMMIT_HISTOGRAMS.items():
        hist = Histogram.of(samples, name)
        hists[key] = hist if before is None else hist.minus(Histogram.of(before, name))
    out: dict[str, Any] = {key: h.summary() for key, h in hists.items()}
    out["checkpoints_le_1_record"] = next(
        (c for le, c in hists["checkpoint_records"].buckets if le >= 1), 0.0)
    return out


@dataclass(frozen=True)
class WorkerSpec:
    """How workers are started: the command and extra config lines (``--worker-*`` flags)."""

    cmd: tuple[str, ...] = ()
    worker: tuple[tuple[str, str], ...] = ()
    drift: tuple[tuple[str, str], ...] = ()

    def toml(self, app_id: str) -> str:
        lines = ["[worker]", f'app_id = "{app_id}"']
        lines += [f"{k} = {v}" for k, v in self.worker]
        if self.drift:
            lines += ["[drift]"] + [f"{k} = {v}" for k, v in self.drift]
        return "\n".join(lines) + "\n"

    def command(self) -> list[str]:
        if self.cmd:
            return list(self.cmd)
        exe = shutil.which("continuity-drift")
        return [exe] if exe else [sys.executable, "-m", "streams.cli"]


@dataclass
class WorkerRun:
    """A ``continuity-drift run`` subprocess on the benchmark broker."""

    bootstrap: str
    base: Path
    name: str
    app_id: str
    spec: WorkerSpec = WorkerSpec()
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    argv: list[str] = field(default_factory=list)
    _log: Any = None

    @property
    def data_dir(self) -> Path:
        return self.base / self.name

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self) -> WorkerRun:
        self.port = free_loopback_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.base / f"{self.name}.toml"
        config.write_text(self.spec.toml(self.app_id))
        cmd = self.spec.command()
        self.argv = ["run", "--broker", self.bootstrap, "--data-dir", str(self.data_dir),
                     "--web-port", str(self.port), "--config", str(config)]
        self._log = open(self.base / f"{self.name}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd + self.argv, cwd=ROOT, env=clean_env(),
                                     stdout=self._log, stderr=self._log)
        return self

    @property
    def command(self) -> str:
        exe = " ".join(self.spec.cmd) if self.spec.cmd else "continuity-drift"
        return f"{exe} " + " ".join(self.argv)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        if not self.alive():
            code = self.proc.returncode if self.proc else None
            raise RuntimeError(f"worker {self.name} exited ({code}); see "
                               f"{self.base / (self.name + '.log')}")

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return scrape(self.metrics_url)

    def processed(self) -> float:
        s = self.samples()
        return metric_sum(s, "continuity_events_total") + metric_sum(
            s, "continuity_rejections_total")

    def wait_ready(self, timeout_s: float) -> float:
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            self.check()
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"worker {self.name} not ready within {timeout_s:.0f}s")

    def wait_processed(self, target: float, timeout_s: float,
                       on_sample: Callable[[float, float], None] | None = None,
                       interval_s: float = POLL_S) -> list[tuple[float, float]]:
        """Poll /metrics until ``target`` records are counted; returns (time, count)."""
        seen: list[tuple[float, float]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            try:
                count = self.processed()
            except OSError:
                time.sleep(interval_s)
                continue
            now = time.monotonic()
            seen.append((now, count))
            if on_sample is not None:
                on_sample(now, count)
            if count >= target:
                return seen
            time.sleep(interval_s)
        raise TimeoutError(f"worker {self.name} counted {seen[-1][1] if seen else 0:.0f} "
                           f"of {target:.0f} records within {timeout_s:.0f}s")

    def stop(self) -> None:
        stop_process(self.proc, timeout_s=30)
        if self._log is not None:
            self._log.close()
            self._log = None


def rate_from_samples(samples: list[tuple[float, float]], target: float) -> dict[str, float]:
    """Records/s from the first non-zero count to ``target`` (the crossing interpolated)."""
    first = next(((t, c) for t, c in samples if c > 0), None)
    if first is None:
        return {"rate": math.nan, "seconds": math.nan, "from_count": 0.0}
    t0, c0 = first
    t1 = samples[-1][0]
    for (ta, ca), (tb, cb) in itertools.pairwise(samples):
        if cb >= target > ca:
            t1 = ta + (tb - ta) * (target - ca) / max(cb - ca, 1e-9)
            break
    seconds = max(t1 - t0, 1e-9)
    return {"rate": (target - c0) / seconds, "seconds": seconds, "from_count": c0}


# --------------------------------------------------------------------------- phases


def phase_worker_throughput(bootstrap: str, base: Path, n: int, broker_pid: int,
                            timeout_s: float, profile_dir: Path | None,
                            spec: WorkerSpec) -> dict[str, Any]:
    worker = WorkerRun(bootstrap, base, "worker-throughput",
                       f"bench-worker-{os.getpid()}-{int(time.time())}", spec).start()
    spy: subprocess.Popen[bytes] | None = None
    try:
        ready_s = worker.wait_ready(120)
        if profile_dir is not None and shutil.which("py-spy"):
            profile_dir.mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(worker.pid), "--rate", "200", "--format",
                 "raw", "--nonblocking", "--output", str(profile_dir / "worker-throughput.txt"),
                 "--duration", str(int(timeout_s))],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cpu: list[tuple[float, float, float]] = []  # (count, worker CPU s, broker CPU s)

        def sample(now: float, count: float) -> None:
            cpu.append((count, proc_cpu_s(worker.pid), proc_cpu_s(broker_pid)))

        t0 = time.monotonic()
        samples = worker.wait_processed(n, timeout_s, on_sample=sample)
        t1 = time.monotonic()
        measured = rate_from_samples(samples, n)
        # CPU over the same window as the rate: first non-zero count to the end
        c0, cpu0, bcpu0 = next((c for c in cpu if c[0] > 0), cpu[0])
        c1, cpu1, bcpu1 = cpu[-1]
        final = worker.samples()
        outputs = metric_sum(final, "continuity_outputs_total")
        return {"records": n, **measured, "ready_s": ready_s, "command": worker.command,
                "worker_cpu_s": cpu1 - cpu0, "broker_cpu_s": bcpu1 - bcpu0,
                "cpu_records": c1 - c0, "wall_s": t1 - t0, "outputs": outputs,
                **commit_histograms(final), "rss_mb": proc_rss_mb(worker.pid)}
    finally:
        if spy is not None:
            stop_process(spy, signal.SIGINT, timeout_s=30)
        worker.stop()


async def _paced_offer(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
                       partitions: int, rate: float, acks: list[float]) -> tuple[int, float]:
    return await _produce(bootstrap, records, partitions, rate, acks)


class _Ids(msgspec.Struct):
    event_id: str = ""


class _Out(msgspec.Struct):
    source_event_id: str | None = None
    cause_event_id: str | None = None
    event_id: str | None = None


def percentiles(values: Sequence[float], qs: Iterable[float] = (50, 95, 99, 99.9)
                ) -> dict[str, float]:
    if not values:
        return {f"p{q:g}": math.nan for q in qs}
    arr = np.asarray(values, dtype=float)
    return {f"p{q:g}": float(np.percentile(arr, q)) for q in qs}


def _share_le(values: Sequence[float], bound: float) -> float:
    return sum(1 for x in values if x <= bound) / len(values) if values else math.nan


def phase_latency(bootstrap: str, base: Path, records: Sequence[tuple[bytes, bytes, str]],
                  input_start: dict[int, int], rate: float, partitions: int,
                  broker_pid: int, spec: WorkerSpec) -> dict[str, Any]:
    """A fresh worker whose group starts at ``input_start`` gets ``records`` at ``rate``/s.

    Each call gets its own data dir and group (named after the rate), so that phases at
    several rates on one broker do not share state.
    """
    app_id = f"bench-latency-{rate:.0f}-{os.getpid()}-{int(time.time())}"
    commit_group_offsets(bootstrap, app_id, input_start)
    out_topics = (topics.SCORES, topics.RESPONSES, topics.VIOLATIONS)
    worker = WorkerRun(bootstrap, base, f"worker-latency-{rate:.0f}", app_id, spec).start()
    acks: list[float] = []
    try:
        ready_s = worker.wait_ready(120)
        time.sleep(2.0)
        backlog = worker.processed()
        if backlog > 0:  # the committed offsets were not used: let it catch up first
            log(f"latency worker is reading a backlog ({backlog:.0f} so far); waiting")
            worker.wait_processed(sum(input_start.values()), 120 + backlog / 200)
            time.sleep(2.0)
            backlog = worker.processed()
        first = worker.samples()
        before = Histogram.of(first, "continuity_end_to_end_latency_seconds")
        result: dict[str, Any] = {}

        def offer() -> None:
            try:
                sent, secs = asyncio.run(_paced_offer(bootstrap, records, partitions, rate,
                                                      acks))
                result.update(sent=sent, seconds=secs)
            except Exception as exc:  # noqa: BLE001 (reported below)
                result["error"] = repr(exc)

        cpu0, bcpu0 = proc_cpu_s(worker.pid), proc_cpu_s(broker_pid)
        thread = threading.Thread(target=offer, name="paced-producer", daemon=True)
        started = time.monotonic()
        thread.start()
        duration = len(records) / rate
        lag: list[tuple[float, float]] = []
        rss: list[float] = []

        def sample(now: float, count: float) -> None:
            lag.append((now - started, count - backlog))
            rss.append(proc_rss_mb(worker.pid))

        # a worker slower than the offer drains the rest after it: allow 2,000/s for that
        worker.wait_processed(backlog + len(records), duration + 120 + len(records) / 2000,
                              on_sample=sample, interval_s=1.0)
        thread.join(timeout=60)
        cpu1, bcpu1 = proc_cpu_s(worker.pid), proc_cpu_s(broker_pid)
        if "error" in result:
            raise RuntimeError(f"paced producer failed: {result['error']}")
        elapsed = time.monotonic() - started
        last = worker.samples()
        hist = Histogram.of(last, "continuity_end_to_end_latency_seconds").minus(before)
        commits = commit_histograms(last, first)
        time.sleep(1.0)
    finally:
        worker.stop()
    # exact: output record timestamp minus source record timestamp, by source event id
    # (earlier runs' outputs name source records outside this set and are left out)
    paced_ids = {event_id for _, _, event_id in records}
    sources: dict[str, int] = {}
    decode_ids = msgspec.json.Decoder(_Ids)
    for ts, value in read_all(bootstrap, topics.INPUT):
        event_id = decode_ids.decode(value).event_id
        if event_id in paced_ids:
            sources[event_id] = ts
    decode_out = msgspec.json.Decoder(_Out)
    first_out: dict[str, int] = {}
    per_topic: dict[str, list[float]] = defaultdict(list)
    for topic in out_topics:
        for ts, value in read_all(bootstrap, topic):
            o = decode_out.decode(value)
            src = o.source_event_id or o.cause_event_id or o.event_id
            if src is None or src not in sources:
                continue
            per_topic[topic].append((ts - sources[src]) / 1000.0)
            if src not in first_out or ts < first_out[src]:
                first_out[src] = ts
    per_record = [(ts - sources[s]) / 1000.0 for s, ts in first_out.items()]
    per_output = [x for xs in per_topic.values() for x in xs]
    return {
        "rate": rate, "offered": result.get("sent", 0), "offer_seconds": result.get("seconds"),
        "achieved_offer_rate": result.get("sent", 0) / max(result.get("seconds") or 1e-9, 1e-9),
        "drain_seconds": elapsed, "ready_s": ready_s, "backlog_skipped": backlog == 0,
        "command": worker.command,
        "histogram": {**hist.summary(), "share_le_250ms": hist.share_le(0.25),
                      "share_le_500ms": hist.share_le(0.5)},
        "exact_per_record": {"n": len(per_record), **percentiles(per_record),
                             "max": max(per_record, default=math.nan),
                             "share_le_250ms": _share_le(per_record, 0.25),
                             "share_le_500ms": _share_le(per_record, 0.5)},
        "exact_per_output": {"n": len(per_output), **percentiles(per_output),
                             "by_topic": {t: {"n": len(v), **percentiles(v)}
                                          for t, v in per_topic.items()}},
        "sources_found": len(sources),
        **commits,
        "producer_ack": {"n": len(acks), **percentiles(acks)},
        "worker_cpu_share": (cpu1 - cpu0) / max(elapsed, 1e-9),
        "broker_cpu_share": (bcpu1 - bcpu0) / max(elapsed, 1e-9),
        "max_behind": max((rate * min(t, duration) - c for t, c in lag), default=0.0),
        "rss_mb": max(rss, default=math.nan),
    }


def phase_floor(bootstrap: str, base: Path, records: Sequence[tuple[bytes, bytes, str]],
                input_start: dict[int, int], rate: float, partitions: int, settings: Any
                ) -> dict[str, Any]:
    """The broker's latency floor just before a worker latency phase at ``rate``: the phase's
    records offered the same way to :data:`FLOOR_TOPIC` (``input_start``: its offsets before
    them), read by a plain aiokafka consumer that decodes each value and does nothing else,
    in its own process with the worker's fetch settings, timed from each record's Kafka
    timestamp to ``getmany`` handing it over (``bench/broker_latency.py``, which measures the
    floor alone). No worker can go below it on this broker; a failure is reported, and the
    phases go on."""
    from bench import broker_latency

    try:
        return broker_latency.measure(bootstrap, base, list(records), input_start, rate,
                                      partitions, settings,
                                      step_s=max(1.0, len(records) / rate / 5),
                                      topic=FLOOR_TOPIC)
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
        log(f"    floor run at {rate:.0f}/s failed: {exc}")
        return {"rate": rate, "offered": len(records), "error": str(exc)}


def phase_memory(bootstrap: str, base: Path, total: int, broker_pid: int,
                 interval_s: float, spec: WorkerSpec) -> dict[str, Any]:
    worker = WorkerRun(bootstrap, base, "worker-memory",
                       f"bench-memory-{os.getpid()}-{int(time.time())}", spec).start()
    points: list[dict[str, float]] = []
    try:
        worker.wait_ready(120)
        started = time.monotonic()
        last = {"t": -1e9}

        def sample(now: float, count: float) -> None:
            if now - last["t"] >= interval_s or count >= total:
                last["t"] = now
                db = worker.data_dir / "continuity.duckdb"
                points.append({"t": now - started, "events": count,
                               "rss_mb": proc_rss_mb(worker.pid),
                               "cpu_s": proc_cpu_s(worker.pid),
                               "db_mb": db.stat().st_size / 2**20 if db.exists() else 0.0})
                log(f"  memory run: {count:9.0f} / {total} events, "
                    f"RSS {points[-1]['rss_mb']:.1f} MB")

        samples = worker.wait_processed(total, 120 + total / 400.0, on_sample=sample,
                                        interval_s=1.0)
        measured = rate_from_samples(samples, total)
        commits = commit_histograms(worker.samples())
        db = worker.data_dir / "continuity.duckdb"
        db_size = db.stat().st_size / 2**20 if db.exists() else math.nan
        wal = db.with_suffix(".duckdb.wal")
        wal_size = wal.stat().st_size / 2**20 if wal.exists() else 0.0
    finally:
        worker.stop()
    store = read_store_sizes(worker.data_dir / "continuity.duckdb")
    half = [p for p in points if p["events"] >= total / 2]
    slope = _slope([p["events"] for p in half], [p["rss_mb"] for p in half])
    slope_all = _slope([p["events"] for p in points], [p["rss_mb"] for p in points])
    third = [p for p in points if p["events"] >= 2 * total / 3]
    slope_third = _slope([p["events"] for p in third], [p["rss_mb"] for p in third])
    return {"events": total, **measured, "command": worker.command, "samples": points,
            "rss_start_mb": points[0]["rss_mb"] if points else math.nan,
            "rss_half_mb": half[0]["rss_mb"] if half else math.nan,
            "rss_end_mb": points[-1]["rss_mb"] if points else math.nan,
            "rss_max_mb": max((p["rss_mb"] for p in points), default=math.nan),
            "slope_second_half_mb_per_100k": slope * 1e5,
            "slope_whole_run_mb_per_100k": slope_all * 1e5,
            "slope_last_third_mb_per_100k": slope_third * 1e5,
            **commits, "duckdb_file_mb": db_size, "duckdb_wal_mb": wal_size,
            "store": store}


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 3:
        return math.nan
    return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


def read_store_sizes(path: Path) -> dict[str, Any]:
    """Row counts and state blob sizes of a stopped worker's DuckDB file (read-only)."""
    import duckdb

    if not path.exists():
        return {}
    con = duckdb.connect(str(path), read_only=True)
    try:
        out: dict[str, Any] = {}
        for table in ("user_state", "baseline_versions", "session_summaries"):
            row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
            out[f"{table}_rows"] = int(row[0]) if row else 0
        row = con.execute("SELECT avg(octet_length(state)), max(octet_length(state)) "
                          "FROM user_state").fetchone()
        out["state_bytes_mean"] = float(row[0]) if row and row[0] is not None else math.nan
        out["state_bytes_max"] = int(row[1]) if row and row[1] is not None else 0
        row = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM session_summaries "
                          "GROUP BY user_id)").fetchone()
        out["max_sessions_per_user"] = int(row[0]) if row and row[0] is not None else 0
        return out
    finally:
        con.close()


def state_size_bound(seed: int, sessions: Sequence[int]) -> list[dict[str, Any]]:
    """Encoded size of one user's state and current baselines after n sessions, per scenario."""
    from baselines.snapshot import encode_state
    from baselines.columns import plain_values
    from drift.model import DriftConfig
    from drift.replay import MemoryReplay
    from drift.simulation import Scenario, SimParams, simulate_user

    config = DriftConfig()
    enc = msgspec.msgpack.Encoder(enc_hook=plain_values)
    rows = []
    for scenario in (Scenario.STABLE, Scenario.ATTUNEMENT_SHIFT, Scenario.SEMANTIC_CONTRADICTION,
                     Scenario.MODEL_CHANGE_COLLAPSED, Scenario.SUSTAINED_LOW,
                     Scenario.GOVERNANCE):
        for n in sessions:
            params = SimParams(test_sessions=max(1, n - SimParams().baseline_sessions))
            events, truth = simulate_user(np.random.default_rng(seed), scenario, "u-bench",
                                          1.7e9, params)
            replay = MemoryReplay(config)
            peak = 0
            for i, e in enumerate(events):
                replay.feed(e)
                if i >= len(events) - 200:  # the last sessions, mid-session included
                    peak = max(peak, len(encode_state(replay.states["u-bench"])))
            state = replay.states["u-bench"]
            base = replay.baselines.get("u-bench")
            base_bytes = 0
            if base is not None:
                base_bytes = sum(len(enc.encode(b)) for b in (base.attunement, base.semantic,
                                                             base.safety) if b is not None)
            rows.append({"scenario": scenario.value, "sessions": len(truth),
                         "events": len(events), "state_bytes": len(encode_state(state)),
                         "state_bytes_peak_recent": peak,
                         "recent_ids": len(state.recent.ring) // 8, "baseline_bytes": base_bytes})
    return rows


def _resident_per_user(build: Callable[[], object], n: int) -> float:
    """Bytes that ``build()`` allocates and keeps (tracemalloc), divided by ``n``."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return (after - before) / n


def per_user_state(seed: int, user_counts: Sequence[int], templates: int,
                   test_sessions: int = 40, cut_events: int = 8,
                   deepcopy_users: int = 2000) -> dict[str, Any]:
    """Encoded and resident bytes per user of the state and baselines, at N users.

    ``templates`` simulated users of every scenario go through the fold
    (:class:`drift.replay.MemoryReplay`) for ``3 + test_sessions`` sessions, enough to
    fill the dedupe ring (``recent_event_ids`` fingerprints), that is to reach steady
    state; every second one stops ``cut_events`` events before its end, so that idle
    users and users with an open session are both represented. They are then replicated
    round robin to N users as the worker holds them: a dict from a distinct user id to a
    state decoded from the template's snapshot (``baselines.snapshot``, as the worker
    loads it from DuckDB), and a dict from the same ids to baselines, each decoded from
    its own msgpack encoding, so that no two users share an object. ``copy.deepcopy``
    would not do: it returns every str, bytes, float and all-atomic tuple as the same
    object, so its copies share the ring and the feature rows; the ``deepcopy`` figures
    (at ``deepcopy_users`` copies) show how much that hides.

    Resident bytes are what tracemalloc counts as allocated and kept, divided by N; the
    state's figure includes the user id key and both dicts' entries.
    """
    from baselines.snapshot import decode_state, encode_state
    from baselines.columns import plain_values
    from drift.baseline import AttunementBaseline, SafetyBaseline, SemanticBaseline, UserBaselines
    from drift.model import DriftConfig
    from drift.replay import MemoryReplay
    from drift.simulation import Scenario, SimParams, simulate

    started = time.monotonic()
    config = DriftConfig()
    replay = MemoryReplay(config)
    ids: list[str] = []
    scenarios: list[str] = []
    per_scenario = max(1, round(templates / len(Scenario)))
    for i, (events, truth) in enumerate(simulate(seed, list(Scenario), per_scenario, 1.7e9,
                                                 SimParams(test_sessions=test_sessions))):
        for e in events[:-cut_events] if i % 2 else events:
            replay.feed(e)
        ids.append(events[0].user_id)
        scenarios.append(truth[0].scenario)
    simulate_s = time.monotonic() - started
    states = [replay.states[u] for u in ids]
    bases = [replay.baselines.get(u, UserBaselines()) for u in ids]
    blobs = [encode_state(st) for st in states]
    enc = msgspec.msgpack.Encoder(enc_hook=plain_values)
    decoders: tuple[msgspec.msgpack.Decoder[Any], ...] = tuple(
        msgspec.msgpack.Decoder(k) for k in (AttunementBaseline, SemanticBaseline, SafetyBaseline))
    base_blobs = [tuple(None if b is None else enc.encode(b)
                        for b in (ub.attunement, ub.semantic, ub.safety)) for ub in bases]
    state_bytes = [len(b) for b in blobs]
    base_bytes = [sum(len(x) for x in bb if x is not None) for bb in base_blobs]
    t = len(ids)

    def hold_states(n: int, held: dict[str, Any]) -> object:
        held["states"] = {f"{ids[i % t]}~{i:07d}": decode_state(blobs[i % t]) for i in range(n)}
        return held["states"]

    def hold_baselines(held: dict[str, Any]) -> object:
        held["baselines"] = {
            key: UserBaselines(*(None if x is None else d.decode(x)
                                 for x, d in zip(base_blobs[i % t], decoders, strict=True)))
            for i, key in enumerate(held["states"])}
        return held["baselines"]

    rows = []
    for n in user_counts:
        t0 = time.monotonic()
        held: dict[str, Any] = {}
        state_res = _resident_per_user(partial(hold_states, n, held), n)
        base_res = _resident_per_user(partial(hold_baselines, held), n)
        held.clear()
        picked = [i % t for i in range(n)]
        rows.append({"users": n,
                     "state_encoded_mean": sum(state_bytes[i] for i in picked) / n,
                     "state_encoded_max": max(state_bytes[i] for i in picked),
                     "baselines_encoded_mean": sum(base_bytes[i] for i in picked) / n,
                     "baselines_encoded_max": max(base_bytes[i] for i in picked),
                     "state_resident": state_res, "baselines_resident": base_res,
                     "seconds": time.monotonic() - t0})
        log(f"    {n} users: state {state_res:.0f} B + baselines {base_res:.0f} B resident "
            "per user")
    m = min(deepcopy_users, max(user_counts))
    deep = {"users": m,
            "state_resident": _resident_per_user(
                lambda: [copy.deepcopy(states[i % t]) for i in range(m)], m),
            "baselines_resident": _resident_per_user(
                lambda: [copy.deepcopy(bases[i % t]) for i in range(m)], m)}
    is_open = [st.session is not None for st in states]
    opened = [b for b, o in zip(state_bytes, is_open, strict=True) if o]
    idle = [b for b, o in zip(state_bytes, is_open, strict=True) if not o]
    by_scenario: dict[str, list[int]] = defaultdict(list)
    for scen, size in zip(scenarios, state_bytes, strict=True):
        by_scenario[scen].append(size)
    ring_ids = [len(st.recent.ring) // 8 for st in states]
    return {"templates": t, "sessions": SimParams().baseline_sessions + test_sessions,
            "cut_events": cut_events, "simulate_s": simulate_s,
            "open_sessions": len(opened),
            "state_encoded_open_mean": sum(opened) / len(opened) if opened else math.nan,
            "state_encoded_open_max": max(opened, default=0),
            "state_encoded_idle_mean": sum(idle) / len(idle) if idle else math.nan,
            "state_encoded_idle_max": max(idle, default=0),
            "recent_event_ids": config.recent_event_ids,
            "ring_ids_mean": sum(ring_ids) / t,
            "ring_full": sum(1 for r in ring_ids if r >= config.recent_event_ids),
            "state_encoded_by_scenario": {k: {"mean": sum(v) / len(v), "max": max(v)}
                                          for k, v in by_scenario.items()},
            "rows": rows, "deepcopy": deep}


def engine_split(records: Sequence[tuple[bytes, bytes, str]], partitions: int,
                 batch_sizes: Sequence[int], warmup: int) -> list[dict[str, Any]]:
    """The worker's own work without Kafka: ``Engine.process`` and ``commit_batch`` per record.

    The records go through a real :class:`streams.engine.Engine` and a DuckDB file in a
    temporary directory, in batches as the agent would hand them over; the first
    ``warmup`` records are not timed.
    """
    from prometheus_client import CollectorRegistry

    from baselines.store import BaselineStore
    from drift.model import DriftConfig
    from streams.engine import Engine, Record
    from streams.metrics import build_metrics

    offsets = dict.fromkeys(range(partitions), 0)
    now = time.time()
    recs = []
    for key, value, _ in records:
        part = partition_of(key, partitions)
        recs.append(Record(part, offsets[part], key, value, int(now * 1000)))
        offsets[part] += 1
    rows = []
    for size in batch_sizes:
        with tempfile.TemporaryDirectory(prefix="continuity-split-") as tmp:
            store = BaselineStore(Path(tmp) / "continuity.duckdb")
            engine = Engine(store, DriftConfig(), build_metrics(CollectorRegistry()))
            engine.assign(range(partitions))
            spent = [0.0, 0.0]
            timed = 0
            try:
                for i in range(0, len(recs), size):
                    batch = recs[i:i + size]
                    t0 = time.perf_counter()
                    engine.process(batch)
                    t1 = time.perf_counter()
                    store.commit_batch(engine.take_checkpoint())
                    t2 = time.perf_counter()
                    if i >= warmup:
                        spent[0] += t1 - t0
                        spent[1] += t2 - t1
                        timed += len(batch)
            finally:
                store.close()
        rows.append({"batch": size, "records": timed,
                     "process_us": 1e6 * spent[0] / max(timed, 1),
                     "commit_us": 1e6 * spent[1] / max(timed, 1),
                     "commit_ms_per_batch": 1e3 * spent[1] / max(timed / size, 1)})
    return rows


# --------------------------------------------------------------------------- profile


def summarize_profile(path: Path, top: int = 25) -> dict[str, Any]:
    """Inclusive and self share of samples per function from py-spy's raw output."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1]
                  if " (" in f else f for f in stack.split(";")]
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    return {"samples": total,
            "inclusive": [(f, n / total) for f, n in inclusive.most_common(top)] if total else [],
            "self": [(f, n / total) for f, n in own.most_common(top)] if total else []}


# --------------------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = math.nan
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 2**20
    except OSError:
        pass
    import aiokafka
    import duckdb
    import faust
    return {"nproc": os.cpu_count(), "cpu_model": model, "mem_gb": round(mem, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "faust": faust.__version__, "aiokafka": aiokafka.__version__,
            "duckdb": duckdb.__version__}


def fmt(x: Any, spec: str = ".0f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def fmt_ms(seconds: float, hist: dict[str, Any] | None = None) -> str:
    """Milliseconds; a histogram quantile past the last finite bucket prints as '> bound'."""
    if isinstance(seconds, float) and math.isinf(seconds) and hist is not None:
        finite = [le for le, _ in hist["buckets"] if le != "+Inf"]
        return f"> {1e3 * max(finite):.0f}"
    return fmt(1e3 * seconds)


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _report_throughput(res: dict[str, Any]) -> list[str]:
    a, b, w = res.get("aiokafka"), res.get("faust_bare"), res.get("worker")
    if not (a or b or w):
        return []
    lines = ["", "| throughput (same broker, same events) | records/s | seconds | CPU us/record |",
             "|---|---:|---:|---:|"]

    def cpu_per(run: dict[str, Any], key: str = "cpu_s") -> str:
        done = run.get("cpu_records", run["records"] - run.get("first_batch", 0))
        return fmt(1e6 * run[key] / done, ".0f") if run.get(key) is not None and done else "-"

    if a:
        lines.append(f"| (a) aiokafka consumer + decode_event | {fmt(a['rate'])} | "
                     f"{fmt(a['seconds'], '.1f')} | {cpu_per(a)} |")
    if b:
        lines.append(f"| (b) bare faust agent, take_events + decode_event | {fmt(b['rate'])} | "
                     f"{fmt(b['seconds'], '.1f')} | {cpu_per(b)} |")
    if w:
        lines.append(f"| (c) worker (continuity-drift run) | {fmt(w['rate'])} | "
                     f"{fmt(w['seconds'], '.1f')} | {cpu_per(w, 'worker_cpu_s')} |")
    lines.append("")
    if a and w:
        ratio = w["rate"] / a["rate"]
        lines.append(f"c/a = {100 * ratio:.0f}% (worker / aiokafka consumer); SPEC goal c/a >= "
                     f"{100 * THROUGHPUT_GOAL:.0f}%: {_verdict(ratio >= THROUGHPUT_GOAL)}")
    if b and w:
        lines.append(f"c/b = {100 * w['rate'] / b['rate']:.0f}% (worker / bare faust agent; b is "
                     "the rate a first version on faust reaches, no goal)")
    if w:
        lines.append(f"worker CPU {w['worker_cpu_s']:.1f}s + broker CPU {w['broker_cpu_s']:.1f}s "
                     f"while it read {w['cpu_records']:.0f} records in {w['seconds']:.1f}s; "
                     f"{w['outputs']:.0f} outputs published")
    return lines


def _latency_goal(rate: float) -> float | None:
    return LATENCY_GOALS_S.get(float(rate))


def _report_latency(runs: Sequence[dict[str, Any]], floors: Sequence[dict[str, Any]] = ()
                    ) -> list[str]:
    lines: list[str] = []
    floor_at = {f["rate"]: f for f in floors if "error" not in f}
    for lat in runs:
        if "error" in lat:
            continue
        floor = floor_at.get(lat["rate"])
        h, e, pa_ = lat["histogram"], lat["exact_per_record"], lat["producer_ack"]
        lines.append("")
        lines.append(f"| latency at {lat['rate']:.0f} events/s offered "
                     f"({lat['offered']} records, achieved {lat['achieved_offer_rate']:.0f}/s) "
                     "| n | p50 ms | p95 ms | p99 ms | max ms | <= 250 ms | <= 500 ms |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        lines.append(f"| worker histogram (interpolated in buckets) | {h['count']:.0f} | "
                     f"{fmt_ms(h['p50'], h)} | {fmt_ms(h['p95'], h)} | {fmt_ms(h['p99'], h)} | "
                     f"| {fmt(100 * h['share_le_250ms'], '.1f')}% | "
                     f"{fmt(100 * h['share_le_500ms'], '.1f')}% |")
        lines.append(f"| exact: first output ts - source record ts | {e['n']} | "
                     f"{fmt(1e3 * e['p50'])} | {fmt(1e3 * e['p95'])} | {fmt(1e3 * e['p99'])} | "
                     f"{fmt(1e3 * e['max'])} | {fmt(100 * e['share_le_250ms'], '.1f')}% | "
                     f"{fmt(100 * e['share_le_500ms'], '.1f')}% |")
        lines.append(f"| (offer to broker ack of the input batch) | {pa_['n']} | "
                     f"{fmt(1e3 * pa_['p50'])} | {fmt(1e3 * pa_['p95'])} | "
                     f"{fmt(1e3 * pa_['p99'])} | | | |")
        if floor is not None:
            q = floor["latency_ms"]
            lines.append(f"| floor: plain consumer + decode, same offer just before "
                         f"(record ts to getmany) | {floor['received']} | {fmt(q['p50'])} | "
                         f"| {fmt(q['p99'])} | {fmt(q['max'])} | | |")
        lines.append("")
        lines.append(f"worker CPU {100 * lat['worker_cpu_share']:.0f}% and broker CPU "
                     f"{100 * lat['broker_cpu_share']:.0f}% of one core; at most "
                     f"{lat['max_behind']:.0f} records behind the offer; "
                     f"{lat['exact_per_output']['n']} outputs matched to their source record")
    if runs:
        lines.append("")
        lines.append("latency, input record's Kafka timestamp to its first output's publish "
                     "(exact, records with an output):")
    for lat in runs:
        if "error" in lat:
            lines.append(f"  {lat['rate']:>6.0f}/s: failed: {lat['error']}")
            continue
        e = lat["exact_per_record"]
        goal = _latency_goal(lat["rate"])
        verdict = ("no SPEC goal at this rate" if goal is None else
                   f"goal p99 < {1e3 * goal:.0f} ms: {_verdict(e['p99'] < goal)}")
        floor = floor_at.get(lat["rate"])
        beside = ("" if floor is None else
                  f" (the broker's floor in this run: p99 {fmt(floor['latency_ms']['p99'])} ms, "
                  f"max {fmt(floor['latency_ms']['max'])} ms)")
        lines.append(f"  {lat['rate']:>6.0f}/s: p50 {fmt(1e3 * e['p50'])} ms, p99 "
                     f"{fmt(1e3 * e['p99'])} ms, max {fmt(1e3 * e['max'])} ms; {verdict}{beside}")
    for floor in floors:
        if "error" in floor:
            lines.append(f"  floor at {floor['rate']:.0f}/s: failed: {floor['error']}")
    return lines


def _report_memory(mem: dict[str, Any]) -> list[str]:
    lines = ["", (f"| memory run ({mem['events']} events, {fmt(mem['rate'])} records/s) "
                  "| events | RSS MB | DuckDB file MB |"), "|---|---:|---:|---:|"]
    pts = mem["samples"]
    step = max(1, len(pts) // 10)
    for p in pts[::step] + ([pts[-1]] if (len(pts) - 1) % step else []):
        lines.append(f"| t = {p['t']:.0f}s | {p['events']:.0f} | {p['rss_mb']:.1f} | "
                     f"{p.get('db_mb', math.nan):.1f} |")
    lines.append("")
    half = mem["slope_second_half_mb_per_100k"]
    lines.append(f"RSS slope: {mem['slope_last_third_mb_per_100k']:+.2f} MB per 100k events "
                 f"over the last third, {half:+.2f} over the second half (goal < "
                 f"{RSS_SLOPE_GOAL_MB:g}: {_verdict(half < RSS_SLOPE_GOAL_MB)}), "
                 f"{mem['slope_whole_run_mb_per_100k']:+.2f} over the whole run; max "
                 f"{mem['rss_max_mb']:.1f} MB; DuckDB file {mem['duckdb_file_mb']:.1f} MB "
                 f"(+ WAL {mem['duckdb_wal_mb']:.1f} MB)")
    st = mem.get("store") or {}
    if st:
        lines.append(f"store after the run: {st['user_state_rows']} user_state rows "
                     f"(state blob mean {fmt(st['state_bytes_mean'])} B, max "
                     f"{st['state_bytes_max']} B), {st['baseline_versions_rows']} baseline "
                     f"versions, {st['session_summaries_rows']} session summaries (up to "
                     f"{st['max_sessions_per_user']} per user)")
    return lines


def _report_commits(res: dict[str, Any]) -> list[str]:
    runs: list[tuple[str, dict[str, Any]]] = []
    if res.get("worker"):
        runs.append(("throughput worker", res["worker"]))
    runs += [(f"latency worker, {lat['rate']:.0f}/s", lat) for lat in res.get("latency", [])
             if "error" not in lat]
    if res.get("memory"):
        runs.append(("memory worker", res["memory"]))
    lines: list[str] = []
    for label, run in runs:
        cs, cr, bs = run["checkpoint_seconds"], run["checkpoint_records"], run["batch_size"]
        lines.append("")
        if cr["count"]:
            lines.append(f"checkpoints ({label}): {cr['count']:.0f} checkpoints for "
                         f"{cr['sum']:.0f} records, mean {fmt(cr['mean'])} records per "
                         f"checkpoint ({run['checkpoints_le_1_record']:.0f} of them with at "
                         f"most 1 record); p50 {fmt_ms(cs['p50'], cs)} ms, p95 "
                         f"{fmt_ms(cs['p95'], cs)} ms, mean {fmt_ms(cs['mean'])} ms per "
                         "checkpoint (DuckDB transaction + group commit)")
        else:
            lines.append(f"checkpoints ({label}): no continuity_checkpoint_records samples")
        lines.append(f"consumer batches ({label}): {bs['count']:.0f} batches for "
                     f"{bs['sum']:.0f} records, mean {fmt(bs['mean'], '.1f')} records per "
                     f"batch, p50 {fmt(bs['p50'], '.0f')}, p95 {fmt(bs['p95'], '.0f')}")
    if runs:
        lines.append("(checkpoint and batch quantiles interpolated in the histograms' buckets)")
    return lines


def _report_state(sp: dict[str, Any] | None, sb: list[dict[str, Any]] | None) -> list[str]:
    lines: list[str] = []
    if sp:
        lines += ["", (f"| per-user state: users (replicas of {sp['templates']} simulated users"
                       ") | encoded state mean / max B | encoded baselines mean / max B "
                       "| resident state B/user | resident baselines B/user |"),
                  "|---|---:|---:|---:|---:|"]
        for r in sp["rows"]:
            lines.append(f"| {r['users']} | {r['state_encoded_mean']:.0f} / "
                         f"{r['state_encoded_max']} | {r['baselines_encoded_mean']:.0f} / "
                         f"{r['baselines_encoded_max']} | {r['state_resident']:.0f} | "
                         f"{r['baselines_resident']:.0f} |")
        lines.append("")
        lines.append(f"simulated users: every scenario, {sp['sessions']} sessions (sustained_low "
                     f"more), {sp['open_sessions']} of {sp['templates']} stopped mid-session "
                     f"(encoded state mean {fmt(sp['state_encoded_open_mean'])} B open, "
                     f"{fmt(sp['state_encoded_idle_mean'])} B idle); dedupe ring mean "
                     f"{sp['ring_ids_mean']:.0f} of {sp['recent_event_ids']} ids, full for "
                     f"{sp['ring_full']} users")
        last = sp["rows"][-1]
        both = last["state_resident"] + last["baselines_resident"]
        lines.append(f"goal: at most {STATE_ENCODED_GOAL_B // 1024} KB encoded and "
                     f"{STATE_RESIDENT_GOAL_B // 1024} KB resident per user. Encoded state max "
                     f"{last['state_encoded_max']} B: "
                     f"{_verdict(last['state_encoded_max'] <= STATE_ENCODED_GOAL_B)}; resident at "
                     f"{last['users']} users: state {last['state_resident']:.0f} B "
                     f"({_verdict(last['state_resident'] <= STATE_RESIDENT_GOAL_B)}), state + "
                     f"baselines {both:.0f} B ({_verdict(both <= STATE_RESIDENT_GOAL_B)})")
        d = sp["deepcopy"]
        lines.append(f"(replicated with copy.deepcopy instead, which shares immutable values "
                     f"between copies: state {d['state_resident']:.0f} B + baselines "
                     f"{d['baselines_resident']:.0f} B per user at {d['users']} copies)")
    if sb:
        lines.append("")
        sessions = sorted({r["sessions"] for r in sb if r["scenario"] == "stable"})
        lines.append("| encoded UserState bytes at the end (peak within the last sessions; "
                     "encoded current baselines) after n sessions | "
                     + " | ".join(f"n={n}" for n in sessions) + " |")
        lines.append("|---|" + "---:|" * len(sessions))
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in sb:
            by[r["scenario"]].append(r)
        for scen, rows in by.items():
            cells = [f"{r['state_bytes']} ({r['state_bytes_peak_recent']}; {r['baseline_bytes']})"
                     for r in rows]
            lines.append(f"| {scen} | " + " | ".join(cells) + " |")
    return lines


def _report_extras(res: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    split = res.get("engine_split")
    if split:
        lines.append("")
        lines.append("| in-process split (no Kafka), batch size | records "
                     "| Engine.process us/record | commit_batch us/record | commit ms/batch |")
        lines.append("|---|---:|---:|---:|---:|")
        for r in split:
            lines.append(f"| {r['batch']} | {r['records']} | {r['process_us']:.0f} | "
                         f"{r['commit_us']:.0f} | {r['commit_ms_per_batch']:.1f} |")
    prof = res.get("profile")
    if prof and prof.get("samples"):
        lines.append("")
        lines.append(f"py-spy, throughput worker ({prof['samples']} samples), inclusive share:")
        for f, share in prof["inclusive"][:20]:
            lines.append(f"  {100 * share:5.1f}%  {f}")
        lines.append("self share:")
        for f, share in prof["self"][:15]:
            lines.append(f"  {100 * share:5.1f}%  {f}")
    return lines


def report(res: dict[str, Any]) -> str:
    m = res["machine"]
    s = res["stream"]
    lines = [(f"machine: {m['nproc']} CPUs, {m['cpu_model']}, {m['mem_gb']} GB; "
              f"Python {m['python']}, faust {m['faust']}, aiokafka {m['aiokafka']}, "
              f"duckdb {m['duckdb']}"),
             (f"events: {s['records']} pre-produced records of {s['users']} simulated users "
              f"(all scenarios, ~{s['sessions_per_user']} sessions each), "
              f"{s['partitions']} partitions, produced at {s['produce_rate']:.0f}/s")]
    lines += _report_throughput(res)
    lines += _report_latency(res.get("latency") or [], res.get("latency_floor") or [])
    if res.get("memory"):
        lines += _report_memory(res["memory"])
    lines += _report_commits(res)
    lines += _report_state(res.get("state_per_user"), res.get("state_size"))
    lines += _report_extras(res)
    lines.append("")
    lines.append(f"reproduce: {res['command']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _finite(obj: Any) -> Any:
    """NaN and infinities as null, so that the JSON file is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _rates(text: str) -> tuple[float, ...]:
    """``--rate``: comma-separated positive events/s."""
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected rates like 1000,5000: {text!r}") from exc
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive rates: {text!r}")
    return rates


def _counts(text: str) -> tuple[int, ...]:
    """``--state-users``: comma-separated positive user counts."""
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected counts like 10000,100000: {text!r}") from exc
    if not counts or min(counts) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive counts: {text!r}")
    return counts


def _csv(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Throughput, latency at several rates, memory, checkpoints and per-user "
                    "state size of one worker, against a plain aiokafka consumer and a bare "
                    "faust agent (SPEC section 11).")
    parser.add_argument("--events", type=int, help="records pre-produced for the throughput "
                        "comparison (default 200000; quick 30000)")
    parser.add_argument("--users", type=int, help="simulated users (default 1200; quick 240)")
    parser.add_argument("--rate", type=_rates, help="comma-separated events/s, one paced "
                        "latency phase each (default 1000,5000,10000)")
    parser.add_argument("--duration", type=float, help="seconds of paced offer in each latency "
                        "phase (default 60; quick 15)")
    parser.add_argument("--memory-events", type=int, help="records the memory run reads "
                        "(default 1000000; quick 100000)")
    parser.add_argument("--state-users", type=_counts, help="comma-separated numbers of users "
                        "the per-user state is measured at (default 10000,100000; quick "
                        "2000,10000)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--quick", action="store_true", help="smoke run, about 5 minutes")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["baselines", "worker", "latency", "floor", "memory",
                                 "state"],
                        help="leave out a phase (repeatable)")
    parser.add_argument("--split", action="store_true",
                        help="also time Engine.process and commit_batch in-process (no Kafka) "
                             "on the same records, in batches of 500 and 2000")
    parser.add_argument("--profile", type=Path, default=None,
                        help="record py-spy stacks of the throughput worker into this dir")
    parser.add_argument("--worker-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="extra worker config, TOML value syntax: batch_max=2000 goes to "
                             "[worker], drift.recent_event_ids=128 to [drift] (repeatable)")
    parser.add_argument("--worker-cmd", default=None,
                        help="command that starts a worker instead of continuity-drift, e.g. "
                             "to compare a modified build (its 'run' arguments are appended)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep worker data, logs and generated scripts here (default: a "
                             "temporary directory, removed at the end)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)

    preset = QUICK if args.quick else DEFAULTS
    n = int(args.events or preset["events"])
    users = int(args.users or preset["users"])
    rates: tuple[float, ...] = args.rate or preset["rates"]
    duration = float(args.duration or preset["duration"])
    mem_events = int(args.memory_events or preset["memory_events"])
    state_users: tuple[int, ...] = args.state_users or preset["state_users"]
    # one slice of the records per latency phase, after the throughput records (each rate's
    # floor gets the same slice, offered the same way, on a topic of its own just before)
    paced = [int(r * duration) for r in rates] if "latency" not in args.skip else []
    floors = bool(paced) and "floor" not in args.skip
    total = max(n + sum(paced), mem_events if "memory" not in args.skip else 0)

    command = "python bench/throughput.py" + (" --quick" if args.quick else "")
    for flag, value, default in (("--events", n, preset["events"]),
                                 ("--users", users, preset["users"]),
                                 ("--rate", _csv(rates), _csv(preset["rates"])),
                                 ("--duration", duration, preset["duration"]),
                                 ("--memory-events", mem_events, preset["memory_events"]),
                                 ("--state-users", _csv(state_users),
                                  _csv(preset["state_users"])),
                                 ("--partitions", args.partitions, PARTITIONS),
                                 ("--seed", args.seed, DEFAULT_SEED)):
        if value != default:
            command += f" {flag} {value:g}" if isinstance(value, float) else f" {flag} {value}"
    for s in args.skip:
        command += f" --skip {s}"
    if args.split:
        command += " --split"
    worker_kv: list[tuple[str, str]] = []
    drift_kv: list[tuple[str, str]] = []
    for item in args.worker_setting:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--worker-setting {item!r}: expected KEY=VALUE")
        if key.startswith("drift."):
            drift_kv.append((key.removeprefix("drift."), value))
        else:
            worker_kv.append((key, value))
        command += f" --worker-setting {shlex.quote(item)}"
    if args.worker_cmd:
        command += f" --worker-cmd {shlex.quote(args.worker_cmd)}"
    spec = WorkerSpec(tuple(shlex.split(args.worker_cmd or "")), tuple(worker_kv),
                      tuple(drift_kv))

    from streams.settings import Settings
    defaults = Settings()
    res: dict[str, Any] = {"command": command, "machine": machine(),
                           "settings": {"batch_max": defaults.batch_max,
                                        "batch_within_s": defaults.batch_within_s,
                                        "checkpoint_interval_s":
                                            defaults.checkpoint_interval_s,
                                        "partitions": args.partitions,
                                        "worker_config": spec.toml("<app id>"),
                                        "worker_cmd": args.worker_cmd}}
    started = time.monotonic()
    log(f"building {total} simulated events for {users} users")
    stream = build_stream(total, users, args.seed)
    log(f"built {len(stream.records)} events in {stream.build_s:.1f}s")

    with tempfile.TemporaryDirectory(prefix="continuity-throughput-") as tmpname:
        tmp = Path(tmpname)
        if args.work_dir is not None:
            tmp = args.work_dir / time.strftime("%Y%m%d-%H%M%S")
            tmp.mkdir(parents=True, exist_ok=True)
        broker = EmbeddedBroker(log_path=tmp / "broker.log")
        broker.start()
        try:
            assert broker._proc is not None
            broker_pid = broker._proc.pid
            topics.create_topics(broker.bootstrap, args.partitions)
            if floors:
                create_topic(broker.bootstrap, FLOOR_TOPIC, args.partitions)
            log(f"broker at {broker.bootstrap}; producing {n} records")
            produce_rate = produce(broker.bootstrap, stream.records[:n], args.partitions)
            res["stream"] = {"records": n, "users": stream.users,
                             "sessions_per_user": stream.sessions_per_user,
                             "partitions": args.partitions, "produce_rate": produce_rate,
                             "total_generated": len(stream.records)}
            timeout = 120 + n / 500.0
            if "baselines" not in args.skip:
                log("(a) aiokafka consumer + decode_event")
                res["aiokafka"] = baseline_aiokafka(broker.bootstrap, n, tmp, timeout)
                log(f"    {res['aiokafka']['rate']:.0f} records/s")
                log("(b) bare faust agent, take_events + decode_event")
                overrides = dict(worker_kv)
                res["faust_bare"] = baseline_faust(
                    broker.bootstrap, n, tmp, timeout,
                    int(overrides.get("batch_max", defaults.batch_max)),
                    float(overrides.get("batch_within_s", defaults.batch_within_s)))
                log(f"    {res['faust_bare']['rate']:.0f} records/s")
            if "worker" not in args.skip:
                log("worker throughput run")
                res["worker"] = phase_worker_throughput(broker.bootstrap, tmp, n, broker_pid,
                                                        timeout, args.profile, spec)
                log(f"    {res['worker']['rate']:.0f} records/s")
                if args.profile is not None:
                    res["profile"] = summarize_profile(args.profile / "worker-throughput.txt")
            if "latency" not in args.skip:
                res["latency"], res["latency_floor"] = [], []
                begin = n
                for rate, count in zip(rates, paced, strict=True):
                    if floors:
                        log(f"floor run: a plain consumer, the same {count} records offered "
                            f"at {rate:.0f}/s to {FLOOR_TOPIC}")
                        res["latency_floor"].append(phase_floor(
                            broker.bootstrap, tmp, stream.records[begin:begin + count],
                            offsets_after(stream.records[n:begin], args.partitions), rate,
                            args.partitions, defaults))
                    log(f"latency run: {count} records offered at {rate:.0f}/s")
                    try:
                        lat = phase_latency(
                            broker.bootstrap, tmp, stream.records[begin:begin + count],
                            offsets_after(stream.records[:begin], args.partitions), rate,
                            args.partitions, broker_pid, spec)
                        log(f"    exact p99 {1e3 * lat['exact_per_record']['p99']:.0f} ms")
                    except (RuntimeError, TimeoutError) as exc:  # the other rates still run
                        log(f"    latency run at {rate:.0f}/s failed: {exc}")
                        lat = {"rate": rate, "offered": count, "error": str(exc)}
                    res["latency"].append(lat)
                    begin += count
                if floors:
                    delete_topic(broker.bootstrap, FLOOR_TOPIC)
            if "memory" not in args.skip:
                have = n + sum(paced)
                if total > have:
                    log(f"producing {total - have} more records for the memory run")
                    produce(broker.bootstrap, stream.records[have:total], args.partitions)
                log(f"memory run: one worker reads all {total} records")
                res["memory"] = phase_memory(broker.bootstrap, tmp, total, broker_pid,
                                             interval_s=1.0,
                                             spec=spec)
        finally:
            broker.stop()
    if args.split:
        log("in-process split of the worker's own work")
        res["engine_split"] = engine_split(stream.records[:n], args.partitions, (500, 2000),
                                           warmup=min(20_000, n // 5))
    if "state" not in args.skip:
        log(f"per-user state at {_csv(state_users)} users")
        res["state_per_user"] = per_user_state(args.seed, state_users,
                                               int(preset["state_templates"]))
        log("state size after few and many sessions")
        res["state_size"] = state_size_bound(args.seed, (4, 20, 50, 100, 200) if not args.quick
                                             else (4, 20, 60))
    res["elapsed_s"] = time.monotonic() - started
    text = report(res)
    print(text)
    print(f"(benchmark took {res['elapsed_s']:.0f}s)")
    if args.json:
        args.json.write_text(json.dumps(_finite(res), indent=2, default=str))
        print(f"figures written to {args.json}")
    return 1 if any("error" in lat for lat in res.get("latency", [])) else 0


if __name__ == "__main__":
    sys.exit(main())
