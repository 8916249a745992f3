"""Restore time of a partition's state from its changelog, against partition size.

For each size (users per partition, ``--users``), on a fresh embedded broker (Tansu, memory
storage, loopback only) and a fresh consumer group:

1. build: simulated users of every scenario (three baseline sessions and ``--test-sessions``
   more each, so that every user of a scenario that keeps baselines has them), pre-produced
   to ``fhr.events`` at full speed;
2. a first worker (``continuity-drift run``) reads them all (its ``/metrics`` count events +
   rejections up to the number of records produced), then is stopped with SIGTERM: its last
   checkpoint goes to DuckDB and to the changelog;
3. a second worker of the same group with a FRESH data directory starts; it restores every
   partition from the changelog before it reads the partition. Measured: its "partition
   restored" log lines (generation, changelog records and bytes read up to its marker,
   deltas, seconds), ``continuity_restore_seconds`` from its ``/metrics``, and the time from
   its spawn to ``/readyz`` 200. Its timer is switched off (``timer_interval_s = 86400``) so
   that it changes nothing after the restore;
4. both workers stopped, each one's DuckDB file is exported partition by partition
   (``BaselineStore.export_partition``, the rows a snapshot carries): the live rows and
   their encoded bytes, and whether the second worker's rows are identical to the first's.

For one size (``--history-users``) the same users run again with ``--history-factor`` times
as many sessions each: more history, the same users. A restore bounded by live state, not by
history, takes about as long for both. Note that the live state of a partition includes
its session summaries and superseded baseline versions (they follow the partition for
governance), so it grows with sessions too; the table shows by how much.

Run ``python bench/restore.py`` (sizes 1000, 5000, 20000 users per partition, the 3x-history
variant at 5000: roughly half an hour on two cores, most of it the first worker reading the
input), ``--quick`` (200 and 1000, variant at 200: about two minutes).
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

# Run as a script (python bench/restore.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import git_commit, log, positive_values
from bench.kafka_io import produce
from bench.procs import stop_process
from bench.restore_data import build_records, export_rows
from bench.restore_report import SizeResult, report
from bench.worker_run import WorkerRun, WorkerSpec, metric_sum, readyz
from streams import topics
from streams.broker import EmbeddedBroker

DEFAULT_USERS = (1000, 5000, 20000)
QUICK_USERS = (200, 1000)
DEFAULT_HISTORY_USERS = 5000
QUICK_HISTORY_USERS = 200
DEFAULT_SEED = 20261207
#: Worker 2 never runs its timer, so its file holds exactly what it restored.
NO_TIMER_S = 86400.0

EXAMPLES = """\
examples:
  python bench/restore.py                         # 1000, 5000, 20000 users per partition
  python bench/restore.py --quick                 # 200, 1000; the 3x-history variant at 200
  python bench/restore.py --users 2000,8000 --history-users 8000 --json /tmp/restore.json
  python bench/restore.py --partitions 4 --users 1000   # 4 partitions, one row per partition
  python bench/restore.py --users 5000 --no-history --work-dir /tmp/restore-logs
