"""Soak: a steady stream into ``run --workers N`` while one worker is SIGKILLed at intervals.

On one embedded broker (Tansu, memory storage, loopback only):

1. build ``--events`` simulated events of ``--users`` users of every scenario, merged by event
   time (``bench.harness.build_stream``), and compute in process, with the pure replay
   (``drift.replay.MemoryReplay`` on the same records decoded as the worker decodes them),
   every output the service must publish: its id, topic, cause and exact bytes
   (``streams.edge.wire.encode``);
2. start ``continuity-drift run --workers N`` (a supervisor and N workers of one group, each
   restarted by the supervisor when it dies) and a reader of every output topic and the
   dead-letter topic from the beginning;
3. offer the events at ``--rate`` per second, each record stamped with the wall-clock time at
   which it is offered; every ``--kill-every`` seconds while the offer runs, SIGKILL one
   worker (round robin over the supervisor's children, ``/proc/<pid>/task/<pid>/children``);
4. after the offer: wait until every expected output id has arrived (or ``--drain-timeout``),
   then until nothing new arrives for ``--settle`` seconds; stop the supervisor with SIGTERM
   (no worker writes a tick after this) and read its log (all workers log to it); write a
   marker to every partition of every output topic and read up to it (the broker's end
   offsets are not trusted);
5. read ``fhr.events`` back whole, ticks and hostile records included, and fold it
   (``streams.oracle.fold_log``, the oracle of the kill tests): the outputs are compared with
   that fold, by id and bytes (receipts by id).

It prints (``bench/soak_report.py``): events produced, expected outputs, outputs LOST (in the
fold of the log, never received), EXTRA ids (received, not in the fold of the log), DUPLICATES
(messages beyond the first per id: the service is at-least-once, a worker killed before its
checkpoint re-publishes on replay), outputs whose bytes differ from the replay's, kills done
and restarts seen, and the delay from an input record's Kafka timestamp to the Kafka timestamp
of the first copy of each output naming it as its cause (``source_event_id`` on scores,
``cause_event_id`` on responses, escalations and receipts, ``event_id`` on violations). It
reports and never asserts: the exit status is 0 when the run completed, whatever it found, and
1 only when the harness itself failed.

``python bench/soak.py`` (1,000,000 events at 5,000/s, a kill every 120 s: about 10 minutes
plus the drain on two cores), ``--quick`` (50,000 events at 1,000/s, a kill every 20 s: about
2 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Run as a script (python bench/soak.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import build_stream, git_commit, log
from bench.soak_expected import compute_expected, digest
from bench.soak_kafka import Collector, PacedProducer, read_input, read_log
from bench.soak_report import Run, report
from bench.soak_workers import (
    Kill,
    Supervisor,
    free_port_block,
    owners,
    ready,
    scan_log,
    workers_now,
)
from streams import topics
from streams.broker import EmbeddedBroker
from streams.oracle import fold_log

DEFAULTS: dict[str, Any] = {"events": 1_000_000, "users": 2000, "rate": 5000.0,
                            "kill_every": 120.0, "drain_timeout": 900.0}
QUICK: dict[str, Any] = {"events": 50_000, "users": 240, "rate": 1000.0, "kill_every": 20.0,
                         "drain_timeout": 180.0}
DEFAULT_SEED = 20261208

EXAMPLES = """\
examples:
  python bench/soak.py                              # 1M events at 5,000/s, a kill every 120 s
  python bench/soak.py --quick                      # 50k events at 1,000/s, a kill every 20 s
  python bench/soak.py --events 300000 --rate 3000 --kill-every 30 --json /tmp/soak.json
  python bench/soak.py --quick --work-dir /tmp/soak-logs   # keep the broker and worker logs
"""


def soak(run: Run, records: Sequence[tuple[bytes, bytes, str]], base: Path, settle_s: float,
         drain_timeout_s: float, seed: int) -> None:
    assert run.expected is not None
    broker = EmbeddedBroker(log_path=base / "broker.log")
    broker.start()
    sup: Supervisor | None = None
    sup_stopped = False
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
        # No worker may write to fhr.events after this (ticks): the fold of the log read
        # back below is then the whole of what the outputs must be.
        log("stopping the supervisor (SIGTERM) before the last reads")
        run.supervisor_exit = sup.stop()
        run.log = scan_log(sup.log_path)
        sup_stopped = True
        collector.finish.set()
        collector.join(timeout=180)
        if collector.error:
            run.errors.append(f"output reader: {collector.error}")
        run.wall_s = time.monotonic() - t0
        want = {s.cause for s in collector.seen.values() if s.cause}
        log(f"reading fhr.events back for the timestamps of {len(want):,} causes")
        run.input_ts, run.input_read = asyncio.run(read_input(
            broker.bootstrap, run.partitions, want, dict(producer.acked_per_partition),
            120 + len(records) / 5000))
        log("reading fhr.events back whole and folding it (streams.oracle)")
        folded = fold_log(asyncio.run(read_log(broker.bootstrap, run.partitions,
                                               120 + len(records) / 5000)))
        run.log_expected = {i: (e.topic, None, e.user_id or "",
                                digest(e.value) if e.value is not None else None)
                            for i, e in folded.items()}
    finally:
        if producer is not None and producer.is_alive():
            producer.stop_flag.set()
            producer.join(timeout=60)
        if collector is not None and collector.is_alive():
            collector.finish.set()
            collector.join(timeout=60)
        if sup is not None and not sup_stopped:
            log("stopping the supervisor (SIGTERM)")
            run.supervisor_exit = sup.stop()
            run.log = scan_log(sup.log_path)
        broker.stop()


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
