"""The per-user drill-down of the governance report: pure, over decoded outputs.

:func:`user_report` gathers one user's outputs in a range: scores over sessions,
holds, model changes and re-attunement, violations, escalations and erasure
receipts, and the baseline versions the review API gave (without values). The
user is named by ``baselines.erasure.user_ref`` only; sessions by their order in
the range, never their ids; events, requests and commitments not at all (their
ids are chosen upstream and may embed a user id). A user the outputs do not show
in a baselining mode (:func:`streams.report.evidence.shown_individually`) gets a page
that says so and nothing else.

>>> import numpy as np
>>> from drift.model import DriftConfig
>>> from drift.replay import replay
>>> from drift.simulation import Scenario, simulate_user
>>> from streams.report.messages import outputs_of
>>> from streams.report.window import Window
>>> events, _ = simulate_user(np.random.default_rng(5), Scenario.SAFETY_MISMATCH, "u", 1.7e9)
>>> window = Window.of("2023-11-14", "2023-11-20", None, now_s=0.0)
>>> page = user_report(outputs_of(replay(events, DriftConfig())), window, "u", None)
>>> page.shown, [s.tier for s in page.sessions], page.hold_open
(True, ['medium', 'low', 'high'], True)
>>> [(h.change, h.kinds) for h in page.holds], page.baselines_source
([('opened', ('safety',))], 'not_asked')
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from baselines.erasure import user_ref
from drift.outputs import Action
from streams.report.evidence import TIER_RANK, Driver, holds_at, shown_individually
from streams.report.messages import BaselineHistory, DriftScoreMsg, Outputs
from streams.report.window import Window


# One frozen row class per table of the page: the JSON twin names each column by its field, so
# rows alike in form (here, in the overview, in drift's events and outputs) stay classes.
@dataclass(frozen=True, slots=True)
class ScorePoint:
    session: int
    turn: int
    checkpoint: str
    score: float
    tier: str


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One scored session, numbered by its order in the range (its id is never shown)."""

    session: int
    day: str
    scores: int
    max_score: float
    tier: str
    effective_tier: str
    driver: Driver
    baseline_version: int | None
    reattune_quality: float | None
    model_change: bool


@dataclass(frozen=True, slots=True)
class HoldRow:
    at: str
    change: str
    kinds: tuple[str, ...]
    score: float | None


@dataclass(frozen=True, slots=True)
class ModelChangeRow:
    at: str
    previous_model: str
    model: str
    outcome: str
    reattune_quality: float | None
    turns_to_baseline: int | None


@dataclass(frozen=True, slots=True)
class ViolationRow:
    at: str
    rule: str
    reason: str


@dataclass(frozen=True, slots=True)
class EscalationRow:
    at: str
    kind: str
    sessions: int
    last_quality: float | None


@dataclass(frozen=True, slots=True)
class TargetRow:
    kind: str
    versions: int
    outcome: str


@dataclass(frozen=True, slots=True)
class ReceiptRow:
    at: str
    reason: str
    outcome: str
    targets: tuple[TargetRow, ...]


@dataclass(frozen=True, slots=True)
class VersionRow:
    """A baseline version as the review API lists it, without its values or source session."""

    kind: str
    version: int
    created_at: str
    model_version: str
    mode: str
    drift_policy_id: str
    expires_at: str


@dataclass(frozen=True, slots=True)
class TombstoneRow:
    kind: str
    version: int
    erased_at: str
    reason: str


@dataclass(frozen=True, slots=True)
class UserReport:
    """The drill-down page of one user and its JSON twin.

    ``baselines_source`` is ``api`` (``versions`` and ``tombstones`` are what a worker's
    review API answered), ``not_asked`` (no ``--api``) or ``not_shown`` (the user is not
    shown individually, so the API was not asked).
    """

    user_ref: str
    since: str
    until: str
    shown: bool
    mode: str | None
    hold_open: bool
    hold_since: str | None
    sessions: tuple[SessionRow, ...]
    points: tuple[ScorePoint, ...]
    thresholds: tuple[float, float]
    holds: tuple[HoldRow, ...]
    model_changes: tuple[ModelChangeRow, ...]
    violations: tuple[ViolationRow, ...]
    escalations: tuple[EscalationRow, ...]
    receipts: tuple[ReceiptRow, ...]
    baselines_source: str
    versions: tuple[VersionRow, ...]
    tombstones: tuple[TombstoneRow, ...]


def _at(ts: str) -> str:
    """Event time to the minute, as the page shows it: ``2026-11-08 09:30``."""
    return f"{ts[:10]} {ts[11:16]}"


