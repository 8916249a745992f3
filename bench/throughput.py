"""Throughput, latency, memory, checkpoints and per-user state size of one worker (SPEC 11).

Everything runs on one embedded broker (Tansu, memory storage, loopback only) in one
invocation, on the same pre-produced simulated events:

1. baselines: (a) a plain aiokafka consumer that decodes every value with
   ``msgspec.json.decode`` and does nothing else, the SPEC's yardstick, and (b) a bare
   faust agent (the same decode, ``stream.take_events``), the rate a first version on
   faust reaches.
   Each runs in its own subprocess, with its own consumer group, from the beginning of
   ``fhr.events``; records/s are measured inside the subprocess from the first batch to
   the last record.
2. (c) the real worker (``continuity-drift run``, fresh data dir and group) on the same
   events: records/s from polling its ``/metrics`` (events + rejections) until it has
   seen them all. Reported as c/a (SPEC goal >= 20%) and c/b. Then, for each count of
   ``--workers`` (default 2), ``run --workers N`` on the same records with a fresh group:
   its rate over one worker's (SPEC goal >= 1.8x for two).
3. latency, once per offered rate (``--rate``, a comma-separated list): a fresh worker,
   whose group starts after every record produced so far, gets its own slice of the
   events offered at that rate for ``--duration`` seconds; p50/p95/p99 from its
   end-to-end histogram (interpolated from buckets) and, exactly, from the broker
   timestamps of its outputs on ``drift.scores`` / ``drift.responses`` /
   ``governance.violations`` against the timestamp of the source record they name
   (``source_event_id`` / ``cause_event_id`` / ``event_id``). Goals: p99 < 100 ms at
   5,000/s, < 250 ms at 10,000/s.
4. memory: another worker reads the whole topic (at least ``--memory-events``, 1M by
   default) while its VmRSS is sampled; reports the samples and the slope.
5. checkpoints and consumer batches of every worker, from its ``/metrics`` at the end of
   its run: ``continuity_checkpoint_seconds`` (one DuckDB transaction + group commit),
   ``continuity_checkpoint_records`` and ``continuity_batch_size`` (records per
   consumer batch).
6. per-user state, in process: simulated users run through the fold to steady state
   (half of them stopped mid-session), replicated to ``--state-users`` users; encoded
   bytes and resident (tracemalloc) bytes per user of the state and the baselines. Goal:
   at most 2 KB encoded and 4 KB resident per user (SPEC 11). Plus the encoded size of one
   user's state after few and after many sessions, per scenario.

Run ``python bench/throughput.py`` (about 15 minutes on two cores), ``--quick`` for a
smoke run (about 5 minutes), ``--json PATH`` to keep the figures, ``--profile DIR`` to
record py-spy stacks of the throughput worker, ``--split`` to time the engine and the
DuckDB transaction in-process on the same records, ``--against CMD`` to compare this tree's
worker with another's (a checkout, started as ``--worker-cmd`` starts it) in alternating
rounds on the same broker and records: the host's speed drifts by 20% between runs, and
only interleaved rounds separate a change from the drift. For example::

    python bench/throughput.py --quick --events 120000 --users 1200 --skip baselines \
        --skip latency --skip memory --skip state --rounds 3 \
        --against "env PYTHONPATH=../before python -m streams.cli"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# Run as a script (python bench/throughput.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (
    DEFAULT_SEED,
    PARTITIONS,
    WorkerRun,
    WorkerSpec,
    build_stream,
    commit_histograms,
    create_topic,
    fmt,
    fmt_ms,
    log,
    machine,
    machine_cpu_s,
    metric_sum,
    offsets_after,
    partition_of,
    pass_fail,
    positive_values,
    proc_cpu_s,
    proc_rss_mb,
    produce,
    rate_all_busy,
    rate_from_samples,
    stop_process,
)
from bench.latency import (
    FLOOR_TOPIC,
    phase_floor,
    phase_latency,
    report_latency,
    report_latency_ab,
)
from bench.memory import phase_memory, report_memory
from bench.state_size import per_user_state, report_state, state_size_bound
from bench.yardstick import baseline_aiokafka, baseline_faust
from streams import topics
from streams.broker import EmbeddedBroker

DEFAULTS: dict[str, Any] = {
    "events": 600_000, "users": 1200, "rates": (1000.0, 5000.0, 10000.0), "duration": 60.0,
    "memory_events": 1_000_000, "state_users": (10_000, 100_000), "state_templates": 240}
QUICK: dict[str, Any] = {
    "events": 30_000, "users": 240, "rates": (1000.0, 5000.0, 10000.0), "duration": 15.0,
    "memory_events": 100_000, "state_users": (2000, 10_000), "state_templates": 120}
THROUGHPUT_GOAL = 0.20  # c/a: worker rate over the plain aiokafka consumer's
SCALING_GOAL = 1.8  # run --workers 2 over one worker, on the same records


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


def report_ab(rows: Sequence[dict[str, Any]], against: str) -> list[str]:
    """The rounds of :func:`phase_ab` as a table, with the medians and this tree's rate over
    the other's in each round."""
    if not rows:
        return []
    ks = sorted({int(key.split("_")[1]) for key in rows[0]
                 if key.startswith("this_") and not key.endswith("_cpu_us")})
    head = ["round", "(a) bare read"]
    for k in ks:
        label = "one worker" if k == 1 else f"--workers {k}"
        head += [f"this, {label}", f"other, {label}"]
    head.append("this / other (one worker)")
    lines = ["", f"A/B against: {against}", "| " + " | ".join(head) + " |",
             "|" + "---:|" * len(head)]

    def cells(get: Any) -> list[str]:
        out = [fmt(get("aiokafka"))]
        for k in ks:
            out += [f"{fmt(get(f'this_{k}'))} ({fmt(get(f'this_{k}_cpu_us'))} us)",
                    f"{fmt(get(f'other_{k}'))} ({fmt(get(f'other_{k}_cpu_us'))} us)"]
        return out

    for row in rows:
        lines.append(f"| {row['round']} | " + " | ".join(cells(row.get)) + " | "
                     f"{row['this_1'] / row['other_1']:.3f} |")
    median = {key: statistics.median([row[key] for row in rows])
              for key in rows[0] if key != "round"}
    ratio = statistics.median([row["this_1"] / row["other_1"] for row in rows])
    lines.append("| median | " + " | ".join(cells(median.get)) + f" | {ratio:.3f} |")
    lines.append("(records/s, and the workers' CPU us per record in brackets)")
    return lines


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
    from streams.engine import Engine
    from streams.metrics import build_metrics
    from streams.records import Record

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
        lines.append(f"| (a) aiokafka consumer + msgspec decode | {fmt(a['rate'])} | "
                     f"{fmt(a['seconds'], '.1f')} | {cpu_per(a)} |")
    if b:
        lines.append(f"| (b) bare faust agent, take_events + msgspec decode | {fmt(b['rate'])} | "
                     f"{fmt(b['seconds'], '.1f')} | {cpu_per(b)} |")
    if w:
        lines.append(f"| (c) worker (continuity-drift run) | {fmt(w['rate'])} | "
                     f"{fmt(w['seconds'], '.1f')} | {cpu_per(w, 'worker_cpu_s')} |")
    lines.append("")
    if a and w:
        ratio = w["rate"] / a["rate"]
        lines.append(f"c/a = {100 * ratio:.0f}% (worker / aiokafka consumer); SPEC goal c/a >= "
                     f"{100 * THROUGHPUT_GOAL:.0f}%: {pass_fail(ratio >= THROUGHPUT_GOAL)}")
    if b and w:
        lines.append(f"c/b = {100 * w['rate'] / b['rate']:.0f}% (worker / bare faust agent; b is "
                     "the rate a first version on faust reaches, no goal)")
    if w:
        lines.append(f"worker CPU {w['worker_cpu_s']:.1f}s + broker CPU {w['broker_cpu_s']:.1f}s "
                     f"while it read {w['cpu_records']:.0f} records in {w['seconds']:.1f}s; "
                     f"{w['outputs']:.0f} outputs published")
        interval = res.get("settings", {}).get("checkpoint_interval_s", 0.0)
        if w["seconds"] < 3 * interval:
            lines.append(f"note: the run lasted {w['seconds']:.1f}s, under three checkpoint "
                         f"intervals ({interval:g}s): its rate leaves out most of what "
                         f"checkpoints cost; about {3 * interval * w['rate']:.0f} records or "
                         "more (--events) checkpoint at least three times")
    for run in res.get("scaling") or []:
        k = run["workers"]
        lines.append(f"(c{k}) run --workers {k}: {fmt(run['rate'])} records/s in "
                     f"{run['seconds']:.1f}s, CPU {cpu_per(run, 'worker_cpu_s')} us/record "
                     f"(every worker) + broker {cpu_per(run, 'broker_cpu_s')} us/record, "
                     f"ready in {run['ready_s']:.1f}s")
        if w:
            ratio = run["rate"] / w["rate"]
            goal = f"; SPEC goal >= {SCALING_GOAL}x: {pass_fail(ratio >= SCALING_GOAL)}" \
                if k == 2 else ""
            lines.append(f"c{k}/c = {ratio:.2f}x one worker{goal}")
            lines += _all_busy(w, run) + _ceiling(w, run)
    return lines


