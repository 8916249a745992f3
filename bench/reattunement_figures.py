"""The figures of ``bench/reattunement.py`` per mode (:class:`ModeFigures`, from the users'
session records), the checks against the goals, and what it prints and writes."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bench.rates import Check, Rate
from drift.model import DriftConfig, Mode
from drift.simulation import Scenario

MODES = (Mode.FULL, Mode.LIGHT)
GOAL = 0.95


@dataclass(frozen=True)
class SessionRecord:
    """What the fold said about one session of one user, beside its ground truth."""

    session_id: str
    phase: str
    expected: str
    model_changed: bool
    notice_shown: bool
    quality: float | None
    turns_to_baseline: int | None
    outcome: str | None
    undisclosed: int
    escalations: int
    notices: int


@dataclass(frozen=True)
class UserRecord:
    mode: str
    scenario: str
    user_id: str
    sessions: tuple[SessionRecord, ...]


def expected_escalations(sessions: Sequence[SessionRecord], threshold: float, streak_len: int
                         ) -> list[int]:
    """Escalations per session that the sustained-low rule demands, from the scores.

    >>> def s(q):
    ...     return SessionRecord("s", "test", "", False, False, q, None, None, 0, 0, 0)
    >>> expected_escalations([s(0.1), s(0.2), s(None), s(0.3), s(0.1), s(0.9), s(0.1)],
    ...                      0.6, 3)
    [0, 0, 0, 1, 0, 0, 0]
    """
    out = []
    streak, armed = 0, True
    for s in sessions:
        fire = 0
        if s.quality is not None:
            if s.quality >= threshold:
                streak, armed = 0, True
            else:
                streak += 1
                if streak >= streak_len and armed:
                    fire, armed = 1, False
        out.append(fire)
    return out


@dataclass
class ModeFigures:
    """Everything measured for one mode."""

    mode: str
    healthy_completed: Rate = field(default_factory=lambda: Rate(0, 0))
    collapsed_failed: Rate = field(default_factory=lambda: Rate(0, 0))
    undisclosed_violated: Rate = field(default_factory=lambda: Rate(0, 0))
    undisclosed_exactly_one: Rate = field(default_factory=lambda: Rate(0, 0))
    disclosed_false_violations: Rate = field(default_factory=lambda: Rate(0, 0))
    unchanged_false_violations: Rate = field(default_factory=lambda: Rate(0, 0))
    unchanged_false_notices: Rate = field(default_factory=lambda: Rate(0, 0))
    streak_exactly_one: Rate = field(default_factory=lambda: Rate(0, 0))
    streak_two_or_more: Rate = field(default_factory=lambda: Rate(0, 0))
    escalation_position: dict[int, int] = field(default_factory=dict)
    escalations_outside_streaks: int = 0
    rule_conformance: Rate = field(default_factory=lambda: Rate(0, 0))
    control_escalated_users: Rate = field(default_factory=lambda: Rate(0, 0))
    control_low: Rate = field(default_factory=lambda: Rate(0, 0))
    ttb: dict[str, dict[str, int]] = field(default_factory=dict)
    quality: dict[str, dict[str, float]] = field(default_factory=dict)
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)


def _test(user: UserRecord) -> list[SessionRecord]:
    return [s for s in user.sessions if s.phase == "test"]


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    qs = np.quantile(np.asarray(values), [0.05, 0.25, 0.5, 0.75, 0.95])
    return {k: float(v) for k, v in zip(("p5", "p25", "p50", "p75", "p95"), qs)}


def _ttb_key(ttb: int | None) -> str:
    return "null" if ttb is None else str(ttb)


def figures_for(mode: Mode, users: Sequence[UserRecord], config: DriftConfig) -> ModeFigures:
    f = ModeFigures(mode.value)
    by_scenario: dict[str, list[UserRecord]] = {}
    for u in users:
        by_scenario.setdefault(u.scenario, []).append(u)

    def change_sessions(scenario: Scenario) -> list[SessionRecord]:
        return [s for u in by_scenario.get(scenario.value, []) for s in _test(u)]

    healthy = change_sessions(Scenario.MODEL_CHANGE_HEALTHY)
    collapsed = change_sessions(Scenario.MODEL_CHANGE_COLLAPSED)
    undisclosed = change_sessions(Scenario.MODEL_CHANGE_UNDISCLOSED)
    control = change_sessions(Scenario.STABLE)
    f.healthy_completed = Rate(sum(s.outcome == "reattune_completed" for s in healthy),
                               len(healthy))
    f.collapsed_failed = Rate(sum(s.outcome == "reattune_failed" for s in collapsed),
                              len(collapsed))
    f.undisclosed_violated = Rate(sum(s.undisclosed > 0 for s in undisclosed), len(undisclosed))
    f.undisclosed_exactly_one = Rate(sum(s.undisclosed == 1 for s in undisclosed),
                                     len(undisclosed))
    disclosed = healthy + collapsed
    f.disclosed_false_violations = Rate(sum(s.undisclosed > 0 for s in disclosed),
                                        len(disclosed))
    unchanged = [s for u in users for s in u.sessions if not s.model_changed]
    f.unchanged_false_violations = Rate(sum(s.undisclosed > 0 for s in unchanged),
                                        len(unchanged))
    f.unchanged_false_notices = Rate(sum(s.notices > 0 for s in unchanged), len(unchanged))
    scored_control = [s for s in control if s.quality is not None]
    f.control_low = Rate(sum(s.quality is not None and s.quality < config.reattune_threshold
                             for s in scored_control), len(scored_control))

    for label, group in (("healthy", healthy), ("collapsed", collapsed),
                         ("undisclosed", undisclosed), ("stable", control)):
        f.ttb[label] = dict(sorted(Counter(_ttb_key(s.turns_to_baseline) for s in group
                                           if s.quality is not None).items(),
                                   key=lambda kv: (kv[0] == "null", kv[0])))
        f.quality[label] = _quantiles([s.quality for s in group if s.quality is not None])
        f.outcomes[label] = dict(Counter(str(s.outcome) for s in group))

    exactly, twice, streaks, outside = 0, 0, 0, 0
    position: Counter[int] = Counter()
    conform, users_n = 0, 0
    for u in by_scenario.get(Scenario.SUSTAINED_LOW.value, []):
        groups: list[list[SessionRecord]] = [[]]
        for s in _test(u):
            if s.expected == "rearm":
                outside += s.escalations
                groups.append([])
            else:
                groups[-1].append(s)
        outside += sum(s.escalations for s in u.sessions if s.phase != "test")
        for g in groups:
            streaks += 1
            count = sum(s.escalations for s in g)
            exactly += count == 1
            twice += count >= 2
            for i, s in enumerate(g, start=1):
                if s.escalations:
                    position[i] += s.escalations
    for u in users:
        users_n += 1
        expected = expected_escalations(u.sessions, config.reattune_threshold,
                                        config.sustained_low_sessions)
        conform += expected == [s.escalations for s in u.sessions]
    f.streak_exactly_one = Rate(exactly, streaks)
    f.streak_two_or_more = Rate(twice, streaks)
    f.escalation_position = dict(sorted(position.items()))
    f.escalations_outside_streaks = outside
    f.rule_conformance = Rate(conform, users_n)
    controls = by_scenario.get(Scenario.STABLE.value, [])
    f.control_escalated_users = Rate(
        sum(any(s.escalations for s in u.sessions) for u in controls), len(controls))
    return f


def checks(figures: Sequence[ModeFigures]) -> list[Check]:
    out = []
    for f in figures:
        m = f.mode
        h, c = f.healthy_completed, f.collapsed_failed
        out.append(Check(f"{m}: healthy re-attunements completed >= 95% (CI lower bound)",
                         h.n > 0 and h.ci[0] >= GOAL, h.text()))
        out.append(Check(f"{m}: collapsed re-attunements failed >= 95% (CI lower bound)",
                         c.n > 0 and c.ci[0] >= GOAL, c.text()))
        u = f.undisclosed_exactly_one
        out.append(Check(f"{m}: every undisclosed change has one model_change_undisclosed",
                         u.n > 0 and u.k == u.n, u.text()))
        d = f.disclosed_false_violations
        out.append(Check(f"{m}: no violation where the notice was shown", d.k == 0, d.text()))
        v, n = f.unchanged_false_violations, f.unchanged_false_notices
        out.append(Check(f"{m}: no notice or violation without a model change",
                         v.k == 0 and n.k == 0, f"violations {v.text()}, notices {n.text()}"))
        r = f.rule_conformance
        out.append(Check(f"{m}: escalations exactly where the sustained-low rule puts them",
                         r.n > 0 and r.k == r.n, f"users {r.text()}"))
        t = f.streak_two_or_more
        out.append(Check(f"{m}: never two escalations in one streak, none outside",
                         t.k == 0 and f.escalations_outside_streaks == 0,
                         f"streaks with 2+: {t.text()}, outside: "
                         f"{f.escalations_outside_streaks}"))
        s = f.control_escalated_users
        out.append(Check(f"{m}: no escalation of a stable user", s.k == 0, s.text()))
    return out


def command(args: argparse.Namespace) -> str:
    parts = ["python bench/reattunement.py", f"--users {args.users}", f"--seed {args.seed}"]
    if args.modes != [m.value for m in MODES]:
        parts.append("--modes " + ",".join(args.modes))
    return " ".join(parts)


def _hist_text(hist: dict[str, int]) -> str:
    n = sum(hist.values())
    return ", ".join(f"{k}: {v} ({100 * v / n:.1f}%)" for k, v in hist.items()) if n else "-"


def _q_text(q: dict[str, float]) -> str:
    return " / ".join(f"{q[k]:.3f}" for k in ("p5", "p25", "p50", "p75")) if q else "-"


def report(figures: Sequence[ModeFigures], args: argparse.Namespace, elapsed_s: float,
           config: DriftConfig) -> list[str]:
    lines = [
        (f"Re-attunement after a model change (seed {args.seed}; {args.users} users per "
         f"scenario and mode; three 12-turn baseline sessions each; threshold "
         f"{config.reattune_threshold:g}, checkpoint turn {config.reattune_checkpoint_turn}, "
         f"window {config.reattune_window}, tolerance level "
         f"{config.reattune_tolerance_level:g})"),
        "",
        ("| mode | healthy: completed | collapsed: failed | undisclosed: violation "
         "| disclosed: false violation | sustained low: one escalation per streak "
         "| rule conformance (users) |"),
        "|" + "---|" * 7,
    ]
    for f in figures:
        lines.append(
            f"| {f.mode} | {f.healthy_completed.text()} | {f.collapsed_failed.text()} "
            f"| {f.undisclosed_violated.text()} | {f.disclosed_false_violations.text()} "
            f"| {f.streak_exactly_one.text()} | {f.rule_conformance.text()} |")
    lines += ["", ("reattune_turns_to_baseline (sessions with a score; null = never within "
                   "tolerance by the checkpoint) and quality p5 / p25 / p50 / p75:"), "",
              "| mode | sessions | turns_to_baseline | quality |", "|---|---|---|---|"]
    for f in figures:
        for label in ("healthy", "collapsed", "undisclosed", "stable"):
            lines.append(f"| {f.mode} | {label} | {_hist_text(f.ttb.get(label, {}))} "
                         f"| {_q_text(f.quality.get(label, {}))} |")
    lines += ["", "turns_to_baseline shares with Wilson 95% intervals:", ""]
    for f in figures:
        for label in ("healthy", "collapsed"):
            hist = f.ttb.get(label, {})
            n = sum(hist.values())
            cells = ", ".join(f"{k}: {Rate(v, n).text()}" for k, v in hist.items())
            lines.append(f"- {f.mode} {label}: {cells}")
    lines += ["", ("Sustained low (two streaks of four low sessions per user, split by one "
                   "session from the user's own process):"), ""]
    for f in figures:
        pos = ", ".join(f"session {k} of the streak: {v}" for k, v in
                        f.escalation_position.items())
        lines.append(
            f"- {f.mode}: exactly one escalation in {f.streak_exactly_one.text()} of streaks, "
            f"two or more in {f.streak_two_or_more.k}, outside a streak "
            f"{f.escalations_outside_streaks}; where: {pos}; stable users escalated: "
            f"{f.control_escalated_users.text()}; stable sessions below the threshold: "
            f"{f.control_low.text()}")
    lines.append("")
    for c in checks(figures):
        lines.append(f"{'PASS' if c.passed else 'FAIL'}  {c.name}: {c.detail}")
    lines += ["", f"Reproduce: {command(args)}   ({elapsed_s:.0f} s, {args.workers} workers)"]
    return lines


def to_json(figures: Sequence[ModeFigures], args: argparse.Namespace, elapsed_s: float,
            config: DriftConfig) -> dict[str, Any]:
    modes = []
    for f in figures:
        d: dict[str, Any] = {}
        for k, v in asdict(f).items():
            d[k] = v
        for name in ("healthy_completed", "collapsed_failed", "undisclosed_violated",
                     "undisclosed_exactly_one", "disclosed_false_violations",
                     "unchanged_false_violations", "unchanged_false_notices",
                     "streak_exactly_one", "streak_two_or_more", "rule_conformance",
                     "control_escalated_users", "control_low"):
            d[name] = getattr(f, name).as_dict()
        d["ttb_shares"] = {label: {k: Rate(v, sum(h.values())).as_dict() for k, v in h.items()}
                           for label, h in f.ttb.items()}
        modes.append(d)
    return {
        "command": command(args), "seed": args.seed, "users": args.users,
        "elapsed_s": elapsed_s,
        "config": {k: v for k, v in asdict(config).items()
                   if k.startswith("reattune_") or k in ("sustained_low_sessions",
                                                          "late_profile_turns")},
        "modes": modes,
        "checks": [asdict(c) for c in checks(figures)],
    }