"""


def _stop(worker: WorkerRun, timeout_s: float) -> int | None:
    """SIGTERM, wait; SIGKILL only past ``timeout_s``. Returns the exit code."""
    if worker.proc is None:
        return None
    stop_process(worker.proc, signal.SIGTERM, timeout_s=timeout_s)
    if worker._log is not None:
        worker._log.close()
        worker._log = None
    return worker.proc.returncode


def _log_lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run_size(label: str, users_per_partition: int, partitions: int, test_sessions: int,
             seed: int, base: Path, ready_timeout_s: float, gap_s: float) -> SizeResult:
    log(f"[{label}] building {users_per_partition} users per partition x {partitions}, "
        f"{3 + test_sessions} sessions each")
    built = build_records(users_per_partition, partitions, test_sessions, seed)
    n = len(built.records)
    log(f"[{label}] built {n} events of {built.users} users in {built.seconds:.1f}s")
    res = SizeResult(label, users_per_partition, test_sessions, built.sessions, built.users,
                     partitions, n, built.per_partition_events, built.per_partition_users,
                     build_s=built.seconds)
    tmp = base / label.replace(" ", "_").replace("/", "_")
    tmp.mkdir(parents=True, exist_ok=True)
    res.work_dir = str(tmp)
    app_id = f"bench-restore-{label.replace(' ', '-')}-{int(time.time())}"
    broker = EmbeddedBroker(log_path=tmp / "broker.log")
    broker.start()
    first: WorkerRun | None = None
    second: WorkerRun | None = None
    try:
        topics.create_topics(broker.bootstrap, partitions)
        log(f"[{label}] broker at {broker.bootstrap}; producing {n} records")
        res.produce_rate = produce(broker.bootstrap, built.records, partitions)
        del built  # the records are on the broker now
        log(f"[{label}] produced at {res.produce_rate:.0f}/s; first worker reads them")
        info = (("log_level", '"info"'),)
        first = WorkerRun(broker.bootstrap, tmp, "worker-1", app_id, WorkerSpec(worker=info))
        started = time.monotonic()
        first.start()
        first.wait_ready(ready_timeout_s)
        last_log = [time.monotonic()]

        def progress(now: float, count: float) -> None:
            if now - last_log[0] >= 10.0:
                last_log[0] = now
                log(f"[{label}]   first worker: {count:.0f} / {n} events")

        first.wait_processed(n, 300 + n / 300.0, on_sample=progress, interval_s=1.0)
        res.first_worker_s = time.monotonic() - started
        final = first.samples()
        res.changelog_written_bytes = metric_sum(final, "continuity_changelog_bytes_total")
        res.changelog_rolls = metric_sum(final, "continuity_changelog_rolls_total")
        log(f"[{label}] first worker read all {n} in {res.first_worker_s:.1f}s; stopping it "
            f"(SIGTERM: last checkpoint)")
        res.first_exit = _stop(first, 180)
        if res.first_exit != 0:
            log(f"[{label}] WARNING: first worker exited with {res.first_exit}")

        if gap_s > 0:
            log(f"[{label}] waiting {gap_s:.0f}s before the second worker starts (--gap)")
            time.sleep(gap_s)
        spec2 = WorkerSpec(worker=(*info, ("timer_interval_s", f"{NO_TIMER_S:.1f}")))
        second = WorkerRun(broker.bootstrap, tmp, "worker-2", app_id, spec2)
        spawn_wall = time.time()
        spawn = time.monotonic()
        second.start()
        deadline = spawn + ready_timeout_s
        status = 0
        while time.monotonic() < deadline:
            second.check()
            status, _ = readyz(second.port, timeout_s=2)
            if status == 200:
                break
            time.sleep(0.05)
        if status != 200:
            raise TimeoutError(f"second worker not ready within {ready_timeout_s:.0f}s")
        res.ready_s = time.monotonic() - spawn
        samples = second.samples()
        res.metric_restore_sum = samples.get(("continuity_restore_seconds_sum", ()), math.nan)
        res.metric_restore_count = samples.get(("continuity_restore_seconds_count", ()),
                                               math.nan)
        time.sleep(1.0)  # anything replayed after the restore shows up in the event counter
        samples = second.samples()
        res.replayed_events = (metric_sum(samples, "continuity_events_total")
                               + metric_sum(samples, "continuity_rejections_total"))
        log(f"[{label}] second worker ready {res.ready_s:.2f}s after spawn; stopping it")
        res.second_exit = _stop(second, 180)
        for line in _log_lines(tmp / "worker-2.log"):
            if line.get("msg") == "partition restored":
                for p in line.get("partitions", []):
                    res.restores[int(p)] = line
                start = float(line["ts"]) - float(line.get("seconds", 0.0))
                if math.isnan(res.first_restore_start_s):
                    res.first_restore_start_s = start - spawn_wall
            elif line.get("msg") == "partitions assigned" and math.isnan(res.assigned_after_s):
                res.assigned_after_s = float(line["ts"]) - spawn_wall
        res.live_first = export_rows(first.data_dir / "continuity.duckdb", partitions)
        res.live_second = export_rows(second.data_dir / "continuity.duckdb", partitions)
    except (RuntimeError, TimeoutError, OSError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        log(f"[{label}] FAILED: {res.error} (logs in {tmp})")
    finally:
        for w in (first, second):
            if w is not None and w.alive():
                _stop(w, 60)
        broker.stop()
    return res


def _counts(text: str) -> tuple[int, ...]:
    return positive_values(text, int, "counts", "1000,5000")


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Restore time of a partition's state from its changelog against partition "
                    "size: a first worker builds the state from simulated traffic, a second "
                    "worker of the same group with a fresh data directory restores it. Prints "
                    "a markdown table; exits 0 unless a run failed.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=_counts,
                        help="comma-separated users per partition, one run each (default "
                             "1000,5000,20000; quick 200,1000)")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of every topic (default 1: one partition holds all "
                             "users; with more, one table row per partition)")
    parser.add_argument("--test-sessions", type=int, default=1,
                        help="sessions per user after the three baseline sessions (default 1)")
    parser.add_argument("--history-users", type=int, default=None,
                        help="users per partition of the extra run with more history (default "
                             "5000, quick 200; the smallest --users size if that is not among "
                             "them)")
    parser.add_argument("--history-factor", type=int, default=3,
                        help="that run has this many times the sessions per user (default 3)")
    parser.add_argument("--no-history", action="store_true", help="skip the history variant")
    parser.add_argument("--gap", type=float, default=0.0,
                        help="seconds between the first worker's exit and the second worker's "
                             "start (default 0: at once, as after a rolling restart; the "
                             "group join may then wait out the first worker's membership)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 200 and 1000 users per partition, about 2 minutes")
    parser.add_argument("--ready-timeout", type=float, default=600.0,
                        help="seconds a worker may take to report ready (default 600)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep broker and worker logs and data here (default: a temporary "
                             "directory, removed at the end)")
    args = parser.parse_args(argv)
    if args.partitions < 1 or args.test_sessions < 1 or args.history_factor < 1:
        parser.error("--partitions, --test-sessions and --history-factor must be at least 1")
    signal.signal(signal.SIGTERM, _terminate)

    sizes: tuple[int, ...] = args.users or (QUICK_USERS if args.quick else DEFAULT_USERS)
    history = args.history_users
    if history is None:
        history = QUICK_HISTORY_USERS if args.quick else DEFAULT_HISTORY_USERS
        if history not in sizes:
            history = min(sizes)
    base_sessions = 3 + args.test_sessions
    history_tests = args.history_factor * base_sessions - 3

    command = "python bench/restore.py" + (" --quick" if args.quick else "")
    if args.users:
        command += " --users " + ",".join(str(u) for u in sizes)
    for flag, value, default in (("--partitions", args.partitions, 1),
                                 ("--test-sessions", args.test_sessions, 1),
                                 ("--history-users", args.history_users, None),
                                 ("--history-factor", args.history_factor, 3),
                                 ("--gap", args.gap, 0.0),
                                 ("--seed", args.seed, DEFAULT_SEED)):
        if value != default:
            command += f" {flag} {value}"
    if args.no_history:
        command += " --no-history"
    if args.json:
        command += f" --json {shlex.quote(str(args.json))}"

    plan: list[tuple[str, int, int]] = [(f"{u}", u, args.test_sessions) for u in sizes]
    if not args.no_history:
        plan.append((f"{history} {args.history_factor}x history", history, history_tests))
    started = time.monotonic()
    commit = git_commit()
    results: list[SizeResult] = []
    with tempfile.TemporaryDirectory(prefix="continuity-restore-") as tmpname:
        base = Path(tmpname)
        if args.work_dir is not None:
            base = args.work_dir / time.strftime("%Y%m%d-%H%M%S")
            base.mkdir(parents=True, exist_ok=True)
        for label, users, tests in plan:
            results.append(run_size(label, users, args.partitions, tests, args.seed, base,
                                    args.ready_timeout, args.gap))
            r = results[-1]
            if r.restores:
                secs = ", ".join(f"p{p} {float(x['seconds']):.3f}s"
                                 for p, x in sorted(r.restores.items()))
                log(f"[{label}] restore {secs}; ready after {r.ready_s:.2f}s")
    elapsed = time.monotonic() - started
    print(report(results, command, commit, elapsed))
    if args.json:
        args.json.write_text(json.dumps({"command": command, "commit": commit,
                                         "results": [r.__dict__ for r in results]},
                                        indent=2, default=str))
        print(f"figures written to {args.json}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
