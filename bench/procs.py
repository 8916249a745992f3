"""Process and machine figures for the benchmarks: CPU seconds of a process and of the
machine, a process's children and resident memory, free loopback ports, and stopping a
process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

from streams.broker import free_loopback_port

CLK_TCK = os.sysconf("SC_CLK_TCK")

def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0

def machine_cpu_s() -> tuple[float, float]:
    """The machine's busy and idle CPU seconds since boot, summed over its CPUs
    (``/proc/stat``; zeros where it cannot be read)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / CLK_TCK, idle / CLK_TCK

def child_pids(pid: int) -> list[int]:
    """The process's children (none once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        return []

def free_loopback_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (``run --workers N`` serves
    worker ``i`` on the given port + ``i``)."""
    for _ in range(100):
        first = free_loopback_port()
        if all(_port_free(first + i) for i in range(1, n)):
            return first
    raise RuntimeError(f"no {n} consecutive free loopback ports")

def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True

def proc_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0

def stop_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM,
                 timeout_s: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
