"""The report's aggregation, its privacy rules and its page, on outputs of the real fold
(no broker: the messages are what a worker would publish, decoded as the report reads them)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import numpy as np
import pytest

from baselines.erasure import user_ref
from drift.baseline import UserBaselines
from drift.erasure import receipt
from drift.fold import initial, step
from drift.model import DriftConfig, FhrEvent, MemoryWrite, Mode
from drift.outputs import (
    Action,
    DriftScore,
    ErasureCommand,
    ErasureOutcome,
    ErasureResult,
    ErasureTarget,
    Escalation,
    Output,
    Response,
    Violation,
)
from drift.replay import MemoryReplay, replay
from drift.simulation import Scenario, simulate_user
from streams.edge.wire import encode
from streams.report.build import ReportRequest, build
from streams.report.evidence import shown_individually
from streams.report.messages import Outputs, outputs_from_values
from streams.report.overview import overview
from streams.report.user import user_report
from streams.report.window import Window, WindowError, parse_instant
from streams.topics import OUTPUT_TOPICS
from tests.browser import PageNumbers, assert_numbers_are_the_twins
from tests.builders import UserScript

START = 1_793_491_200.0  # 2026-11-01T00:00:00Z
WEEK = Window.of("2026-11-01", "2026-11-07", None, now_s=0.0)


def _week() -> tuple[list[FhrEvent], list[Output]]:
    rng = np.random.default_rng(17)
    events: list[FhrEvent] = []
    for i, scenario in enumerate(Scenario):
        for u in range(2):
            evs, _ = simulate_user(rng, scenario, f"{scenario.value}-{u}", START + 3600 * i)
            events.extend(evs)
    return events, replay(events, DriftConfig())


def _outputs(outs: list[Output], repeat: int = 1) -> Outputs:
    values: dict[str, list[bytes]] = {}
    for o in outs:
        values.setdefault(OUTPUT_TOPICS[o.kind], []).extend([encode(o)] * repeat)
    return outputs_from_values(values)


@pytest.fixture(scope="module")
def week() -> tuple[list[FhrEvent], list[Output]]:
    return _week()


def test_a_date_bounds_whole_days_and_a_time_bounds_itself() -> None:
    assert WEEK.since == "2026-11-01T00:00:00.000000Z"
    assert WEEK.until == "2026-11-08T00:00:00.000000Z" and len(WEEK.days()) == 7
    exact = Window.of("2026-11-01T06:00:00+02:00", "2026-11-01T12:30", None, now_s=0.0)
    assert (exact.since, exact.until) == ("2026-11-01T04:00:00.000000Z",
                                          "2026-11-01T12:30:00.000000Z")
    assert exact.days() == ("2026-11-01",)
    assert parse_instant("2026-11-01T00:00:00Z", end_of_day=True) == START
    with pytest.raises(WindowError, match="ISO 8601"):
        Window.of("last tuesday", None, None, now_s=0.0)
    with pytest.raises(WindowError, match="empty"):
        Window.of("2026-11-05", "2026-11-01T00:00", None, now_s=0.0)


def test_the_overview_counts_what_the_fold_published(week: tuple[list[FhrEvent], list[Output]]
                                                     ) -> None:
    _, outs = week
    view = overview(_outputs(outs), WEEK)
    scores = [o for o in outs if isinstance(o, DriftScore)]
    actions = Counter(o.action for o in outs if isinstance(o, Response))
    sessions: dict[tuple[str, str], int] = {}
    for s in scores:
        sessions[(s.user_id, s.session_id)] = max(sessions.get((s.user_id, s.session_id), 0),
                                                   int(s.tier))
    t = view.totals
    assert t.scores == len(scores) == view.components["continuity_drift_score"].n
    assert t.scored_sessions == len(sessions) == sum(sum(v) for v in view.tiers_per_day.values())
    assert t.sessions_high == sum(1 for tier in sessions.values() if tier == 2)
    assert t.holds_opened == actions[Action.REBASELINE_REQUIRED]
    assert t.model_changes == actions[Action.MODEL_CHANGE_NOTICE]
    assert (t.reattune_completed, t.reattune_failed) == (actions[Action.REATTUNE_COMPLETED],
                                                         actions[Action.REATTUNE_FAILED])
    assert t.escalations == sum(isinstance(o, Escalation) for o in outs) > 0
    rules = Counter(o.rule.value for o in outs if isinstance(o, Violation))
    assert {r: sum(v) for r, v in view.violations_per_day.items() if sum(v)} == dict(rules)
    assert sum(sum(v.values()) for v in view.turns_to_baseline.values()) == (
        t.reattune_completed + t.reattune_failed + sum(
            1 for o in outs if o.kind.value == "score" and not isinstance(o, DriftScore)))
    assert view.holds_open_at_end == t.holds_opened - t.holds_released
    listed = {r.user_ref for r in view.review}
    assert {user_ref(f"sustained_low-{u}") for u in range(2)} <= listed
    assert all(r.driver is not None for r in view.review)


def test_repeats_count_once_and_the_range_cuts(week: tuple[list[FhrEvent], list[Output]]
                                               ) -> None:
    _, outs = week
    once = overview(_outputs(outs), WEEK)
    twice = overview(_outputs(outs, repeat=2), WEEK)
    assert msgspec.to_builtins(twice.totals) == msgspec.to_builtins(once.totals)
    assert twice.left_out.duplicates_dropped == len(outs)
    first_days = overview(_outputs(outs), Window.of("2026-11-01", "2026-11-02", None, 0.0))
    assert first_days.totals.scores < once.totals.scores
    assert first_days.left_out.outputs_outside_range > 0
    assert len(first_days.days) == 2


def _replayed(*scripts: UserScript) -> Outputs:
    """The outputs a worker publishes for these users: the fold's, and a verified receipt for
    each erasure it asks of the store."""
    events = sorted((e for s in scripts for e in s.events), key=lambda e: e.ts_s)
    runner = MemoryReplay(DriftConfig())
    outs: list[Output] = []
    for e in events:
        done = step(runner.states.get(e.user_id) or initial(e.user_id),
                    runner.baselines.get(e.user_id, UserBaselines()), e, runner.config)
        runner.states[e.user_id], runner.baselines[e.user_id] = done.state, done.baselines
        outs.extend(done.effects.outputs)
        outs.extend(receipt(w, ErasureResult(w.request_id, tuple(
            ErasureTarget(k, None, 0, ErasureOutcome.VERIFIED) for k in w.kinds), False))
            for w in done.effects.writes if isinstance(w, ErasureCommand))
    return _outputs(outs)


def test_only_users_the_outputs_show_in_a_baselining_mode_are_listed() -> None:
    stays = UserScript("stays-full", ts=START, seed=1)
    leaves = UserScript("goes-stateless", ts=START, seed=2)
    back = UserScript("comes-back", ts=START, seed=3)
    ghost = UserScript("always-stateless", ts=START, seed=4)
    for script in (stays, leaves, back):
        for i in range(3):
            script.session(f"{script.user_id}-{i}")
    leaves.session("off", mode=Mode.STATELESS)
    back.session("off", mode=Mode.STATELESS)
    for i in range(4):
        back.session(f"again-{i}")
    ghost.session("g", mode=Mode.STATELESS,
                  extra=[MemoryWrite(2, "relational", "style", "s", "consent-1", True)])
    outputs = _replayed(stays, leaves, back, ghost)
    assert shown_individually(outputs, WEEK.until) == {"stays-full", "comes-back"}
    # before the downgrade the user who left was shown; their latest choice governs
    assert "goes-stateless" in shown_individually(outputs, outputs.receipts[0].event_ts)
    page = user_report(outputs, WEEK, "goes-stateless", None)
    assert not page.shown and page.sessions == () and page.receipts == ()
    view = overview(outputs, WEEK)
    assert view.left_out.users_aggregate_only == 2
    assert view.totals.violations == 1 and view.totals.erasures == 2


def test_every_number_on_the_page_is_the_twins_and_no_id_is_on_it(
        week: tuple[list[FhrEvent], list[Output]], tmp_path: Path) -> None:
    events, outs = week
    outputs = _outputs(outs)
    html, twin = tmp_path / "r.html", tmp_path / "r.json"
    build(ReportRequest("broker:9092", html, twin, "2026-11-01", "2026-11-07"), outputs=outputs)
    page, data = html.read_text(), msgspec.json.decode(twin.read_bytes())
    assert assert_numbers_are_the_twins(page, data) > 100
    marks = PageNumbers()
    marks.feed(page)
    assert set(marks.marks) >= {"tiers", "components", "holds", "model_changes", "turns",
                                "violations"}
    user = "model_change_collapsed-0"
    build(ReportRequest("broker:9092", html, twin, "2026-11-01", "2026-11-07", user=user),
          outputs=outputs)
    drill, drill_twin = html.read_text(), msgspec.json.decode(twin.read_bytes())
    assert drill_twin["shown"] and drill_twin["model_changes"][0]["outcome"] == "failed"
    assert_numbers_are_the_twins(drill, drill_twin)
    assert 'id="versions-need-api"' in drill
    everything = page + drill + twin.read_text()
    ids = {e.user_id for e in events} | {e.session_id for e in events} | {
        e.event_id for e in events}
    assert sorted(i for i in ids if i in everything) == []
