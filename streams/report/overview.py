"""The governance report's overview: pure aggregation of the deployment's outputs over a range.

:func:`overview` turns decoded outputs (:class:`~streams.report.messages.Outputs`)
and an event-time :class:`Window` into an :class:`Overview`, the numbers both
the HTML page and its JSON twin show. Nothing here reads Kafka or a clock.

Who is shown on their own is :func:`streams.report.evidence.shown_individually`;
everyone else counts in the aggregates only.

>>> import numpy as np
>>> from drift.model import DriftConfig
>>> from drift.replay import replay
>>> from drift.simulation import Scenario, simulate_user
>>> from streams.report.messages import outputs_of
>>> events, _ = simulate_user(np.random.default_rng(5), Scenario.SAFETY_MISMATCH, "u", 1.7e9)
>>> outputs = outputs_of(replay(events, DriftConfig()))
>>> window = Window.of("2023-11-14", "2023-11-20", None, now_s=0.0)
>>> view = overview(outputs, window)
>>> view.days[:2], view.tiers_per_day["high"]
(('2023-11-14', '2023-11-15'), (0, 0, 0, 1, 0, 0, 0))
>>> view.totals.holds_opened, view.holds_open_at_end, view.review[0].reasons
(1, 1, ('open_hold',))
>>> view.review[0].user_ref == user_ref("u"), view.review[0].driver.component
(True, 'safety')
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from baselines.erasure import user_ref
from drift.outputs import Action, ErasureOutcome, Rule
from streams.report.evidence import (
    TIER_RANK,
    TIERS,
    Driver,
    HoldState,
    holds_at,
    shown_individually,
)
from streams.report.messages import DriftScoreMsg, Outputs
from streams.report.window import Window

#: The four distributions of the components plot, in the order shown.
COMPONENTS = ("continuity_drift_score", "attunement_drift", "semantic_drift", "safety_drift")
BINS = 20
NEVER = "never"


@dataclass(frozen=True, slots=True)
class Distribution:
    """A histogram over [0, 1] in ``BINS`` equal bins, and a few of its figures."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    n: int
    mean: float | None
    p50: float | None
    p95: float | None

    @staticmethod
    def of(values: list[float]) -> Distribution:
        edges = np.linspace(0.0, 1.0, BINS + 1)
        if not values:
            return Distribution(tuple(float(e) for e in edges), (0,) * BINS, 0, None, None, None)
        arr = np.clip(np.asarray(values, dtype=float), 0.0, 1.0)
        counts, _ = np.histogram(arr, bins=edges)
        p50, p95 = np.percentile(arr, [50, 95])
        return Distribution(tuple(round(float(e), 4) for e in edges),
                            tuple(int(c) for c in counts), len(values),
                            round(float(arr.mean()), 4), round(float(p50), 4),
                            round(float(p95), 4))


# The parts of the overview, each a frozen class: the JSON twin is their fields, by name.
@dataclass(frozen=True, slots=True)
class ReviewRow:
    """One user most in need of review, under their pseudonymous reference.

    ``score`` is the highest ``continuity_drift_score`` in range (or, with none in
    range, the user's latest before it) with what drove it.
    """

    user_ref: str
    reasons: tuple[str, ...]
    open_hold_since: str | None
    hold_kinds: tuple[str, ...]
    escalations: int
    reattune_failed: int
    last_reattune_quality: float | None
    scored_sessions: int
    score: float | None
    tier: str | None
    score_day: str | None
    driver: Driver | None
    baseline_version: int | None


@dataclass(frozen=True, slots=True)
class Totals:
    outputs: int
    scores: int
    scored_sessions: int
    sessions_high: int
    sessions_medium: int
    holds_opened: int
    holds_released: int
    model_changes: int
    reattune_completed: int
    reattune_failed: int
    escalations: int
    violations: int
    erasures: int
    erasures_verified: int
    dead_letters: int


@dataclass(frozen=True, slots=True)
class LeftOut:
    """What the report leaves out, counted, for its "left out" section."""

    users_with_outputs: int
    users_shown_individually: int
    users_aggregate_only: int
    outputs_outside_range: int
    duplicates_dropped: int
    undecodable: int


@dataclass(frozen=True, slots=True)
class Overview:
    """Everything the overview page and its JSON twin show, per day where it says so."""

    since: str
    until: str
    days: tuple[str, ...]
    totals: Totals
    thresholds: dict[str, float]
    tiers_per_day: dict[str, tuple[int, ...]]
    components: dict[str, Distribution]
    holds_per_day: dict[str, tuple[int, ...]]
    holds_open_at_end: int
    model_changes_per_day: dict[str, tuple[int, ...]]
    turns_to_baseline: dict[str, dict[str, int]]
    violations_per_day: dict[str, tuple[int, ...]]
    erasures_by_outcome: dict[str, int]
    erasures_by_reason: dict[str, dict[str, int]]
    dead_letters_by_reason: dict[str, int]
    review: tuple[ReviewRow, ...]
    review_total: int
    left_out: LeftOut


