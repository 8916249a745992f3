"""``run --workers N``: N worker processes of one consumer group on one machine.

Each worker is a ``continuity-drift run`` child process with its own data
directory (``<data-dir>/worker-<i>``) and HTTP port (``--web-port`` + i); they
share the group, so the partitions and, through the changelog, their state are
divided among them. The supervisor forwards SIGTERM/SIGINT, restarts a worker
that ends with an error (exit 70 asks for exactly that: a replay from its last
checkpoint) after a short pause, and returns 0 once every worker stopped cleanly.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

log = logging.getLogger("continuity_drift.supervise")

#: Pause before restarting a worker that failed, so a fault that repeats does not spin.
RESTART_PAUSE_S = 1.0


@dataclass
class Child:
    index: int
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv)


def worker_argv(index: int, bootstrap: str, data_dir: Path, web_host: str, web_port: int,
                partitions: int, log_level: str, config: Path | None) -> list[str]:
    """The command line of worker ``index``."""
    argv = [sys.executable, "-m", "streams.cli", "run", "--broker", bootstrap,
            "--data-dir", str(data_dir / f"worker-{index}"), "--web-host", web_host,
            "--web-port", str(web_port + index), "--partitions", str(partitions),
            "--log-level", log_level]
    if config is not None:
        argv += ["--config", str(config)]
    return argv


def supervise(argvs: list[list[str]]) -> int:
    """Run the workers until a signal; returns 0 when all stopped cleanly."""
    children = [Child(i, argv) for i, argv in enumerate(argvs)]
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for c in children:
            if c.proc is not None and c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for c in children:
            c.start()
        print(f"{len(children)} workers started; HTTP ports "
              f"{', '.join(a[a.index('--web-port') + 1] for a in argvs)}", file=sys.stderr)
        codes: dict[int, int] = {}
        while len(codes) < len(children):
            for c in children:
                if c.index in codes or c.proc is None:
                    continue
                code = c.proc.poll()
                if code is None:
                    continue
                if stopping or code == 0:  # a worker stopped on purpose stays stopped
                    codes[c.index] = code
                    continue
                c.restarts += 1
                log.warning("worker ended; restarting it",
                            extra={"worker": c.index, "exit_code": code})
                time.sleep(RESTART_PAUSE_S)
                if not stopping:
                    c.start()
            time.sleep(0.2)
        return 0 if all(code == 0 for code in codes.values()) else 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for c in children:
            if c.proc is not None and c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
