"""``continuity-drift report --html``: read the output topics, aggregate, render, write.

:func:`build` is the whole report in three timed steps (read, aggregate,
render), for the CLI and for ``bench/report.py``. The page and its JSON twin
come from the same aggregate, so they show the same numbers.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from streams.report.html import overview_page
from streams.report.html_user import user_page
from streams.report.messages import Outputs
from streams.report.overview import overview
from streams.report.read import baseline_history, read_outputs
from streams.report.user import is_shown, user_report
from streams.report.window import Window

SCHEMA = "continuity-report/1"
#: ``json_path`` that means standard output.
STDOUT = Path("-")


# Optional fields alike in form to streams.edge.formats' structs; these are the report's options.
@dataclass(frozen=True, slots=True)
class ReportRequest:
    """What to build: the overview, or with ``user`` one user's drill-down."""

    broker: str
    html_path: Path | None = None
    json_path: Path | None = None
    since: str | None = None
    until: str | None = None
    user: str | None = None
    api: str | None = None
    token: str | None = None
    top: int = 20


@dataclass(frozen=True, slots=True)
class Built:
    """What a build read, the range it covered and where its time went."""

    records: int
    window: Window
    read_s: float
    aggregate_s: float
    render_s: float
    html_bytes: int
    json_bytes: int

    def summary(self) -> str:
        return (f"report over {self.window.since[:16]} .. {self.window.until[:16]} UTC: "
                f"{self.records:,} records read in {self.read_s:.2f} s, aggregated in "
                f"{self.aggregate_s:.2f} s, rendered in {self.render_s:.2f} s")


def _source(request: ReportRequest, outputs: Outputs, now_s: float) -> dict[str, Any]:
    return {"broker": request.broker,
            "generated_at": datetime.fromtimestamp(now_s, UTC).isoformat(),
            "records": outputs.records,
            "topics": [{"topic": t, **msgspec.to_builtins(r)} for t, r in outputs.read.items()]}


def _as_json(parts: dict[str, Any]) -> dict[str, Any]:
    """The twin exactly as its file will hold it (the page reads its numbers from this)."""
    report = parts.pop("report")
    twin: dict[str, Any] = msgspec.json.decode(msgspec.json.encode({**parts, **{
        f: getattr(report, f) for f in report.__dataclass_fields__}}))
    return twin


def build(request: ReportRequest, outputs: Outputs | None = None,
          now_s: float | None = None) -> Built:
    """Build the report of ``request`` (from ``outputs`` when given, else from the broker)."""
    now = time.time() if now_s is None else now_s
    started = time.perf_counter()
    if outputs is None:
        outputs = read_outputs(request.broker)
    read_done = time.perf_counter()
    window = Window.of(request.since, request.until, outputs.latest_event_ts(), now)
    header = {"schema": SCHEMA, "kind": "user" if request.user is not None else "overview",
              "source": _source(request, outputs, now)}
    if request.user is not None:
        history = None
        if request.api and is_shown(outputs, window, request.user):
            history = baseline_history(request.api, request.token, request.user)
        page = user_report(outputs, window, request.user, history)
        twin = _as_json({**header, "report": page})
        aggregated = time.perf_counter()
        html = user_page(page, twin)
    else:
        view = overview(outputs, window, request.top)
        twin = _as_json({**header, "report": view})
        aggregated = time.perf_counter()
        html = overview_page(view, twin)
    twin_bytes = msgspec.json.format(msgspec.json.encode(twin), indent=1) + b"\n"
    rendered = time.perf_counter()
    if request.html_path is not None:
        request.html_path.write_text(html, encoding="utf-8")
    if request.json_path == STDOUT:
        sys.stdout.buffer.write(twin_bytes)
        sys.stdout.flush()
    elif request.json_path is not None:
        request.json_path.write_bytes(twin_bytes)
    return Built(outputs.records, window, read_done - started, aggregated - read_done,
                 rendered - aggregated, len(html.encode()), len(twin_bytes))