def _per_day(days: tuple[str, ...], keys: Iterable[str]) -> dict[str, list[int]]:
    return {k: [0] * len(days) for k in keys}


def _frozen(series: dict[str, list[int]]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v) for k, v in series.items()}


def _turns_key(turns: int | None) -> str:
    return NEVER if turns is None else str(turns)


def _ordered_turns(series: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    """Each series over the same categories: every turn from the lowest to the highest seen
    in any series, then ``never``."""
    numbers = sorted(int(k) for c in series.values() for k in c if k != NEVER)
    keys = [str(n) for n in range(min(numbers, default=1), max(numbers, default=0) + 1)]
    keys.append(NEVER)
    return {name: {k: c.get(k, 0) for k in keys} for name, c in series.items()}


@dataclass
class _UserFacts:
    best: DriftScoreMsg | None = None
    latest_before: DriftScoreMsg | None = None
    sessions: set[str] = field(default_factory=set)
    escalations: int = 0
    reattune_failed: int = 0
    quality: tuple[str, float] | None = None

    def saw_quality(self, ts: str, value: float | None) -> None:
        if value is not None and (self.quality is None or ts >= self.quality[0]):
            self.quality = (ts, value)


def overview(outputs: Outputs, window: Window, top: int = 20) -> Overview:
    """The overview of ``outputs`` over ``window``: see :class:`Overview`."""
    days = window.days()
    day_of = {d: i for i, d in enumerate(days)}
    inside = window.contains
    facts: dict[str, _UserFacts] = defaultdict(_UserFacts)
    users_seen: set[str] = set()
    outside = 0

    tiers = _per_day(days, TIERS)
    values: dict[str, list[float]] = {c: [] for c in COMPONENTS}
    session_tier: dict[tuple[str, str], tuple[str, int]] = {}
    latest: DriftScoreMsg | None = None
    for s in outputs.scores:
        if not inside(s.event_ts):
            outside += 1
            if s.event_ts < window.since:
                f = facts[s.user_id]
                if f.latest_before is None or s.event_ts >= f.latest_before.event_ts:
                    f.latest_before = s
            continue
        users_seen.add(s.user_id)
        if latest is None or s.event_ts >= latest.event_ts:
            latest = s
        values["continuity_drift_score"].append(s.continuity_drift_score)
        c = s.components
        for name, v in (("attunement_drift", c.attunement_drift),
                        ("semantic_drift", c.semantic_drift), ("safety_drift", c.safety_drift)):
            if v is not None:
                values[name].append(v)
        key = (s.user_id, s.session_id)
        rank = TIER_RANK.get(s.tier, 0)
        seen = session_tier.get(key)
        if seen is None or rank > seen[1]:
            session_tier[key] = (seen[0] if seen else s.event_ts[:10], rank)
        f = facts[s.user_id]
        f.sessions.add(s.session_id)
        if f.best is None or s.continuity_drift_score > f.best.continuity_drift_score or (
                s.continuity_drift_score == f.best.continuity_drift_score
                and s.event_ts >= f.best.event_ts):
            f.best = s
    for day, rank in session_tier.values():
        tiers[TIERS[rank]][day_of[day]] += 1

    turns: dict[str, Counter[str]] = {"after_model_change": Counter(),
                                      "without_model_change": Counter()}
    for q in outputs.reattunes:
        if inside(q.event_ts):
            users_seen.add(q.user_id)
            turns["without_model_change"][_turns_key(q.reattune_turns_to_baseline)] += 1
            facts[q.user_id].saw_quality(q.event_ts, q.reattune_quality_score)
        else:
            outside += 1

    holds = _per_day(days, ("opened", "released"))
    changes = _per_day(days, ("detected", "completed", "failed"))
    hold_series = {Action.REBASELINE_REQUIRED.value: "opened",
                   Action.HOLD_RELEASED.value: "released"}
    change_series = {Action.MODEL_CHANGE_NOTICE.value: "detected",
                     Action.REATTUNE_COMPLETED.value: "completed",
                     Action.REATTUNE_FAILED.value: "failed"}
    reattuned = (Action.REATTUNE_COMPLETED.value, Action.REATTUNE_FAILED.value)
    for r in outputs.responses:
        if not inside(r.event_ts):
            outside += 1
            continue
        users_seen.add(r.user_id)
        i = day_of[r.event_ts[:10]]
        if r.action in hold_series:
            holds[hold_series[r.action]][i] += 1
        elif r.action in change_series:
            changes[change_series[r.action]][i] += 1
            if r.action in reattuned:
                turns["after_model_change"][_turns_key(r.reattune_turns_to_baseline)] += 1
                facts[r.user_id].saw_quality(r.event_ts, r.reattune_quality_score)
                if r.action == Action.REATTUNE_FAILED.value:
                    facts[r.user_id].reattune_failed += 1

    escalations = 0
    for e in outputs.escalations:
        if inside(e.event_ts):
            users_seen.add(e.user_id)
            escalations += 1
            facts[e.user_id].escalations += 1
            facts[e.user_id].saw_quality(e.event_ts, e.last_quality)
        else:
            outside += 1

    violations = _per_day(days, (r.value for r in Rule))
    for vm in outputs.violations:
        if inside(vm.event_ts):
            users_seen.add(vm.user_id)
            violations.setdefault(vm.rule, [0] * len(days))[day_of[vm.event_ts[:10]]] += 1
        else:
            outside += 1

    by_outcome: Counter[str] = Counter({o.value: 0 for o in ErasureOutcome})
    by_reason: dict[str, Counter[str]] = defaultdict(Counter)
    for rc in outputs.receipts:
        if inside(rc.event_ts):
            users_seen.add(rc.user_id)
            by_outcome[rc.outcome] += 1
            by_reason[rc.reason][rc.outcome] += 1
        else:
            outside += 1

    dead: Counter[str] = Counter()
    for d in outputs.dead_letters:
        if inside(d.event_ts):
            dead[d.reason] += 1
        else:
            outside += 1

    eligible = shown_individually(outputs, window.until)
    hold_state = holds_at(outputs.responses, window.until)
    rows = _review_rows(facts, hold_state, eligible, window)
    per_reason = {reason: {o: c[o] for o in by_outcome if c[o]}
                  for reason, c in sorted(by_reason.items())}
    totals = Totals(
        outputs=sum(len(x) for x in (outputs.scores, outputs.reattunes, outputs.responses,
                                     outputs.escalations, outputs.violations, outputs.receipts,
                                     outputs.dead_letters)) - outside,
        scores=len(values["continuity_drift_score"]), scored_sessions=len(session_tier),
        sessions_high=sum(tiers["high"]), sessions_medium=sum(tiers["medium"]),
        holds_opened=sum(holds["opened"]), holds_released=sum(holds["released"]),
        model_changes=sum(changes["detected"]), reattune_completed=sum(changes["completed"]),
        reattune_failed=sum(changes["failed"]), escalations=escalations,
        violations=sum(sum(v) for v in violations.values()),
        erasures=sum(by_outcome.values()), erasures_verified=by_outcome["verified"],
        dead_letters=sum(dead.values()))
    shown = len(users_seen & eligible)
    read = outputs.read.values()
    return Overview(
        since=window.since, until=window.until, days=days, totals=totals,
        thresholds=({"medium": latest.thresholds.medium, "high": latest.thresholds.high}
                    if latest is not None else {"medium": 0.5, "high": 0.8}),
        tiers_per_day=_frozen(tiers),
        components={c: Distribution.of(values[c]) for c in COMPONENTS},
        holds_per_day=_frozen(holds),
        holds_open_at_end=sum(1 for h in hold_state.values() if h.open),
        model_changes_per_day=_frozen(changes),
        turns_to_baseline=_ordered_turns(turns),
        violations_per_day=_frozen(violations),
        erasures_by_outcome=dict(by_outcome), erasures_by_reason=per_reason,
        dead_letters_by_reason=dict(sorted(dead.items(), key=lambda kv: (-kv[1], kv[0]))),
        review=tuple(rows[:top]), review_total=len(rows),
        left_out=LeftOut(len(users_seen), shown, len(users_seen) - shown, outside,
                         sum(r.duplicates for r in read), sum(r.undecodable for r in read)))


def _review_rows(facts: dict[str, _UserFacts], holds: dict[str, HoldState],
                 eligible: set[str], window: Window) -> list[ReviewRow]:
    """Users shown individually with an open HOLD at the end of the range, a sustained-low
    escalation or a failed re-attunement in it; most in need first."""
    rows: list[tuple[tuple[int, int, int, float], ReviewRow]] = []
    for user in sorted(eligible):
        f = facts.get(user, _UserFacts())
        hold = holds.get(user)
        held = hold is not None and hold.open
        if not (held or f.escalations or f.reattune_failed):
            continue
        reasons = tuple(name for name, on in (("open_hold", held),
                                              ("sustained_low_reattune", f.escalations > 0),
                                              ("reattune_failed", f.reattune_failed > 0)) if on)
        s = f.best or f.latest_before
        att = s.attribution if s is not None else None
        row = ReviewRow(
            user_ref=user_ref(user), reasons=reasons,
            open_hold_since=hold.since[:10] if held and hold is not None else None,
            hold_kinds=hold.kinds if held and hold is not None else (),
            escalations=f.escalations, reattune_failed=f.reattune_failed,
            last_reattune_quality=round(f.quality[1], 4) if f.quality else None,
            scored_sessions=len(f.sessions),
            score=round(s.continuity_drift_score, 4) if s is not None else None,
            tier=s.tier if s is not None else None,
            score_day=s.event_ts[:10] if s is not None else None,
            driver=Driver.of(att) if att is not None else None,
            baseline_version=att.baseline.version if att is not None and att.baseline else None)
        rows.append(((int(held), f.escalations, f.reattune_failed, row.score or 0.0), row))
    rows.sort(key=lambda kr: (tuple(-x for x in kr[0]), kr[1].user_ref))
    return [r for _, r in rows]
