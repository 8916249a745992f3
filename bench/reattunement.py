"""Re-attunement after a model change, and sustained-low escalation, on labelled streams.

Every simulated user goes through the real per-user fold (``drift.replay.MemoryReplay``,
no broker, no store): three 12-turn baseline sessions on model A, then the test
sessions of the scenario. Figures are read from the fold's outputs, per session:

* ``model_change_healthy``: the next session runs on model B, the notice is shown,
  and the dynamics are one turn SD off for the first turn only, then back to the
  user's own process. Goal: ``reattune_completed`` in >= 95% of sessions.
* ``model_change_collapsed``: model B, notice shown, the dynamics three turn SDs
  off for the whole session (full: trust, resonance, valence, plus tokens; light:
  tokens and latency, the features light may hold). Goal: ``reattune_failed`` in
  >= 95% of sessions.
* ``model_change_undisclosed``: model B, same process, no notice. Goal: one
  ``model_change_undisclosed`` violation in every session; none in any session
  where the notice was shown.
* ``sustained_low``: two streaks of four collapsed sessions, split by one session
  from the user's own process. Goal: exactly one ``sustained_low_reattune``
  escalation per streak, at the session where the rule (three consecutive scored
  sessions below the threshold, re-armed by one at or above it) puts it.
* ``stable``: a control; same model and process. No escalation, notice or violation.

Rates carry Wilson 95% intervals; a goal on a share is met when the interval's
lower bound clears it.

Run ``python bench/reattunement.py`` (about a minute on two cores), ``--users N``
per scenario and mode, ``--seed S``, ``--json`` to print the figures as JSON
(``--json PATH`` writes them to a file beside the table).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Run as a script (python bench/reattunement.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.rates import Check, Rate
from drift.model import DriftConfig, Mode
from drift.outputs import Output, OutputKind
from drift.replay import MemoryReplay
from drift.simulation import Scenario, SimParams, simulate_user
from streams.wire import payload

START_TS = 1.7e9
DEFAULT_SEED = 20261130
DEFAULT_USERS = 1000
QUICK_USERS = 150
CHUNK = 50
GOAL = 0.95
MODES = (Mode.FULL, Mode.LIGHT)
SCENARIOS = (Scenario.MODEL_CHANGE_HEALTHY, Scenario.MODEL_CHANGE_COLLAPSED,
             Scenario.MODEL_CHANGE_UNDISCLOSED, Scenario.SUSTAINED_LOW, Scenario.STABLE)
LOW_SESSIONS = 4
LOW_STREAKS = 2


# --------------------------------------------------------------------------- one user


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


def params_for(mode: Mode) -> SimParams:
    return SimParams(mode=mode, low_sessions=LOW_SESSIONS, low_streaks=LOW_STREAKS)


def run_user(mode: Mode, scenario: Scenario, seed: int, index: int, config: DriftConfig
             ) -> UserRecord:
    """Simulate one user, run the fold, and read each session's outcome off its outputs.

    The user's generator depends only on (seed, mode, scenario, index), so the
    figures do not depend on how the users are split across workers.
    """
    key = (MODES.index(mode), SCENARIOS.index(scenario), index)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))
    user_id = f"{scenario.value}-{mode.value}-{index:05d}"
    events, truth = simulate_user(rng, scenario, user_id, START_TS, params_for(mode))
    runner = MemoryReplay(config)
    by_session: dict[str, list[Output]] = {}
    for event in events:
        for out in runner.feed(event):
            by_session.setdefault(out.session_id, []).append(out)
    sessions = []
    for row in truth:
        outs = by_session.get(row.session_id, [])
        scored = [p for p in map(payload, outs) if "reattune_quality_score" in p]
        quality = ttb = outcome = None
        if scored:
            first = scored[0]
            quality = float(first["reattune_quality_score"])
            ttb = first["reattune_turns_to_baseline"]
            outcome = str(first.get("action", first.get("score_kind")))
        sessions.append(SessionRecord(
            row.session_id, row.phase, row.expected, row.model_changed, row.notice_shown,
            quality, ttb, outcome,
            undisclosed=sum(1 for o in outs if o.kind is OutputKind.VIOLATION
                            and payload(o)["rule"] == "model_change_undisclosed"),
            escalations=sum(1 for o in outs if o.kind is OutputKind.ESCALATION
                            and payload(o)["kind"] == "sustained_low_reattune"),
            notices=sum(1 for o in outs if o.kind is OutputKind.RESPONSE
                        and payload(o)["action"] == "model_change_notice"),
        ))
    return UserRecord(mode.value, scenario.value, user_id, tuple(sessions))


def run_chunk(task: tuple[Mode, Scenario, int, int, int, DriftConfig]) -> list[UserRecord]:
    mode, scenario, seed, start, count, config = task
    return [run_user(mode, scenario, seed, i, config) for i in range(start, start + count)]


# --------------------------------------------------------------------------- figures


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


# --------------------------------------------------------------------------- checks


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


# --------------------------------------------------------------------------- report


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


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace, config: DriftConfig) -> tuple[list[ModeFigures], float]:
    started = time.monotonic()
    modes = [Mode(m if m.startswith("continuity_") else f"continuity_{m}") for m in args.modes]
    tasks = [(mode, scenario, args.seed, start, min(CHUNK, args.users - start), config)
             for mode in modes for scenario in SCENARIOS
             for start in range(0, args.users, CHUNK)]
    if args.workers > 1:
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            chunks = pool.map(run_chunk, tasks)
    else:
        chunks = [run_chunk(t) for t in tasks]
    users = [u for chunk in chunks for u in chunk]
    figures = [figures_for(mode, [u for u in users if u.mode == mode.value], config)
               for mode in modes]
    return figures, time.monotonic() - started


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--users", type=int, default=None,
                   help=f"users per scenario and mode (default {DEFAULT_USERS})")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--quick", action="store_true", help=f"a smoke run ({QUICK_USERS} users)")
    p.add_argument("--modes", type=lambda s: [m.strip() for m in s.split(",") if m.strip()],
                   default=[m.value for m in MODES],
                   help="comma-separated continuity modes (default: full and light)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="print the figures as JSON instead of the table, or write them to PATH")
    args = p.parse_args(argv)
    if args.users is None:
        args.users = QUICK_USERS if args.quick else DEFAULT_USERS
    args.modes = [m if m.startswith("continuity_") else f"continuity_{m}" for m in args.modes]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    config = DriftConfig()
    figures, elapsed = run(args, config)
    if args.json == "-":
        print(json.dumps(to_json(figures, args, elapsed, config), indent=2))
    else:
        print("\n".join(report(figures, args, elapsed, config)))
        if args.json is not None:
            Path(args.json).write_text(
                json.dumps(to_json(figures, args, elapsed, config), indent=2) + "\n")
    return 0 if all(c.passed for c in checks(figures)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
