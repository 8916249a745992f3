"""``continuity-drift demo``: an embedded broker, a worker, simulated traffic that keeps flowing
until Ctrl-C or ``--duration``, and a screen that says what the service publishes and why.

The traffic is :mod:`streams.demo.traffic`'s story, told in rounds; what the worker publishes
is read back from the output topics and counted as its ``/metrics`` counts
(:mod:`streams.demo.tally`); :mod:`streams.demo.screen` shows it. When it stops, the demo
stops the traffic, waits until the worker has processed every record sent and the topics
show everything its counters counted, and prints the final tallies beside ``/metrics``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from kafka import KafkaConsumer
from rich.console import Console

from drift.simulation import Scenario
from streams import topics
from streams.broker import EmbeddedBroker
from streams.demo.screen import LiveScreen, PlainScreen, Screen, View, final_lines, legend
from streams.demo.tally import DECODERS, Scrape, Tally, differences, scrape
from streams.demo.traffic import Story, Traffic

REFRESH_S = 1.0
STALL_S = 15.0
WAIT_NOTE_S = 10.0


def readyz(url: str) -> str | None:
    """None when the worker at ``url`` answers ready; else what it answers instead.

    >>> readyz("http://127.0.0.1:1/readyz")
    'does not answer yet'
    """
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return None if resp.status == 200 else f"answers {resp.status}"
    except urllib.error.HTTPError as exc:  # 503 until ready: its body says why
        return f"answers {exc.code} {exc.read().decode(errors='replace')[:200]}"
    except (OSError, http.client.HTTPException):
        return "does not answer yet"


class _Stop:
    """Ctrl-C (or SIGTERM, SIGHUP) once: stop the traffic and settle; twice: stop at once."""

    def __init__(self) -> None:
        self.requested = False
        self.hurry = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.hurry = self.requested
        self.requested = True


def cmd_demo(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="continuity-drift-demo-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    story = Story.build(args.seed, args.users, time.time() - 10 * 86400)
    with EmbeddedBroker(log_path=None) as broker:
        print(f"embedded broker (in memory) at {broker.bootstrap}", flush=True)
        topics.create_topics(broker.bootstrap, 4)
        token = os.environ.get("CONTINUITY_REVIEW_TOKEN", "demo-token")
        with open(data_dir / "worker.log", "ab") as log:
            # In a session of its own, so that Ctrl-C reaches only the demo, which then lets
            # the worker finish what was sent before stopping it.
            worker = subprocess.Popen(
                [sys.executable, "-m", "streams.cli", "run", "--broker", broker.bootstrap,
                 "--data-dir", str(data_dir), "--web-port", str(args.web_port)],
                env=dict(os.environ, CONTINUITY_REVIEW_TOKEN=token), stdout=log, stderr=log,
                start_new_session=True)
        try:
            return _Demo(args, broker.bootstrap, worker, story, data_dir, token).run()
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


class _Demo:
    def __init__(self, args: argparse.Namespace, bootstrap: str,
                 worker: subprocess.Popen[bytes], story: Story, data_dir: Path,
                 token: str) -> None:
        self.args, self.bootstrap, self.worker = args, bootstrap, worker
        self.story, self.data_dir, self.token = story, data_dir, token
        self.metrics_url = f"http://127.0.0.1:{args.web_port}/metrics"
        self.ready_url = f"http://127.0.0.1:{args.web_port}/readyz"
        self.tally = Tally()
        self.metrics: Scrape | None = None
        self.traffic = Traffic(bootstrap, story, args.rate)
        self.started = time.monotonic()
        console = Console(highlight=False)
        self.screen: Screen = (
            LiveScreen(console, f"metrics {self.metrics_url} · worker log "
                                f"{data_dir / 'worker.log'}")
            if console.is_terminal and not console.is_dumb_terminal else PlainScreen())

    def run(self) -> int:
        stop = _Stop()
        before = {s: signal.signal(s, stop)
                  for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        consumer = KafkaConsumer(*DECODERS, bootstrap_servers=self.bootstrap, group_id=None,
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            self._intro()
            if not self._until_ready(stop):
                return 1 if self.worker.poll() is not None else 0
            self.traffic.start()
            failed = self._watch(consumer, stop)
            self.traffic.stopping.set()
            self.traffic.join(timeout=60)
            if failed:
                return 1
            self._settle(consumer, stop)
            self.screen.close()
            for line in final_lines(self._view()):
                self.screen.say(line)
            self.screen.say(f"data and DuckDB file: {self.data_dir}")
            self.screen.say(f"governance report:    continuity-drift report --data-dir "
                            f"{self.data_dir}")
            return 0
        finally:
            self.traffic.stopping.set()
            self.screen.close()
            consumer.close()
            for s, handler in before.items():
                signal.signal(s, handler)

    def _intro(self) -> None:
        say, a = self.screen.say, self.args
        until = f"{a.duration:.0f}s have passed" if a.duration else "Ctrl-C"
        say(f"metrics:  {self.metrics_url}")
        say(f"review:   curl -H 'Authorization: Bearer {self.token}' \\")
        say(f"            http://127.0.0.1:{a.web_port}/v1/users/"
            f"{min(self.story.scenario_of)}/baselines")
        say(f"data:     {self.data_dir} (the worker's log: worker.log)")
        say(f"traffic:  {len(Scenario)} scenarios x {a.users} users at {a.rate:.0f} records/s "
            f"until {until}.")
        say("          Each round retells every scenario with new sessions for the same users,")
        say("          later in event time; it opens with a baseline_reconfirmed per user,")
        say("          which lifts a HOLD (hold_released).")
        for line in legend():
            say(line)

    def _until_ready(self, stop: _Stop) -> bool:
        """Wait until the worker's ``/readyz`` says it holds its partitions, so that the
        traffic and the clock start when the worker can take them; False if it exited or
        Ctrl-C came first. Every :data:`WAIT_NOTE_S` it says what ``/readyz`` answers."""
        self.screen.say(f"waiting for the worker to take its partitions ({self.ready_url})...")
        note_at = time.monotonic() + WAIT_NOTE_S
        while not stop.requested:
            if self.worker.poll() is not None:
                self._worker_failed()
                return False
            answer = readyz(self.ready_url)
            if answer is None:
                self.started = time.monotonic()
                return True
            if time.monotonic() >= note_at:
                self.screen.say(f"  still waiting: /readyz {answer} (the worker's log: "
                                f"{self.data_dir / 'worker.log'})")
                note_at = time.monotonic() + WAIT_NOTE_S
            time.sleep(0.2)
        return False

    def _view(self) -> View:
        t = self.traffic
        return View(time.monotonic() - self.started, t.round, t.delivered, self.args.rate,
                    t.event_ts, self.tally, self.metrics, t.stopping.is_set())

    def _read(self, consumer: KafkaConsumer, budget_s: float) -> None:
        """Count what the output topics hold, for up to ``budget_s``."""
        deadline = time.monotonic() + budget_s
        while True:
            batches = consumer.poll(timeout_ms=100, max_records=5000)
            at = time.monotonic() - self.started
            for tp, records in batches.items():
                for r in records:
                    self.tally.add(tp.topic, r.value, at)
            if not batches or time.monotonic() >= deadline:
                return

    def _refresh(self) -> None:
        self.metrics = scrape(self.metrics_url) or self.metrics
        self.screen.show(self._view())

    def _watch(self, consumer: KafkaConsumer, stop: _Stop) -> bool:
        """Until Ctrl-C or --duration; True if the worker or the traffic failed."""
        next_refresh = 0.0
        while not stop.requested:
            if self.worker.poll() is not None:
                self._worker_failed()
                return True
            if self.traffic.error is not None:
                self.screen.close()
                print(f"the traffic stopped: {self.traffic.error}", file=sys.stderr)
                return True
            self._read(consumer, 0.3)
            now = time.monotonic() - self.started
            if now >= next_refresh:
                self._refresh()
                next_refresh = now + REFRESH_S
            if self.args.duration and now >= self.args.duration:
                break
        return False

    def _settle(self, consumer: KafkaConsumer, stop: _Stop) -> None:
        """Wait until the worker has processed every record sent and the topics show what it
        counted, the same for a second. Gives up after :data:`STALL_S` without progress; a
        second Ctrl-C stops waiting at once."""
        sent = self.traffic.delivered
        self.screen.say(f"traffic stopped at {sent} records; waiting for the worker to catch "
                        "up (Ctrl-C again: stop now)")
        last: object = None
        since = time.monotonic()
        while not stop.hurry and self.worker.poll() is None:
            self._read(consumer, 0.3)
            self._refresh()
            m = self.metrics
            now = time.monotonic()
            state = None if m is None else (m.processed, m.counts, sum(
                sum(c.values()) for c in self.tally.counts.values()))
            if state != last:
                last, since = state, now
            done = (m is not None and m.processed >= sent
                    and not differences(self.tally, m))
            if (done and now - since >= 1.0) or now - since >= STALL_S:
                return


    def _worker_failed(self) -> None:
        self.screen.close()
        log = self.data_dir / "worker.log"
        print(f"the worker exited with code {self.worker.returncode}; the end of {log}:",
              file=sys.stderr)
        try:
            print("\n".join(log.read_text(errors="replace").splitlines()[-20:]),
                  file=sys.stderr)
        except OSError:
            pass
