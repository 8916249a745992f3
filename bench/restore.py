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
import hashlib
import json
import math
import shlex
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drift.evolve import evolve

# Run as a script (python bench/restore.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import git_commit, log, positive_values
from bench.kafka_io import partition_of, produce
from bench.procs import stop_process
from bench.worker_run import WorkerRun, WorkerSpec, metric_sum
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


# --------------------------------------------------------------------------- events


@dataclass
class Built:
    records: list[tuple[bytes, bytes, str]]  # (key, value, event_id) in event-time order
    users: int
    sessions: int  # sessions of most users (sustained_low users have more)
    per_partition_events: dict[int, int]
    per_partition_users: dict[int, int]
    seconds: float


def build_records(users_per_partition: int, partitions: int, test_sessions: int, seed: int
                  ) -> Built:
    """Every scenario's simulated users, complete (no session cut), merged by event time.

    Each user is shifted by a random offset up to one session length, as in
    ``bench/throughput.py``, so that many users are mid-session at any point.
    """
    from drift.simulation import Scenario, SimParams, simulate
    from streams.codec import encode_event

    started = time.monotonic()
    per_scenario = max(1, round(users_per_partition * partitions / len(Scenario)))
    params = SimParams(test_sessions=test_sessions)
    span = (params.turns + 2) * params.turn_gap_s
    days = params.baseline_sessions + test_sessions * params.low_sessions + 2
    begin = time.time() - days * 86400.0
    rng = np.random.default_rng(seed ^ 0x5EED)
    rows: list[tuple[float, bytes, bytes, str]] = []
    users_in: Counter[int] = Counter()
    sessions: Counter[int] = Counter()
    n_users = 0
    for events, truth in simulate(seed, list(Scenario), per_scenario, begin, params):
        n_users += 1
        shift = float(rng.uniform(0.0, span))
        key = events[0].user_id.encode()
        users_in[partition_of(key, partitions)] += 1
        sessions[len(truth)] += 1
        for e in events:
            e2 = evolve(e, ts_s=e.ts_s + shift)
            rows.append((e2.ts_s, key, encode_event(e2), e2.event_id))
    rows.sort(key=lambda r: r[0])
    records = [(k, v, i) for _, k, v, i in rows]
    per_part = Counter(partition_of(k, partitions) for k, _, _ in records)
    return Built(records, n_users, sessions.most_common(1)[0][0],
                 {p: per_part.get(p, 0) for p in range(partitions)},
                 {p: users_in.get(p, 0) for p in range(partitions)},
                 time.monotonic() - started)


# --------------------------------------------------------------------------- store rows


def export_rows(db: Path, partitions: int) -> dict[int, dict[str, Any]]:
    """Per partition: row counts per table, encoded bytes, and a digest of the rows."""
    from baselines.store import BaselineStore

    out: dict[int, dict[str, Any]] = {}
    if not db.exists():
        return out
    store = BaselineStore.open_read_only(db)
    try:
        for p in range(partitions):
            rows = store.export_partition(p)
            tables: dict[str, int] = {}
            digest = hashlib.blake2b(digest_size=16)
            for name in sorted(rows.tables):
                table = rows.tables[name]
                tables[name] = table.num_rows
                lines = sorted(repr(tuple(r.values())) for r in table.to_pylist())
                digest.update(name.encode())
                for line in lines:
                    digest.update(line.encode())
            out[p] = {"rows": sum(tables.values()), "tables": tables,
                      "bytes": len(rows.encode()), "digest": digest.hexdigest()}
    finally:
        store.close()
    return out


# --------------------------------------------------------------------------- one size


