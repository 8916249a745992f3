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
import json
import math
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Run as a script (python bench/throughput.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.engine_split import by_batch_size
from bench.harness import DEFAULT_SEED, PARTITIONS, build_stream, log, machine, positive_values
from bench.kafka_io import create_topic, offsets_after, produce
from bench.latency import (
    FLOOR_TOPIC,
    phase_floor,
)
from bench.memory import phase_memory
from bench.state_size import per_user_state, state_size_bound
from bench.throughput_phases import (
    broker_with,
    latency_ab,
    latency_on_own_broker,
    phase_ab,
    phase_worker_throughput,
)
from bench.throughput_report import report, summarize_profile
from bench.worker_run import WorkerSpec
from bench.yardstick import baseline_aiokafka, baseline_faust
from streams import topics
from streams.broker import EmbeddedBroker

DEFAULTS: dict[str, Any] = {
    "events": 600_000, "users": 1200, "rates": (1000.0, 5000.0, 10000.0), "duration": 60.0,
    "memory_events": 1_000_000, "state_users": (10_000, 100_000), "state_templates": 240}
QUICK: dict[str, Any] = {
    "events": 30_000, "users": 240, "rates": (1000.0, 5000.0, 10000.0), "duration": 15.0,
    "memory_events": 100_000, "state_users": (2000, 10_000), "state_templates": 120}


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
                        with broker_with(tmp, f"floor-{rate:.0f}", stream.records[:n],
                                          args.partitions) as b:
                            create_topic(b.bootstrap, FLOOR_TOPIC, args.partitions)
                            res["latency_floor"].append(phase_floor(
                                b.bootstrap, tmp, offer, offsets_after([], args.partitions),
                                rate, args.partitions, defaults))
                    if args.against:
                        res.setdefault("latency_ab", []).extend(latency_ab(
                            tmp, stream.records[:n], offer, rate, args.partitions,
                            args.rounds, spec, other))
                        continue
                    log(f"latency run: {count} records offered at {rate:.0f}/s, on a broker "
                        "of its own")
                    res["latency"].append(latency_on_own_broker(
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
        res["engine_split"] = by_batch_size(stream.records[:n], args.partitions, (500, 2000),
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
