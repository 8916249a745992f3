"""What a ``bench/restore.py`` run measured for each size (:class:`SizeResult`) and what it
prints."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


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