def _api_at(value: Any) -> str:
    """A review API time (ISO 8601 text, or epoch seconds from an older worker) to the minute."""
    if isinstance(value, str) and len(value) >= 16:
        return _at(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%d %H:%M")
    return ""


def is_shown(outputs: Outputs, window: Window, user_id: str) -> bool:
    """Whether ``user_id`` may have a drill-down beyond the aggregates."""
    return user_id in shown_individually(outputs, window.until)


def user_report(outputs: Outputs, window: Window, user_id: str,
                history: BaselineHistory | None) -> UserReport:
    """The drill-down of ``user_id`` over ``window``; ``history`` from the review API or None."""
    ref = user_ref(user_id)
    if not is_shown(outputs, window, user_id):
        return UserReport(ref, window.since, window.until, False, None, False, None, (), (),
                          (0.5, 0.8), (), (), (), (), (), "not_shown", (), ())
    inside = window.contains
    mine = [s for s in outputs.scores if s.user_id == user_id and s.event_ts < window.until]
    mode = max(mine, key=lambda s: s.event_ts).mode if mine else None
    scores = sorted((s for s in mine if inside(s.event_ts)), key=lambda s: s.event_ts)
    thresholds = ((scores[-1].thresholds.medium, scores[-1].thresholds.high) if scores
                  else (0.5, 0.8))
    order: dict[str, int] = {}
    by_session: dict[str, list[DriftScoreMsg]] = defaultdict(list)
    for s in scores:
        order.setdefault(s.session_id, len(order) + 1)
        by_session[s.session_id].append(s)
    quality: dict[str, float] = {}
    for q in outputs.reattunes:
        if q.user_id == user_id and inside(q.event_ts):
            quality[q.session_id] = q.reattune_quality_score
    responses = sorted((r for r in outputs.responses if r.user_id == user_id
                        and inside(r.event_ts)), key=lambda r: r.event_ts)
    changed = {r.session_id for r in responses if r.action == Action.MODEL_CHANGE_NOTICE.value}
    for r in responses:
        if r.reattune_quality_score is not None:
            quality[r.session_id] = r.reattune_quality_score
    sessions = []
    for sid, group in by_session.items():
        top = max(group, key=lambda s: (s.continuity_drift_score, s.event_ts))
        att = top.attribution
        sessions.append(SessionRow(
            order[sid], group[0].event_ts[:10], len(group), round(top.continuity_drift_score, 4),
            max((s.tier for s in group), key=lambda t: TIER_RANK.get(t, 0)),
            max((s.effective_tier for s in group), key=lambda t: TIER_RANK.get(t, 0)),
            Driver.of(att),
            att.baseline.version if att.baseline else None,
            round(quality[sid], 4) if sid in quality else None, sid in changed))
    points = tuple(ScorePoint(order[s.session_id], s.turn, s.checkpoint,
                              round(s.continuity_drift_score, 4), s.tier) for s in scores)
    holds = tuple(HoldRow(_at(r.event_ts), "opened" if r.action == Action.REBASELINE_REQUIRED.value
                          else "released", r.hold_kinds or r.kinds,
                          round(r.score, 4) if r.score is not None else None)
                  for r in responses if r.action in (Action.REBASELINE_REQUIRED.value,
                                                     Action.HOLD_RELEASED.value))
    hold = holds_at((r for r in outputs.responses if r.user_id == user_id), window.until
                    ).get(user_id)
    return UserReport(
        user_ref=ref, since=window.since, until=window.until, shown=True, mode=mode,
        hold_open=hold is not None and hold.open,
        hold_since=_at(hold.since) if hold is not None and hold.open else None,
        sessions=tuple(sorted(sessions, key=lambda s: s.session)), points=points,
        thresholds=thresholds, holds=holds,
        model_changes=_model_changes(responses),
        violations=tuple(ViolationRow(_at(v.event_ts), v.rule, v.reason)
                         for v in sorted(outputs.violations, key=lambda v: v.event_ts)
                         if v.user_id == user_id and inside(v.event_ts)),
        escalations=tuple(EscalationRow(_at(e.event_ts), e.kind, e.sessions,
                                        round(e.last_quality, 4)
                                        if e.last_quality is not None else None)
                          for e in sorted(outputs.escalations, key=lambda e: e.event_ts)
                          if e.user_id == user_id and inside(e.event_ts)),
        receipts=tuple(ReceiptRow(_at(r.event_ts), r.reason, r.outcome,
                                  tuple(TargetRow(t.kind, t.versions, t.outcome)
                                        for t in r.targets))
                       for r in sorted(outputs.receipts, key=lambda r: r.event_ts)
                       if r.user_id == user_id and inside(r.event_ts)),
        baselines_source="api" if history is not None else "not_asked",
        versions=_versions(history), tombstones=_tombstones(history))


def _model_changes(responses: list[Any]) -> tuple[ModelChangeRow, ...]:
    """Each model change in range with how its re-attunement ended (``pending`` if not yet)."""
    out = []
    outcome = {r.session_id: r for r in responses
               if r.action in (Action.REATTUNE_COMPLETED.value, Action.REATTUNE_FAILED.value)}
    for r in responses:
        if r.action != Action.MODEL_CHANGE_NOTICE.value:
            continue
        done = outcome.get(r.session_id)
        out.append(ModelChangeRow(
            _at(r.event_ts), r.previous_model.model_version if r.previous_model else "",
            r.model.model_version if r.model else "",
            "pending" if done is None else done.action.removeprefix("reattune_"),
            round(done.reattune_quality_score, 4)
            if done is not None and done.reattune_quality_score is not None else None,
            done.reattune_turns_to_baseline if done is not None else None))
    return tuple(out)


def _versions(history: BaselineHistory | None) -> tuple[VersionRow, ...]:
    if history is None:
        return ()
    rows = [VersionRow(str(v.get("kind", "")), int(v.get("version", 0)),
                       _api_at(v.get("created_at")),
                       str((v.get("model") or {}).get("model_version", "")),
                       str(v.get("mode", "")), str(v.get("drift_policy_id", "")),
                       _api_at(v.get("expires_at")))
            for v in history.versions]
    return tuple(sorted(rows, key=lambda r: (r.kind, r.version)))


def _tombstones(history: BaselineHistory | None) -> tuple[TombstoneRow, ...]:
    if history is None:
        return ()
    rows = [TombstoneRow(str(t.get("kind", "")), int(t.get("version", 0)),
                         _api_at(t.get("erased_at")), str(t.get("reason", "")))
            for t in history.tombstones]
    return tuple(sorted(rows, key=lambda r: (r.kind, r.version)))
