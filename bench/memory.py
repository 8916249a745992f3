"""A worker's memory while it reads the whole input topic (``bench/throughput.py``, phase 4):
VmRSS sampled as it goes, the slope over the second half, and the store's sizes at the end."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import fmt, log, pass_fail, rate_from_samples
from bench.procs import proc_cpu_s, proc_rss_mb
from bench.worker_run import WorkerRun, WorkerSpec, commit_histograms

RSS_SLOPE_GOAL_MB = 1.0  # per 100k events over the second half of the memory run


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
    k = len(half)  # the lowest sample of each third of the second half
    lows = [min(p["rss_mb"] for p in half[i * k // 3:(i + 1) * k // 3]) for i in range(3)
            ] if k >= 3 else []
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
            "rss_lows_second_half_mb": lows,
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


def report_memory(mem: dict[str, Any]) -> list[str]:
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
                 f"{RSS_SLOPE_GOAL_MB:g}: {pass_fail(half < RSS_SLOPE_GOAL_MB)}), "
                 f"{mem['slope_whole_run_mb_per_100k']:+.2f} over the whole run; max "
                 f"{mem['rss_max_mb']:.1f} MB; DuckDB file {mem['duckdb_file_mb']:.1f} MB "
                 f"(+ WAL {mem['duckdb_wal_mb']:.1f} MB)")
    lows = mem.get("rss_lows_second_half_mb") or []
    if lows:
        lines.append("lowest RSS in each third of the second half: "
                     + " / ".join(f"{low:.0f}" for low in lows) + " MB (the samples move with "
                     "the checkpoints' cycle; growth shows as a rise of these lows)")
    st = mem.get("store") or {}
    if st:
        lines.append(f"store after the run: {st['user_state_rows']} user_state rows "
                     f"(state blob mean {fmt(st['state_bytes_mean'])} B, max "
                     f"{st['state_bytes_max']} B), {st['baseline_versions_rows']} baseline "
                     f"versions, {st['session_summaries_rows']} session summaries (up to "
                     f"{st['max_sessions_per_user']} per user)")
    return lines
