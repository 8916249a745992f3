"""The phases of ``bench/throughput.py`` that run workers against a backlog: one worker's
throughput, the A/B against another tree's worker in alternating rounds, and latency runs
each on a broker of its own."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# Run as a script (python bench/throughput.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import log, rate_all_busy, rate_from_samples
from bench.kafka_io import offsets_after, produce
from bench.latency import (
    phase_latency,
)
from bench.procs import machine_cpu_s, proc_cpu_s, proc_rss_mb, stop_process
from bench.worker_run import WorkerRun, WorkerSpec, commit_histograms, metric_sum
from bench.yardstick import baseline_aiokafka
from streams import topics
from streams.broker import EmbeddedBroker


def phase_worker_throughput(bootstrap: str, base: Path, n: int, broker_pid: int,
                            timeout_s: float, profile_dir: Path | None,
                            spec: WorkerSpec, workers: int = 1, label: str = ""
                            ) -> dict[str, Any]:
    """A fresh group of ``workers`` processes (``run --workers N`` for more than one)
    reads the ``n`` records from the beginning; records/s from the first record counted
    to the last, with the CPU of the workers and the broker over the same window.
    ``label`` names the run's data directory apart from other runs of the same count."""
    name = label + ("worker-throughput" if workers == 1 else f"workers-{workers}-throughput")
    worker = WorkerRun(bootstrap, base, name,
                       f"bench-{name}-{os.getpid()}-{int(time.time())}", spec, workers).start()
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
        # (count, worker CPU s, broker CPU s, the machine's busy and idle CPU s)
        cpu: list[tuple[float, float, float, float, float]] = []

        def sample(now: float, count: float) -> None:
            cpu.append((count, worker.cpu_s(), proc_cpu_s(broker_pid), *machine_cpu_s()))

        t0 = time.monotonic()
        samples = worker.wait_processed(n, timeout_s, on_sample=sample)
        t1 = time.monotonic()
        measured = rate_from_samples(samples, n)
        # CPU over the same window as the rate: first non-zero count to the end
        c0, cpu0, bcpu0, busy0, idle0 = next((c for c in cpu if c[0] > 0), cpu[0])
        c1, cpu1, bcpu1, busy1, idle1 = cpu[-1]
        final = worker.samples()
        outputs = metric_sum(final, "continuity_outputs_total")
        busy = rate_all_busy(worker.each) if workers > 1 else None
        return {"records": n, "workers": workers, **measured, "ready_s": ready_s, "busy": busy,
                "command": worker.command,
                "worker_cpu_s": cpu1 - cpu0, "broker_cpu_s": bcpu1 - bcpu0,
                "machine_busy_s": busy1 - busy0, "machine_idle_s": idle1 - idle0,
                "cpu_records": c1 - c0, "wall_s": t1 - t0, "outputs": outputs,
                **commit_histograms(final), "rss_mb": proc_rss_mb(worker.pid)}
    finally:
        if spy is not None:
            stop_process(spy, signal.SIGINT, timeout_s=30)
        worker.stop()


def _alternating(r: int, spec: WorkerSpec, other: WorkerSpec
                 ) -> tuple[tuple[str, WorkerSpec], ...]:
    """The two trees of an A/B in round ``r``'s order: this one first in even rounds, the
    other first in odd ones, so that a drift of the host's speed falls on both alike."""
    trees = (("this", spec), ("other", other))
    return trees if r % 2 == 0 else trees[::-1]


def phase_ab(bootstrap: str, base: Path, n: int, broker_pid: int, timeout_s: float,
             spec: WorkerSpec, other: WorkerSpec, rounds: int, workers: Sequence[int]
             ) -> list[dict[str, Any]]:
    """This tree's worker and another's (``--against``) on the same records, in ``rounds``
    rounds: each round reads the records with the bare consumer (a), then with one worker
    and with ``run --workers N`` of each tree, the two trees' order alternating from round
    to round, so that a drift of the host's speed falls on both alike."""
    out = []
    for r in range(rounds):
        row: dict[str, Any] = {"round": r + 1,
                               "aiokafka": baseline_aiokafka(bootstrap, n, base, timeout_s)["rate"]}
        for name, s in _alternating(r, spec, other):
            for k in (1, *(w for w in workers if w > 1)):
                run = phase_worker_throughput(bootstrap, base, n, broker_pid, timeout_s, None,
                                              s, k, f"ab{r + 1}-{name}-")
                row[f"{name}_{k}"] = run["rate"]
                row[f"{name}_{k}_cpu_us"] = (1e6 * run["worker_cpu_s"] / run["cpu_records"]
                                             if run["cpu_records"] else math.nan)
        out.append(row)
        log(f"    round {r + 1}: bare read {row['aiokafka']:.0f}, this tree "
            f"{row['this_1']:.0f}, the other {row['other_1']:.0f} records/s")
    return out


















@contextlib.contextmanager
def broker_with(base: Path, label: str, backlog: Sequence[tuple[bytes, bytes, str]],
                 partitions: int) -> Iterator[EmbeddedBroker]:
    """A broker of its own holding ``backlog`` on the input topic. Each latency phase gets
    one: a broker's fetch slows as a partition's count of small batches grows, so phases
    after another's paced offer on one broker were each slower than the one before (six in a
    row at 5,000/s: p99 61 to 195 ms, whichever tree ran)."""
    with EmbeddedBroker(log_path=base / f"broker-{label}.log") as b:
        topics.create_topics(b.bootstrap, partitions)
        produce(b.bootstrap, backlog, partitions)
        yield b


def latency_on_own_broker(base: Path, backlog: Sequence[tuple[bytes, bytes, str]],
                           offer: Sequence[tuple[bytes, bytes, str]], rate: float,
                           partitions: int, spec: WorkerSpec, label: str) -> dict[str, Any]:
    """One latency phase: a broker with ``backlog`` (which the worker reads first, as a
    worker without stored state does), then ``offer`` at ``rate``; a failed one is
    reported as such."""
    with broker_with(base, f"latency-{label}{rate:.0f}", backlog, partitions) as b:
        assert b._proc is not None
        try:
            lat = phase_latency(b.bootstrap, base, offer, offsets_after(backlog, partitions),
                                rate, partitions, b._proc.pid, spec, label)
        except (RuntimeError, TimeoutError) as exc:  # the other phases still run
            log(f"    latency run at {rate:.0f}/s failed: {exc}")
            return {"rate": rate, "offered": len(offer), "error": str(exc)}
        log(f"    exact p99 {1e3 * lat['exact_per_record']['p99']:.0f} ms")
        return lat


def latency_ab(base: Path, backlog: Sequence[tuple[bytes, bytes, str]],
                offer: Sequence[tuple[bytes, bytes, str]], rate: float, partitions: int,
                rounds: int, spec: WorkerSpec, other: WorkerSpec) -> list[dict[str, Any]]:
    """``rounds`` rounds of one latency phase per tree, the trees' order alternating, each
    on a broker of its own with the same ``backlog`` and ``offer``."""
    rows = []
    for r in range(rounds):
        row: dict[str, Any] = {"rate": rate, "round": r + 1}
        for name, tree in _alternating(r, spec, other):
            log(f"latency A/B round {r + 1}, {name} tree: {len(offer)} records offered at "
                f"{rate:.0f}/s")
            row[name] = latency_on_own_broker(base, backlog, offer, rate, partitions, tree,
                                               f"ab{r + 1}-{name}-")
        rows.append(row)
    return rows
