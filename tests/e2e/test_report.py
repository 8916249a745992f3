"""The governance report as a person sees it: a simulated week through a real worker on the
embedded broker, ``continuity-drift report`` as a subprocess, the page in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from baselines.erasure import user_ref
from drift.model import BaselineKind, FhrEvent, MemoryWrite, Mode, SessionEnd
from drift.simulation import Scenario, SimParams, simulate
from streams import topics
from streams.broker import EmbeddedBroker
from tests.browser import (
    PageNumbers,
    Rendered,
    assert_numbers_are_the_twins,
    print_to_pdf,
    render,
)
from tests.builders import UserScript
from tests.conftest import (
    FAST,
    REPO,
    TOKEN,
    Broker,
    WorkerProcess,
    output_ids,
    wait_until,
)
from tests.e2e.outputs import published_ids, replay_ids

#: The simulated week ends today (UTC), so that dead letters, which are placed by the time the
#: worker published them, fall in it too; ten minutes before midnight it ends tomorrow.
TODAY = (int(time.time()) + 600) // 86400 * 86400
WEEK_START = TODAY - 6 * 86400 + 3600.0
SINCE = datetime.fromtimestamp(TODAY - 6 * 86400, UTC).date().isoformat()
UNTIL = datetime.fromtimestamp(TODAY, UTC).date().isoformat()
PLOTS = ("tiers", "components", "holds", "model_changes", "turns", "violations", "erasures",
         "dead_letters")
HELD, DOWNGRADED, GHOST, ERASED = "held-user", "downgrade-user", "ghost-user", "stable-0000"
#: Set to a directory (``docs``) to keep the screenshots this test takes.
SCREENSHOTS = os.environ.get("REPORT_SCREENSHOTS_DIR")


def _scripted_users() -> tuple[list[FhrEvent], list[FhrEvent]]:
    """Users the simulator has no scenario for, in two parts: a HOLD released, then (second
    part) an erasure; a downgrade to stateless after a HOLD; a stateless user who writes
    relational memory."""
    held = UserScript(HELD, ts=WEEK_START + 1800, seed=3)
    for i in range(2):
        held.session(f"{HELD}-s{i}")
    held.session(f"{HELD}-mismatch", gate="gate-2")
    held.session(f"{HELD}-next", gate="gate-2", end=False)
    held.reconfirm(f"{HELD}-next", *BaselineKind)
    first = len(held.events)
    held.erase(f"{HELD}-next", scope="all", request_id="held-erase-request-1")
    held.emit(f"{HELD}-next", SessionEnd(12, "closed"))
    held.ts += 86400
    held.session(f"{HELD}-after", gate="gate-2")
    down = UserScript(DOWNGRADED, ts=WEEK_START + 2400, seed=4)
    for i in range(3):
        down.session(f"{DOWNGRADED}-s{i}")
    down.session(f"{DOWNGRADED}-mismatch", gate="gate-2")
    down.session(f"{DOWNGRADED}-off", mode=Mode.STATELESS)
    ghost = UserScript(GHOST, ts=WEEK_START + 3000, seed=5)
    ghost.session(f"{GHOST}-s0", mode=Mode.STATELESS,
                  extra=[MemoryWrite(3, "relational", "style", "pref", "consent-1", True)])
    return held.events[:first] + down.events + ghost.events, held.events[first:]


def _versions_committed(worker: WorkerProcess, kind: str, version: int) -> bool:
    status, history = worker.get(f"/v1/users/{HELD}/baselines/history", TOKEN)
    return status == 200 and any(v["kind"] == kind and v["version"] >= version
                                  for v in history["versions"])


@dataclass
class Week:
    broker: Broker
    worker: WorkerProcess
    events: list[FhrEvent]
    work: Path

    def report(self, name: str, *args: str) -> tuple[Path, Path]:
        html, twin = self.work / f"{name}.html", self.work / f"{name}.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
        env["PYTHONWARNINGS"] = "ignore"
        done = subprocess.run(
            [sys.executable, "-m", "streams.cli", "report", "--broker", self.broker.bootstrap,
             "--since", SINCE, "--until", UNTIL, "--html", str(html), "--json", str(twin), *args],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "records read" in done.stderr
        return html, twin


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Week]:
    work = tmp_path_factory.mktemp("report")
    with EmbeddedBroker() as b:
        topics.create_topics(b.bootstrap, 4)
        broker = Broker(b.bootstrap)
        worker = WorkerProcess(b.bootstrap, work / "worker",
                               {k: dict(v) for k, v in FAST.items()}).start()
        try:
            events: list[FhrEvent] = []
            for evs, _ in simulate(11, list(Scenario), 3, WEEK_START, SimParams()):
                events.extend(evs)
            scripted, erasure = _scripted_users()
            events.extend(scripted)
            events.sort(key=lambda e: e.ts_s)
            broker.send_events(events)
            broker.send_raw(b"u-bad-key", b"{broken")
            broker.send_raw(b"u-bad-key", b'{"schema": "fhr/2"}')
            # The erasure goes in once the versions it erases are in DuckDB (the re-confirmed
            # safety baseline is the user's last write before it).
            wait_until(lambda: _versions_committed(worker, "safety", 2), 120,
                       "the held user's versions in the store")
            broker.send_events(erasure)
            events.extend(erasure)
            want = replay_ids(events)
            wait_until(lambda: all(published_ids(broker)[k] >= ids for k, ids in want.items()),
                       180, "every output of the simulated week")
            status, _ = worker.post(f"/v1/users/{ERASED}/erase", token=TOKEN)
            assert status == 200
            wait_until(lambda: len(output_ids(broker.read(topics.RECEIPTS))) >= 3
                       and len(broker.read(topics.DEADLETTER)) >= 2, 60,
                       "the erasure receipts and dead letters")
            yield Week(broker, worker, events, work)
        finally:
            worker.stop()
            broker.close()


def _nonzero(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_nonzero(v) for v in value.values())
    if isinstance(value, list):
        return sum(_nonzero(v) for v in value)
    return int(bool(value))


#: For each plot, where the twin keeps the numbers it draws (one mark per non-zero number).
DRAWN = {
    "tiers": lambda t: t["tiers_per_day"],
    "components": lambda t: {c: d["counts"] for c, d in t["components"].items()},
    "holds": lambda t: t["holds_per_day"],
    "model_changes": lambda t: t["model_changes_per_day"],
    "turns": lambda t: t["turns_to_baseline"],
    "violations": lambda t: t["violations_per_day"],
    "erasures": lambda t: t["erasures_by_reason"],
    "dead_letters": lambda t: t["dead_letters_by_reason"],
}


def _coloured_share(png: Path, box: tuple[int, int, int, int]) -> float:
    """The share of a region's pixels in a saturated colour (data marks; text and axes are grey)."""
    x, y, w, h = box
    pixels = np.asarray(Image.open(png).convert("RGB").crop((x, y, x + w, y + h)), dtype=int)
    saturation = pixels.max(axis=2) - pixels.min(axis=2)
    return float((saturation > 80).mean())


