"""The demo as a user runs it: traffic that keeps flowing, plain lines that fit 100 columns, a
legend, notable events with their scores and drivers, final counts equal to the worker's
/metrics, and a closing line with the data directory and the report command. Beside it, the
story its traffic retells and its screen, without a broker."""

from __future__ import annotations

import http.client
import io
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from drift.model import DriftConfig, FhrEvent
from drift.outputs import Action, DriftScore, Response, Rule, Violation
from drift.replay import MemoryReplay
from streams import topics
from streams.broker import free_loopback_port
from streams.demo.screen import View, legend, live_screen
from streams.demo.tally import Scrape, Tally
from streams.demo.traffic import Story
from streams.edge.codec import decode_event
from streams.edge.rejection import Rejection
from streams.edge.wire import encode
from tests.conftest import REPO, fast_env

#: Long enough for three summaries: the clock starts once the worker is ready.
DURATION_S = 16
COUNTERS = ("continuity_scores_total", "continuity_responses_total",
            "continuity_governance_violations_total", "continuity_escalations_total",
            "continuity_erasures_total", "continuity_rejections_total")
SUMMARY = re.compile(r"^\[\s*(\d+):(\d\d)\] round (\d+): (\d+) records sent at \d+/s, "
                     r"(\d+) processed by the worker")
EXPOSITION = re.compile(r'^  (continuity_\w+_total)\{\w+="(\w+)"\} (\d+)$')


@dataclass
class DemoRun:
    lines: list[str]
    stderr: str
    returncode: int
    last_metrics: str
    """The last /metrics page of the demo's worker that answered while the demo ran."""
    port: int
    """The demo worker's web port."""

    @property
    def text(self) -> str:
        """The whole output with wrapped lines joined, for phrases that may wrap."""
        return " ".join(" ".join(self.lines).split())

    def final_counts(self) -> dict[tuple[str, str], int]:
        start = self.lines.index("final counts read from the output topics, as the worker's "
                                 "/metrics shows them:")
        out = {}
        for line in self.lines[start + 1:]:
            m = EXPOSITION.match(line)
            if m is None:
                break
            out[m[1], m[2]] = int(m[3])
        return out


