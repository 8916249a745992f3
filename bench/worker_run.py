"""A worker run as a subprocess for the benchmarks (:class:`WorkerRun`, from a
:class:`WorkerSpec`), and what its ``/metrics`` say (samples, sums, histograms)."""

from __future__ import annotations

import http.client
import json
import math
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import POLL_S, ROOT, clean_env
from bench.procs import child_pids, free_loopback_ports, proc_cpu_s, stop_process


def readyz(port: int, timeout_s: float = 1.0) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of a worker's ``/readyz`` on loopback ``port`` (0 and ``{}``
    while nothing answers it with HTTP: a port nothing listens on yet can even connect to
    itself)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=timeout_s) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (OSError, ValueError, http.client.HTTPException):
        return 0, {}

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
            if readyz(waiting[0], timeout_s=2)[0] == 200:
                waiting.pop(0)
                if not waiting:
                    return time.monotonic() - started
                continue
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