def _keep_screenshot(png: Path, name: str) -> None:
    if SCREENSHOTS:
        Image.open(png).convert("RGB").quantize(colors=256).save(
            Path(SCREENSHOTS) / name, optimize=True)


@pytest.fixture(scope="module")
def overview(week: Week) -> tuple[Rendered, dict[str, Any], str]:
    html, twin_path = week.report("overview")
    rendered = render(html, week.work / "overview.png", week.work)
    _keep_screenshot(rendered.png, "report-overview.png")
    return rendered, json.loads(twin_path.read_text()), html.read_text()


def test_the_overview_draws_every_plot_and_shows_the_twins_numbers(
        week: Week, overview: tuple[Rendered, dict[str, Any], str], tmp_path: Path) -> None:
    rendered, twin, html = overview
    keyed = PageNumbers()
    keyed.feed(rendered.dom)
    for plot in PLOTS:
        drawn = _nonzero(DRAWN[plot](twin))
        assert drawn > 0, f"the simulated week has nothing for {plot}"
        assert len(keyed.marks.get(plot, [])) == drawn, plot
        assert plot in rendered.plots, f"no {plot} figure laid out"
        assert _coloured_share(rendered.png, rendered.plots[plot]) > 0.004, \
            f"{plot} looks empty on screen"
    whole = np.asarray(Image.open(rendered.png).convert("L"), dtype=float)
    assert whole.std() > 10 and rendered.height > 2000, "the screenshot is blank"

    checked = assert_numbers_are_the_twins(rendered.dom, twin)
    assert checked > 150
    totals = twin["totals"]
    assert totals["holds_opened"] >= 1 and totals["holds_released"] >= 1
    assert totals["reattune_completed"] >= 1 and totals["reattune_failed"] >= 1
    assert twin["erasures_by_outcome"]["verified"] == 3
    assert set(twin["erasures_by_reason"]) == {"operator", "user_request", "mode_downgrade"}
    assert sum(twin["dead_letters_by_reason"].values()) == 2
    assert len(twin["days"]) == 7 and twin["days"][0] == SINCE and twin["days"][-1] == UNTIL

    review = {row["user_ref"]: row for row in twin["review"]}
    low = [user_ref(f"sustained_low-000{i}") for i in range(3)]
    assert all("sustained_low_reattune" in review[r]["reasons"] for r in low)
    assert all(review[r]["driver"] for r in low)
    held_mismatch = user_ref("safety_mismatch-0000")
    assert review[held_mismatch]["open_hold_since"] and review[held_mismatch]["driver"]
    assert user_ref(HELD) not in review, "a released HOLD is not open"
    assert user_ref(DOWNGRADED) not in html, "a user now in stateless mode is listed"
    assert twin["left_out"]["users_aggregate_only"] >= 2

    assert not re.search(r"<script|<link|\bsrc=|href=\"http", html), "the page loads something"
    pdf = print_to_pdf(week.work / "overview.html", tmp_path / "overview.pdf", tmp_path)
    assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page") >= 3