@pytest.fixture(scope="module")
def demo() -> Iterator[DemoRun]:
    port = free_loopback_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "demo", "--duration", str(DURATION_S),
         "--users", "2", "--rate", "400", "--web-port", str(port)],
        cwd=REPO, env=fast_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pages: list[str] = []
    done = threading.Event()

    def sample_metrics() -> None:
        while not done.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=1) as resp:
                    pages[:] = [resp.read().decode()]
            except (OSError, http.client.HTTPException):  # not up yet
                pass
            done.wait(0.2)

    sampler = threading.Thread(target=sample_metrics, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        done.set()
        proc.kill()
        sampler.join()
    run = DemoRun(out.splitlines(), err, proc.returncode, pages[0] if pages else "", port)
    yield run
    data = [x for x in run.lines if x.startswith("data and DuckDB file: ")]
    if data:
        shutil.rmtree(data[0].split(": ", 1)[1], ignore_errors=True)


def test_the_demo_runs_and_stops_by_itself_and_leaves_no_worker(demo: DemoRun) -> None:
    assert demo.returncode == 0, demo.stderr[-2000:]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", demo.port)) != 0, "a worker still holds the demo's port"


def test_traffic_still_flows_late_in_the_run(demo: DemoRun) -> None:
    summaries = []
    for i, line in enumerate(demo.lines):
        m = SUMMARY.match(line)
        if m is None:
            continue
        line = next(x for x in demo.lines[i + 1:] if x.startswith("  drift scores by tier:"))
        scores = sum(int(n) for n in re.findall(r"=(\d+)", line.split("(")[0]))
        summaries.append((int(m[1]) * 60 + int(m[2]), int(m[3]), int(m[4]), int(m[5]), scores))
    assert summaries, "\n".join(demo.lines)
    last = summaries[-1]
    assert last[0] >= DURATION_S - 6, summaries
    scored = [s for s in summaries if s[4] > 0]
    assert len(scored) >= 2 and scored[-1] is last, f"too few summaries with scores: {summaries}"
    _, _, sent, processed, scores = scored[0]
    assert last[2] > sent and last[3] > processed and last[4] > scores, summaries
    assert last[1] >= 3, f"the story was not retold: {summaries}"


def test_plain_output_fits_100_columns_without_escape_codes(demo: DemoRun) -> None:
    long = [x for x in demo.lines if len(x) > 100]
    assert not long
    assert not any("\x1b" in x for x in demo.lines)


def test_a_legend_says_what_responses_and_violations_mean_and_what_is_injected(
        demo: DemoRun) -> None:
    start = demo.lines.index("what the outputs mean:")
    text = " ".join(demo.lines[start:start + 40])
    for name in [a.value for a in Action] + [r.value for r in Rule]:
        assert f"  {name}: " in text, name
    assert "sent on purpose: every dead letter" in demo.text


def test_notable_events_carry_the_score_and_what_drove_it(demo: DemoRun) -> None:
    text = demo.text
    assert re.search(r"HOLD raised \S+: score \d\.\d\d \(high\), driven by "
                     r"(attunement|semantic|safety)_drift \d\.\d\d: \w", text), text[-3000:]
    assert re.search(r"(model re-attuned|re-attune failed) model_change_\w+-\d+: quality "
                     r"\d\.\d\d (>=|<) 0\.60 \(convergence \d\.\d\d", text)
    assert re.search(r"erasure verified governance-\d+: 2 targets \(attunement x\d+, "
                     r"semantic x\d+\)", text)
    assert "sent on purpose)" in text and "unexpected)" not in text


def test_the_final_counts_are_the_workers_metrics(demo: DemoRun) -> None:
    final = demo.final_counts()
    scraped: dict[tuple[str, str], int] = {}
    processed = 0
    for family in text_string_to_metric_families(demo.last_metrics):
        for s in family.samples:
            if s.name in COUNTERS and s.value:
                (label,) = s.labels.values()
                scraped[s.name, label] = int(s.value)
            if s.name in ("continuity_events_total", "continuity_rejections_total"):
                processed += int(s.value)
    assert final == scraped
    for metric in COUNTERS:
        if metric != "continuity_escalations_total":
            assert any(m == metric for m, _ in final), metric
    assert "/metrics agrees with every count above" in demo.lines
    sent = re.search(r"stopped after \d+:\d\d: (\d+) records sent", demo.text)
    assert sent is not None and int(sent[1]) == processed
    # The known case: a receipt per request, several targets each, counted per target.
    receipts = re.search(r"erasure receipts, one per request .*?: verified=(\d+)", demo.text)
    assert receipts is not None
    assert final["continuity_erasures_total", "verified"] > int(receipts[1]) > 0


def test_the_closing_lines_name_the_data_and_a_report_command_that_agrees(
        demo: DemoRun) -> None:
    data_line, report_line = demo.lines[-2:]
    assert data_line.startswith("data and DuckDB file: ")
    data_dir = Path(data_line.split(": ", 1)[1])
    assert (data_dir / "continuity.duckdb").exists()
    assert REPO not in data_dir.resolve().parents
    command = shlex.split(report_line.split(":", 1)[1])
    assert command[:2] == ["continuity-drift", "report"]
    assert Path(command[command.index("--data-dir") + 1]) == data_dir
    done = subprocess.run([sys.executable, "-m", "streams.cli", *command[1:], "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    store = json.loads(done.stdout)["store"]
    final = demo.final_counts()
    assert store["erasure_targets_by_outcome"] == {
        k: n for (m, k), n in final.items() if m == "continuity_erasures_total"}
    receipts = re.search(r"erasure receipts, one per request .*?: verified=(\d+)", demo.text)
    assert receipts is not None and store["erasure_requests"] == int(receipts[1])


def _decoded(story: Story, rounds: int) -> list[tuple[int, FhrEvent | Rejection]]:
    return [(k, decode_event(key, value)) for k in range(rounds)
            for key, value, _ in story.round_records(k)]


def test_later_rounds_retell_the_story_with_new_ids_and_later_event_time() -> None:
    story = Story.build(7, 1, 1.7e9)
    decoded = _decoded(story, 4)
    rejected = Counter(d.reason for _, d in decoded if isinstance(d, Rejection))
    assert rejected == {"invalid_json": 4, "out_of_range": 4, "key_mismatch": 4}
    events = [(k, e) for k, e in decoded if isinstance(e, FhrEvent)]
    ids = [e.event_id for _, e in events]
    assert len(ids) == len(set(ids))
    last: dict[str, float] = {}
    for _, e in events:
        assert e.ts_s >= last.get(e.user_id, 0.0), e
        last[e.user_id] = e.ts_s
    runner = MemoryReplay(DriftConfig())
    outputs = [(k, o) for k, e in events for o in runner.feed(e)]
    for k in range(4):
        actions = Counter(o.action for r, o in outputs if r == k and isinstance(o, Response))
        assert actions[Action.REBASELINE_REQUIRED] > 0 and actions[Action.REATTUNE_FAILED] > 0
        assert actions[Action.REATTUNE_COMPLETED] > 0, (k, actions)
        if k:
            assert actions[Action.HOLD_RELEASED] > 0, (k, actions)
        violations = [o for r, o in outputs if r == k and isinstance(o, Violation)]
        assert {(o.user_id.rsplit("-", 1)[0], o.rule) for o in violations} == {
            ("governance", Rule.BLOCKED_STATE), ("governance", Rule.UNCONFIRMED),
            ("model_change_undisclosed", Rule.MODEL_CHANGE_UNDISCLOSED)}, k
    stable = [[round(o.score, 6) for r, o in outputs if r == k and isinstance(o, DriftScore)
               and o.user_id == "stable-0000"] for k in (1, 2)]
    assert stable[0] and stable[0] != stable[1], "later rounds repeat the same numbers"


def test_the_live_screen_fits_the_terminal_up_to_100_columns() -> None:
    story = Story.build(7, 1, 1.7e9)
    runner = MemoryReplay(DriftConfig())
    tally = Tally()
    for _, e in _decoded(story, 2):
        if isinstance(e, FhrEvent):
            for out in runner.feed(e):
                tally.add(topics.OUTPUT_TOPICS[out.kind], encode(out), 10.0)
    metrics = Scrape({m: dict(c) for m, c in tally.counts.items()}, 3000)
    view = View(75.0, 1, 3000, 400.0, 1.7e9, tally, metrics)
    assert any(n.kind == "HOLD raised" for n in tally.notable)
    for width, height in ((80, 24), (100, 30), (160, 50)):
        buf = io.StringIO()
        console = Console(file=buf, width=width, height=height, color_system=None)
        console.print(live_screen(view, console, "metrics http://127.0.0.1:6066/metrics"))
        lines = buf.getvalue().splitlines()
        assert max(len(x) for x in lines) <= min(width, 100), buf.getvalue()
        assert len(lines) <= height, buf.getvalue()
        assert "same" in buf.getvalue()
        notables = [n for n in tally.notable if f"{n.user_id}: " in buf.getvalue()]
        assert notables and notables[-1] == tally.notable[-1], "the newest first"
    assert "score 1.00 (high), driven by" in buf.getvalue()
    assert max(len(x) for x in legend()) <= 100


def test_the_wait_for_a_worker_says_what_its_readyz_answers() -> None:
    """Before the traffic starts the demo waits on ``/readyz``; what it says while waiting is
    the worker's own reason (503 with its body), and None once it answers 200."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from streams.demo.run import readyz

    ready = threading.Event()

    class Readyz(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = (200, b'{"ready": true}') if ready.is_set() else (
                503, b'{"ready": false, "restoring": true}')
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    port = free_loopback_port()
    assert readyz(f"http://127.0.0.1:{port}/readyz") == "does not answer yet"
    server = ThreadingHTTPServer(("127.0.0.1", port), Readyz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{port}/readyz"
        assert readyz(url) == 'answers 503 {"ready": false, "restoring": true}'
        ready.set()
        assert readyz(url) is None
    finally:
        server.shutdown()
        server.server_close()
