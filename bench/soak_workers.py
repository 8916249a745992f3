"""The workers of a soak run: ``run --workers N`` under its supervisor, the children it
restarts, their ports and readiness, the kills, and what the supervisor's log says."""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import socket
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import ROOT, clean_env, log
from bench.worker_run import readyz


def free_port_block(n: int) -> int:
    """A port p such that p .. p+n-1 are free on 127.0.0.1 (checked by binding each)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n > 65535:
            continue
        socks = []
        try:
            for i in range(n):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no block of {n} free ports found")


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def worker_index(pid: int) -> int | None:
    """Index i of a worker child, from the ``--data-dir .../worker-i`` of its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for a, b in itertools.pairwise(argv):
        if a == b"--data-dir":
            name = Path(b.decode()).name
            if name.startswith("worker-") and name[7:].isdigit():
                return int(name[7:])
    return None


def workers_now(sup_pid: int) -> dict[int, int]:
    """index -> pid of the supervisor's live worker children."""
    out = {}
    for pid in children_of(sup_pid):
        i = worker_index(pid)
        if i is not None:
            out[i] = pid
    return out


def owners(port: int, workers: int, partitions: int, sup_pid: int) -> dict[int, int] | None:
    """partition -> pid of its owner, when every worker is ready and they own every
    partition exactly once; else None (a rebalance or a restore is going on)."""
    live = workers_now(sup_pid)
    out: dict[int, int] = {}
    for i in range(workers):
        status, body = readyz(port + i)
        if status != 200 or i not in live:
            return None
        for p in body.get("partitions", []):
            if p in out:
                return None
            out[int(p)] = live[i]
    return out if set(out) == set(range(partitions)) else None


def ready(port: int) -> bool:
    return readyz(port)[0] == 200


@dataclass
class Kill:
    t: float  # seconds since the offer started
    index: int
    pid: int
    was_ready: bool
    new_pid: int | None = None
    restarted_after: float = math.nan
    ready_after: float = math.nan
    owners_before: dict[int, int] | None = None


@dataclass
class Supervisor:
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: Any = None

    def start(self) -> None:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=clean_env(), stdout=self._log,
                                     stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout_s: float = 120.0) -> int | None:
        """SIGTERM (forwarded to the workers); past ``timeout_s`` SIGKILL the workers it
        started, then it."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            kids = children_of(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log(f"supervisor did not stop within {timeout_s:.0f}s; killing it and its "
                    "workers")
                for pid in set(kids) | set(children_of(self.proc.pid)):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode


def scan_log(path: Path) -> dict[str, Any]:
    """What the supervisor and its workers logged: restarts, errors, restores."""
    restarts: Counter[str] = Counter()
    levels: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    restores: list[tuple[float, int, float]] = []  # (wall ts, partition, seconds)
    tracebacks = 0
    other: Counter[str] = Counter()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        s = line.strip()
        if s.startswith("{"):
            try:
                rec = json.loads(s)
            except ValueError:
                other[s[:160]] += 1
                continue
            level = str(rec.get("level", "?"))
            levels[level] += 1
            msg = str(rec.get("msg", ""))
            if msg == "worker ended; restarting it":
                restarts[str(rec.get("exit_code"))] += 1
            elif msg == "partition restored":
                for p in rec.get("partitions", []):
                    restores.append((float(rec.get("ts", math.nan)), int(p),
                                     float(rec.get("seconds", math.nan))))
            if level in ("warning", "error", "critical") and msg != "worker ended; restarting it":
                err = rec.get("error") or rec.get("error_type") or ""
                messages[f"{level}: {msg}" + (f" [{err}]" if err else "")] += 1
        elif s.startswith("Traceback"):
            tracebacks += 1
        elif s and not s.startswith(("worker on ", "created topics", "3 workers started")) \
                and "workers started" not in s:
            other[s[:160]] += 1
    return {"restarts_by_exit_code": dict(restarts), "levels": dict(levels),
            "problems": messages.most_common(12), "tracebacks": tracebacks,
            "restores": len(restores),
            "restore_max_s": max((r[2] for r in restores), default=math.nan),
            "restore_list": restores,
            "other_lines": other.most_common(8)}
