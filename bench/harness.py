"""What the benchmarks share: simulated records, producing and reading them on the embedded
broker, a worker run as a subprocess and its ``/metrics``, process figures, and the
formatting of the reports."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from kafka.partitioner.default import murmur2

from drift.evolve import evolve
from streams import topics
from streams.broker import free_loopback_port

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SEED = 20261201
PARTITIONS = 4
POLL_S = 0.5
CLK_TCK = os.sysconf("SC_CLK_TCK")
N = TypeVar("N", int, float)


def positive_values(text: str, convert: Callable[[str], N], noun: str,
                    example: str) -> tuple[N, ...]:
    """An argparse type's work: comma-separated positive ``noun`` (``convert`` reads each);
    ``example`` shows the form in the error.

    >>> positive_values("1000, 5000", float, "rates", "1000,5000")
    (1000.0, 5000.0)
    """
    try:
        values = tuple(convert(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected {noun} like {example}: {text!r}") from exc
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive {noun}: {text!r}")
    return values


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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
                e2 = evolve(e, ts_s=e.ts_s + shift)
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


#: The paced producer's linger. The embedded broker's fetch slows as a partition's count of
#: record batches grows: hand-made batches every 4 ms (and per-record sends without a
#: linger) made a plain consumer's p99 climb over one 15 s offer, 17 -> 382 ms at 5,000/s;
#: with a 10 ms linger it stays at 25-45 ms at 5,000/s and 10,000/s
#: (``python bench/broker_latency.py --rate 5000,10000``).
PACED_LINGER_MS = 10


async def produce_async(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
                   partitions: int, rate: float = 0.0,
                   acks: list[float] | None = None, topic: str = topics.INPUT
                   ) -> tuple[int, float]:
    """Send records to ``topic``; paced at ``rate``/s when ``rate`` > 0, else as fast as the
    broker takes them (in per-partition batches of up to 5,000 records a round).

    A paced offer is steady: each record is handed to the producer when it is due (every
    ``1/rate`` s, checked each millisecond), stamped with the wall-clock time it is offered
    as its Kafka timestamp, and the producer batches it with what else arrives within
    :data:`PACED_LINGER_MS`, as an upstream service's producer does (so the linger counts
    in every latency measured from that timestamp). ``acks`` collects, per record, seconds
    from offer to broker acknowledgement.
    """
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                linger_ms=PACED_LINGER_MS if rate > 0 else 0,
                                max_batch_size=1 << 20, max_request_size=8 << 20,
                                client_id="bench-throughput")
    await producer.start()
    started = time.monotonic()
    try:
        if rate > 0:
            sent = await _offer_steadily(producer, records, partitions, rate, acks, topic,
                                         started)
        else:
            sent = await _produce_batches(producer, records, partitions, topic)
    finally:
        await producer.stop()
    return sent, time.monotonic() - started


async def _offer_steadily(producer: Any, records: Sequence[tuple[bytes, bytes, str]],
                          partitions: int, rate: float, acks: list[float] | None, topic: str,
                          started: float) -> int:
    futures: list[asyncio.Future[Any]] = []
    total = len(records)
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        if due <= sent:
            await asyncio.sleep(0.001)
            continue
        for key, value, _ in records[sent:due]:
            offered = time.time()
            fut = await producer.send(topic, value=value, key=key,
                                      partition=partition_of(key, partitions),
                                      timestamp_ms=int(offered * 1000))
            if acks is not None:
                fut.add_done_callback(lambda _f, t=offered: acks.append(time.time() - t))
            futures.append(fut)
        sent = due
    await asyncio.wait_for(asyncio.gather(*futures), timeout=120)
    return sent


async def _produce_batches(producer: Any, records: Sequence[tuple[bytes, bytes, str]],
                           partitions: int, topic: str) -> int:
    futures: list[asyncio.Future[Any]] = []
    total = len(records)
    sent = 0
    while sent < total:
        due = min(total, sent + 5000)
        batches: dict[int, Any] = {}
        for key, value, _ in records[sent:due]:
            part = partition_of(key, partitions)
            batch = batches.get(part)
            if batch is None:
                batch = batches[part] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batch, topic, partition=part))
                batch = batches[part] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        for part, batch in batches.items():
            futures.append(await producer.send_batch(batch, topic, partition=part))
        sent = due
        if len(futures) > 200:
            await asyncio.gather(*futures)
            futures.clear()
    await asyncio.wait_for(asyncio.gather(*futures), timeout=120)
    return sent


def produce(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
            partitions: int) -> float:
    sent, elapsed = asyncio.run(produce_async(bootstrap, records, partitions))
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


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_cpu_s() -> tuple[float, float]:
    """The machine's busy and idle CPU seconds since boot, summed over its CPUs
    (``/proc/stat``; zeros where it cannot be read)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / CLK_TCK, idle / CLK_TCK


def child_pids(pid: int) -> list[int]:
    """The process's children (none once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        return []


def free_loopback_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (``run --workers N`` serves
    worker ``i`` on the given port + ``i``)."""
    for _ in range(100):
        first = free_loopback_port()
        if all(_port_free(first + i) for i in range(1, n)):
            return first
    raise RuntimeError(f"no {n} consecutive free loopback ports")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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