def _all_busy(one: dict[str, Any], many: dict[str, Any]) -> list[str]:
    """The workers' rate while every one still had records: the run's rate also counts its
    end, when the workers whose partitions held fewer records have finished and the others
    go on alone (the keys do not split the records evenly between partitions)."""
    busy = many.get("busy") or {}
    if not busy or math.isnan(busy["rate"]):  # none, or too short a window
        return []
    shares = "/".join(f"{100 * x:.0f}" for x in busy["shares"])
    ratio = busy["rate"] / one["rate"]
    goal = f" (goal {SCALING_GOAL}x: {pass_fail(ratio >= SCALING_GOAL)})" \
        if many["workers"] == 2 else ""
    return [(f"    while all {many['workers']} had records ({busy['seconds']:.1f}s): "
             f"{fmt(busy['rate'])} records/s = {ratio:.2f}x one worker{goal}; "
             f"the workers' shares of the records were {shares}%, so the rest of the run "
             "went at the pace of the ones left")]


def _ceiling(one: dict[str, Any], many: dict[str, Any]) -> list[str]:
    """How far ``many`` workers could go on this machine: its CPUs less what the broker and
    everything else took during their run, over the cores one worker used, at one worker's
    CPU per record. With the broker on the same machine and a worker using more than a
    core (its checkpoint thread), this is the scaling's upper bound."""
    total = many.get("machine_busy_s", 0.0) + many.get("machine_idle_s", 0.0)
    if not total or not one.get("worker_cpu_s") or not many.get("worker_cpu_s"):
        return []
    cpus = os.cpu_count() or 1
    wall = total / cpus  # the window's seconds, as the machine counted them
    share = {k: many[k] / wall for k in ("worker_cpu_s", "broker_cpu_s", "machine_busy_s")}
    rest = share["machine_busy_s"] - share["worker_cpu_s"] - share["broker_cpu_s"]
    one_cores = one["worker_cpu_s"] * one["rate"] / one["cpu_records"]
    bound = (cpus - share["broker_cpu_s"] - max(rest, 0.0)) / one_cores
    return [(f"    the machine was {100 * share['machine_busy_s'] / cpus:.0f}% busy: workers "
             f"{share['worker_cpu_s']:.2f} cores, broker {share['broker_cpu_s']:.2f}, the rest "
             f"{rest:.2f}; one worker alone used {one_cores:.2f} cores, so at its CPU per "
             f"record {many['workers']} workers reach at most {bound:.2f}x here")]


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