@dataclass
class DrillDowns:
    html: Path
    twin: dict[str, Any]
    rendered: Rendered
    without_api: Path
    hidden: Path
    hidden_twin: dict[str, Any]


@pytest.fixture(scope="module")
def drill_downs(week: Week) -> DrillDowns:
    api = ("--api", week.worker.url, "--token", TOKEN)
    with ThreadPoolExecutor() as pool:  # three independent reads of the same topics
        user = pool.submit(week.report, "user", "--user", HELD, *api)
        no_api = pool.submit(week.report, "user-no-api", "--user", HELD)
        downgraded = pool.submit(week.report, "downgraded", "--user", DOWNGRADED, *api)
        (html, twin_path), (without_api, _) = user.result(), no_api.result()
        hidden, hidden_twin = downgraded.result()
    rendered = render(html, week.work / "user.png", week.work)
    _keep_screenshot(rendered.png, "report-user.png")
    return DrillDowns(html, json.loads(twin_path.read_text()), rendered, without_api, hidden,
                      json.loads(hidden_twin.read_text()))


def test_a_drill_down_shows_versions_scores_holds_and_receipts_under_the_ref(
        week: Week, drill_downs: DrillDowns) -> None:
    twin, rendered = drill_downs.twin, drill_downs.rendered
    page = drill_downs.html.read_text()
    assert twin["user_ref"] == user_ref(HELD) and user_ref(HELD) in page
    status, history = week.worker.get(f"/v1/users/{HELD}/baselines/history", TOKEN)
    assert status == 200
    assert len(twin["versions"]) == len(history["versions"]) > 0
    assert len(twin["tombstones"]) == len(history["tombstones"]) > 0
    assert "attunement" in {t["kind"] for t in twin["tombstones"]}
    assert page.count("<tr>", page.index('id="versions-table"')) >= len(twin["versions"])
    assert [h["change"] for h in twin["holds"]] == ["opened", "released"]
    assert [r["reason"] for r in twin["receipts"]] == ["user_request"]
    assert twin["receipts"][0]["outcome"] == "verified"
    assert [s["session"] for s in twin["sessions"]] == list(range(1, len(twin["sessions"]) + 1))
    assert any(s["tier"] == "high" for s in twin["sessions"])

    keyed = PageNumbers()
    keyed.feed(rendered.dom)
    drawn = {m.split("-data-")[1] for m in keyed.marks.get("user_scores", [])}
    assert {p["tier"] for p in twin["points"]} <= drawn and "reattune_quality" in drawn
    assert _coloured_share(rendered.png, rendered.plots["user_scores"]) > 0.002
    assert_numbers_are_the_twins(rendered.dom, twin)

    assert 'id="versions-need-api"' in drill_downs.without_api.read_text()
    hidden = drill_downs.hidden_twin
    assert hidden["shown"] is False and hidden["sessions"] == []
    assert hidden["receipts"] == [] and hidden["baselines_source"] == "not_shown"
    assert 'id="not-shown"' in drill_downs.hidden.read_text()
    assert "<svg" not in drill_downs.hidden.read_text()


def test_no_user_session_event_or_request_id_reaches_a_report(
        week: Week, overview: tuple[Rendered, dict[str, Any], str],
        drill_downs: DrillDowns) -> None:
    pages = [path.read_text() for name in ("overview", "user", "user-no-api", "downgraded")
             for path in (week.work / f"{name}.html", week.work / f"{name}.json")
             if path.exists()]
    assert len(pages) == 8
    secrets = {e.user_id for e in week.events} | {e.session_id for e in week.events}
    secrets |= {e.event_id for e in week.events} | {"held-erase-request-1", "u-bad-key"}
    secrets |= {f"{e.user_id}-c{i}" for e in week.events for i in range(4)}
    text = "\n".join(pages)
    assert sorted(s for s in secrets if s in text) == []