def git_commit() -> str:
    """Short commit of the working tree, with a note when it has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True,
                               check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if dirty:
        files = ", ".join(line[3:] for line in dirty[:6]) + (", ..." if len(dirty) > 6 else "")
        return f"{head} + uncommitted changes to {len(dirty)} tracked file(s) ({files})"
    return head


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    return env


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
    workers: int = 1
    """Processes: more than one runs ``run --workers N`` (a supervisor and N workers of
    one group, on the N ports from :attr:`port` on)."""
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

    @property
    def ports(self) -> range:
        """The HTTP port of each worker process."""
        return range(self.port, self.port + self.workers)

    def start(self) -> WorkerRun:
        self.port = free_loopback_ports(self.workers)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.base / f"{self.name}.toml"
        config.write_text(self.spec.toml(self.app_id))
        cmd = self.spec.command()
        self.argv = ["run", "--broker", self.bootstrap, "--data-dir", str(self.data_dir),
                     "--web-port", str(self.port), "--config", str(config)]
        if self.workers > 1:
            self.argv += ["--workers", str(self.workers)]
        self._log = open(self.base / f"{self.name}.log", "wb")  # noqa: SIM115
        # PYTHONSAFEPATH: `python -m` must not put the working directory (this tree) before
        # PYTHONPATH, so that a --worker-cmd of "env PYTHONPATH=<checkout> python -m
        # streams.cli" runs that checkout (without it, it silently ran this tree).
        env = {**clean_env(), "PYTHONSAFEPATH": "1"}
        self.proc = subprocess.Popen(cmd + self.argv, cwd=ROOT, env=env,
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
        """The first worker's metrics (:meth:`processed` adds up every worker's count)."""
        return scrape(self.metrics_url)

    def processed(self) -> float:
        return sum(self.processed_each())

    def processed_each(self) -> list[float]:
        """Each worker's count of records processed, in the order of their ports."""
        counts = []
        for port in self.ports:
            s = scrape(f"http://127.0.0.1:{port}/metrics")
            counts.append(metric_sum(s, "continuity_events_total") + metric_sum(
                s, "continuity_rejections_total"))
        return counts

    def cpu_s(self) -> float:
        """CPU seconds of the process and its children (the workers under a supervisor)."""
        return sum(proc_cpu_s(pid) for pid in (self.pid, *child_pids(self.pid)))

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until every worker's ``/readyz`` answers 200."""
        started = time.monotonic()
        deadline = started + timeout_s
        waiting = list(self.ports)
        while time.monotonic() < deadline:
            self.check()
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{waiting[0]}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        waiting.pop(0)
                        if not waiting:
                            return time.monotonic() - started
                        continue
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"worker {self.name} not ready within {timeout_s:.0f}s")

    def wait_processed(self, target: float, timeout_s: float,
                       on_sample: Callable[[float, float], None] | None = None,
                       interval_s: float = POLL_S) -> list[tuple[float, float]]:
        """Poll /metrics until ``target`` records are counted; returns (time, count). Each
        worker's own counts are kept in :attr:`each` (time, counts)."""
        seen: list[tuple[float, float]] = []
        self.each: list[tuple[float, list[float]]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            try:
                counts = self.processed_each()
            except OSError:
                time.sleep(interval_s)
                continue
            now = time.monotonic()
            count = sum(counts)
            seen.append((now, count))
            self.each.append((now, counts))
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


def rate_all_busy(each: Sequence[tuple[float, Sequence[float]]]) -> dict[str, float]:
    """Records/s of several workers while every one of them still had records: from the first
    sample with a record counted to the last sample before any worker reached its final
    count (``each`` holds (time, each worker's count) samples to the end of the run), and
    each worker's share of the records.

    >>> r = rate_all_busy([(0.0, [0, 0]), (1.0, [10, 10]), (2.0, [20, 20]), (3.0, [30, 24]),
    ...                    (4.0, [36, 24])])
    >>> r["rate"], r["seconds"], r["shares"]
    (20.0, 1.0, [0.6, 0.4])
    """
    if len(each) < 2:
        return {"rate": math.nan, "seconds": math.nan, "shares": []}
    finals = list(each[-1][1])
    total = sum(finals)
    first = next((k for k, (_, c) in enumerate(each) if sum(c) > 0), None)
    done = next((k for k, (_, c) in enumerate(each)
                 if any(x >= f for x, f in zip(c, finals, strict=True))), len(each) - 1)
    shares = [f / total if total else math.nan for f in finals]
    last = done - 1
    if first is None or last <= first:
        return {"rate": math.nan, "seconds": math.nan, "shares": shares}
    (t0, c0), (t1, c1) = each[first], each[last]
    return {"rate": (sum(c1) - sum(c0)) / (t1 - t0), "seconds": t1 - t0, "shares": shares}


def percentiles(values: Sequence[float], qs: Iterable[float] = (50, 95, 99, 99.9)
                ) -> dict[str, float]:
    if not values:
        return {f"p{q:g}": math.nan for q in qs}
    arr = np.asarray(values, dtype=float)
    return {f"p{q:g}": float(np.percentile(arr, q)) for q in qs}


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


def pass_fail(ok: bool) -> str:
    return "met" if ok else "NOT met"