@contextlib.contextmanager
def _broker_with(base: Path, label: str, backlog: Sequence[tuple[bytes, bytes, str]],
                 partitions: int) -> Iterator[EmbeddedBroker]:
    """A broker of its own holding ``backlog`` on the input topic. Each latency phase gets
    one: a broker's fetch slows as a partition's count of small batches grows, so phases
    after another's paced offer on one broker were each slower than the one before (six in a
    row at 5,000/s: p99 61 to 195 ms, whichever tree ran)."""
    with EmbeddedBroker(log_path=base / f"broker-{label}.log") as b:
        topics.create_topics(b.bootstrap, partitions)
        produce(b.bootstrap, backlog, partitions)
        yield b


def _latency_on_own_broker(base: Path, backlog: Sequence[tuple[bytes, bytes, str]],
                           offer: Sequence[tuple[bytes, bytes, str]], rate: float,
                           partitions: int, spec: WorkerSpec, label: str) -> dict[str, Any]:
    """One latency phase: a broker with ``backlog`` (which the worker reads first, as a
    worker without stored state does), then ``offer`` at ``rate``; a failed one is
    reported as such."""
    with _broker_with(base, f"latency-{label}{rate:.0f}", backlog, partitions) as b:
        assert b._proc is not None
        try:
            lat = phase_latency(b.bootstrap, base, offer, offsets_after(backlog, partitions),
                                rate, partitions, b._proc.pid, spec, label)
        except (RuntimeError, TimeoutError) as exc:  # the other phases still run
            log(f"    latency run at {rate:.0f}/s failed: {exc}")
            return {"rate": rate, "offered": len(offer), "error": str(exc)}
        log(f"    exact p99 {1e3 * lat['exact_per_record']['p99']:.0f} ms")
        return lat


