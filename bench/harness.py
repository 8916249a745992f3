"""What the benchmarks share: simulated records, producing and reading them on the embedded
broker, a worker run as a subprocess and its ``/metrics``, process figures, and the
formatting of the reports."""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import numpy as np

from drift.evolve import evolve

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SEED = 20261201
PARTITIONS = 4
POLL_S = 0.5
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
    from streams.edge.codec import encode_event

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


class AllBusy(TypedDict):
    """:func:`rate_all_busy`'s answer."""

    rate: float
    seconds: float
    shares: list[float]


def rate_all_busy(each: Sequence[tuple[float, Sequence[float]]]) -> AllBusy:
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