@dataclass
class SizeResult:
    label: str
    users_per_partition: int
    test_sessions: int
    sessions: int
    users: int
    partitions: int
    events: int
    per_partition_events: dict[int, int]
    per_partition_users: dict[int, int]
    build_s: float = math.nan
    produce_rate: float = math.nan
    first_worker_s: float = math.nan
    first_exit: int | None = None
    changelog_written_bytes: float = math.nan
    changelog_rolls: float = math.nan
    ready_s: float = math.nan
    restores: dict[int, dict[str, Any]] = field(default_factory=dict)
    metric_restore_sum: float = math.nan
    metric_restore_count: float = math.nan
    replayed_events: float = math.nan
    second_exit: int | None = None
    assigned_after_s: float = math.nan
    first_restore_start_s: float = math.nan
    live_first: dict[int, dict[str, Any]] = field(default_factory=dict)
    live_second: dict[int, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    work_dir: str = ""


def _stop(worker: WorkerRun, timeout_s: float) -> int | None:
    """SIGTERM, wait; SIGKILL only past ``timeout_s``. Returns the exit code."""
    if worker.proc is None:
        return None
    stop_process(worker.proc, signal.SIGTERM, timeout_s=timeout_s)
    if worker._log is not None:
        worker._log.close()
        worker._log = None
    return worker.proc.returncode


def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except (OSError, ValueError):
        return 0, {}


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
            status, _ = _readyz(second.port)
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


# --------------------------------------------------------------------------- report


def _n(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{int(x):,}"


def _kb(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x / 1024:,.0f} KiB"


def _s(x: Any, spec: str = ".2f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return format(x, spec)


def report(results: Sequence[SizeResult], command: str, commit: str, elapsed: float) -> str:
    lines = ["## Restore time against partition size", "",
             ("| users per partition | sessions per user | input events of the partition "
             "(history) | live rows / bytes | changelog records read | bytes read | deltas "
             "| restore seconds | time to ready (s) | rows identical to first worker |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        if r.error and not r.restores:
            lines.append(f"| {r.label} | {r.sessions} | {_n(sum(r.per_partition_events.values()))}"
                         f" | FAILED: {r.error} | | | | | | |")
            continue
        for p in range(r.partitions):
            rest = r.restores.get(p, {})
            live = r.live_second.get(p, {})
            ref = r.live_first.get(p, {})
            same = ("yes" if live and ref and live["digest"] == ref["digest"] else
                    "NO" if live and ref else "n/a")
            users = (f"{r.label} ({r.per_partition_users.get(p, 0):,})" if r.partitions == 1
                     else f"{r.label} p{p} ({r.per_partition_users.get(p, 0):,})")
            lines.append(
                f"| {users} | {r.sessions} | {_n(r.per_partition_events.get(p))} | "
                f"{_n(live.get('rows'))} / {_kb(live.get('bytes'))} | "
                f"{_n(rest.get('records'))} | {_kb(rest.get('bytes'))} | "
                f"{_n(rest.get('deltas'))} | {_s(rest.get('seconds'), '.3f')} | "
                f"{_s(r.ready_s)} | {same} |")
    lines += ["",
              ("users per partition: the target, and in brackets the simulated users that hash "
              "to the partition (all scenarios; the stateless and ephemeral ones keep no rows)."),
              ("live rows / bytes: every row of the partition in the restoring worker's DuckDB "
              "after it stopped (user_state, baseline_versions with superseded versions, "
              "session_summaries, partition_offsets, erasure records), and their encoded size, "
              "the size a snapshot of them takes in the changelog."),
              ("changelog records / bytes read, deltas, restore seconds: the restoring worker's "
              "'partition restored' log line (records and payload bytes read from the start "
              "of the newest generation up to its own marker; seconds from listing the "
              "generations to the DuckDB commit). time to ready: spawn of the process to "
              "the first /readyz 200 (includes interpreter start-up and the group join)."),
              ("rows identical: the restoring worker's rows equal the first worker's, table "
              "by table (digest of the sorted rows)."), ""]
    lines += [("| run | events | first worker read them in | changelog written by it | rolls "
              "| spawn -> restore starts | spawn -> partitions assigned | restore_seconds "
              "metric (sum / count) | events processed after the restore | exit codes |"),
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(
            f"| {r.label} | {r.events:,} | {_s(r.first_worker_s, '.1f')} s | "
            f"{_kb(r.changelog_written_bytes)} | {_n(r.changelog_rolls)} | "
            f"{_s(r.first_restore_start_s)} s | {_s(r.assigned_after_s)} s | "
            f"{_s(r.metric_restore_sum, '.3f')} / {_n(r.metric_restore_count)} | "
            f"{_n(r.replayed_events)} | {r.first_exit} / {r.second_exit} |")
    lines += ["", "live rows by table (restoring worker, all partitions):"]
    for r in results:
        tables: Counter[str] = Counter()
        for live in r.live_second.values():
            tables.update(live.get("tables", {}))
        n_users = sum(r.per_partition_users.values())
        counts = ", ".join(f"{t} {c:,}" for t, c in sorted(tables.items())) or "n/a"
        lines.append(f"  {r.label}: {counts} ({n_users:,} users, {r.sessions} sessions each)")
    lines += ["",
              ("changelog written: continuity_changelog_bytes_total of the first worker "
              "(snapshots and deltas of all its generations); rolls: generations it started. "
              "events processed after the restore should be 0: the restored offsets are where "
              "the first worker stopped. exit codes: first / second worker after SIGTERM."), ""]
    hist = [r for r in results if "x history" in r.label]
    if hist:
        for h in hist:
            plain = next((r for r in results if r.users_per_partition == h.users_per_partition
                          and r is not h and "x history" not in r.label), None)
            if plain is None or not plain.restores or not h.restores:
                continue
            t_plain = sum(float(x.get("seconds", 0)) for x in plain.restores.values())
            t_hist = sum(float(x.get("seconds", 0)) for x in h.restores.values())
            ea, eb = plain.events, h.events
            la = sum(int(x.get("bytes", 0)) for x in plain.live_second.values())
            lb = sum(int(x.get("bytes", 0)) for x in h.live_second.values())
            ra = sum(int(x.get("bytes", 0)) for x in plain.restores.values())
            rb = sum(int(x.get("bytes", 0)) for x in h.restores.values())
            lines.append(
                f"history variant at {h.users_per_partition:,} users per partition: "
                f"{eb / max(ea, 1):.2f}x the input events ({ea:,} -> {eb:,}), "
                f"{lb / max(la, 1):.2f}x the live bytes, {rb / max(ra, 1):.2f}x the changelog "
                f"bytes read, restore {t_plain:.3f}s -> {t_hist:.3f}s "
                f"({t_hist / max(t_plain, 1e-9):.2f}x). "
                f"Bytes read per live byte: {ra / max(la, 1):.2f} -> {rb / max(lb, 1):.2f}.")
        lines.append("")
    for r in results:
        if r.error:
            lines.append(f"ERROR in {r.label}: {r.error} (logs: {r.work_dir})")
        bad = [p for p in range(r.partitions)
               if r.live_first.get(p) and r.live_second.get(p)
               and r.live_first[p]["digest"] != r.live_second[p]["digest"]]
        for p in bad:
            lines.append(f"MISMATCH in {r.label} partition {p}: first worker "
                         f"{r.live_first[p]['tables']} vs restored {r.live_second[p]['tables']}")
        if r.replayed_events and r.replayed_events > 0:
            lines.append(f"NOTE {r.label}: the restoring worker processed "
                         f"{r.replayed_events:.0f} events after its restore (expected 0)")
    lines += [f"reproduce: {command}", f"commit: {commit}",
              f"(benchmark took {elapsed:.0f}s)"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


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