def _latency_ab(base: Path, backlog: Sequence[tuple[bytes, bytes, str]],
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
            row[name] = _latency_on_own_broker(base, backlog, offer, rate, partitions, tree,
                                               f"ab{r + 1}-{name}-")
        rows.append(row)
    return rows


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
    lines += report_ab(res.get("ab") or [], res.get("against", ""))
    lines += report_latency(res.get("latency") or [], res.get("latency_floor") or [])
    lines += report_latency_ab(res.get("latency_ab") or [], res.get("against", ""),
                               res.get("latency_floor") or [])
    if res.get("memory"):
        lines += report_memory(res["memory"])
    lines += _report_commits(res)
    lines += report_state(res.get("state_per_user"), res.get("state_size"))
    lines += _report_extras(res)
    lines.append("")
    lines.append(f"reproduce: {res['command']}")
    return "\n".join(lines)


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
    return positive_values(text, float, "rates", "1000,5000")


def _counts(text: str) -> tuple[int, ...]:
    """``--state-users``: comma-separated positive user counts."""
    return positive_values(text, int, "counts", "10000,100000")


def _csv(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Throughput, latency at several rates, memory, checkpoints and per-user "
                    "state size of one worker, against a plain aiokafka consumer and a bare "
                    "faust agent (SPEC section 11).")
    parser.add_argument("--events", type=int, help="records pre-produced for the throughput "
                        "comparison (default 600000: several checkpoint intervals; quick 30000)")
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
    parser.add_argument("--workers", type=_counts, default=(2,),
                        help="comma-separated process counts, each run as `run --workers N` "
                             "on the same records after the one worker (default 2)")
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
                             "another checkout: \"env PYTHONPATH=../before python -m "
                             "streams.cli\" (its 'run' arguments are appended)")
    parser.add_argument("--against", default=None, metavar="CMD",
                        help="A/B: also run the throughput and latency phases with the worker "
                             "this command starts (as --worker-cmd), in alternating rounds on "
                             "the same records (latency: each run on a broker of its own); "
                             "e.g. \"env PYTHONPATH=../before python -m streams.cli\"")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the --against comparison (default 3)")
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
    # floor gets the same slice, offered the same way; each phase on a broker of its own)
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
    if args.workers != (2,):
        command += f" --workers {_csv(args.workers)}"
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
    if args.against:
        command += f" --against {shlex.quote(args.against)} --rounds {args.rounds}"
    spec = WorkerSpec(tuple(shlex.split(args.worker_cmd or "")), tuple(worker_kv),
                      tuple(drift_kv))

    from streams.settings import Settings
    defaults, overrides = Settings(), dict(worker_kv)
    # The settings the workers run with (the defaults, or what --worker-setting gave).
    batch_max = int(overrides.get("batch_max", defaults.batch_max))
    batch_within_s = float(overrides.get("batch_within_s", defaults.batch_within_s))
    res: dict[str, Any] = {"command": command, "machine": machine(),
                           "settings": {"batch_max": batch_max,
                                        "batch_within_s": batch_within_s,
                                        "checkpoint_interval_s": float(overrides.get(
                                            "checkpoint_interval_s",
                                            defaults.checkpoint_interval_s)),
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
            log(f"broker at {broker.bootstrap}; producing {n} records")
            produce_rate = produce(broker.bootstrap, stream.records[:n], args.partitions)
            res["stream"] = {"records": n, "users": stream.users,
                             "sessions_per_user": stream.sessions_per_user,
                             "partitions": args.partitions, "produce_rate": produce_rate,
                             "total_generated": len(stream.records)}
            timeout = 120 + n / 500.0
            if "baselines" not in args.skip:
                log("(a) aiokafka consumer + msgspec decode")
                res["aiokafka"] = baseline_aiokafka(broker.bootstrap, n, tmp, timeout)
                log(f"    {res['aiokafka']['rate']:.0f} records/s")
                log("(b) bare faust agent, take_events + msgspec decode")
                res["faust_bare"] = baseline_faust(broker.bootstrap, n, tmp, timeout,
                                                   batch_max, batch_within_s)
                log(f"    {res['faust_bare']['rate']:.0f} records/s")
            other = WorkerSpec(tuple(shlex.split(args.against or "")), tuple(worker_kv),
                               tuple(drift_kv))
            if args.against:
                res["against"] = args.against
            if "worker" not in args.skip and args.against:
                log(f"A/B: this tree against {args.against}, {args.rounds} rounds")
                res["ab"] = phase_ab(broker.bootstrap, tmp, n, broker_pid, timeout, spec,
                                     other, args.rounds, args.workers)
            elif "worker" not in args.skip:
                log("worker throughput run")
                res["worker"] = phase_worker_throughput(broker.bootstrap, tmp, n, broker_pid,
                                                        timeout, args.profile, spec)
                log(f"    {res['worker']['rate']:.0f} records/s")
                if args.profile is not None:
                    res["profile"] = summarize_profile(args.profile / "worker-throughput.txt")
                res["scaling"] = []
                for k in (k for k in args.workers if k > 1):
                    log(f"run --workers {k}, the same records")
                    res["scaling"].append(phase_worker_throughput(
                        broker.bootstrap, tmp, n, broker_pid, timeout, None, spec, k))
                    log(f"    {res['scaling'][-1]['rate']:.0f} records/s")
            if "latency" not in args.skip:
                res["latency"], res["latency_floor"] = [], []
                begin = n
                for rate, count in zip(rates, paced, strict=True):
                    offer, begin = stream.records[begin:begin + count], begin + count
                    if floors:
                        log(f"floor run: a plain consumer, the same {count} records offered "
                            f"at {rate:.0f}/s to {FLOOR_TOPIC}, on a broker of its own")
                        with _broker_with(tmp, f"floor-{rate:.0f}", stream.records[:n],
                                          args.partitions) as b:
                            create_topic(b.bootstrap, FLOOR_TOPIC, args.partitions)
                            res["latency_floor"].append(phase_floor(
                                b.bootstrap, tmp, offer, offsets_after([], args.partitions),
                                rate, args.partitions, defaults))
                    if args.against:
                        res.setdefault("latency_ab", []).extend(_latency_ab(
                            tmp, stream.records[:n], offer, rate, args.partitions,
                            args.rounds, spec, other))
                        continue
                    log(f"latency run: {count} records offered at {rate:.0f}/s, on a broker "
                        "of its own")
                    res["latency"].append(_latency_on_own_broker(
                        tmp, stream.records[:n], offer, rate, args.partitions, spec, ""))
            if "memory" not in args.skip:
                have = n  # the latency phases ran on brokers of their own
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
