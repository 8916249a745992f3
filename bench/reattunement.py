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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Run as a script (python bench/reattunement.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.reattunement_figures import (
    MODES,
    ModeFigures,
    SessionRecord,
    UserRecord,
    checks,
    figures_for,
    report,
    to_json,
)
from drift.model import DriftConfig, Mode
from drift.outputs import Output, OutputKind
from drift.replay import MemoryReplay
from drift.simulation import Scenario, SimParams, simulate_user
from streams.edge.wire import payload

START_TS = 1.7e9
DEFAULT_SEED = 20261130
DEFAULT_USERS = 1000
QUICK_USERS = 150
CHUNK = 50
SCENARIOS = (Scenario.MODEL_CHANGE_HEALTHY, Scenario.MODEL_CHANGE_COLLAPSED,
             Scenario.MODEL_CHANGE_UNDISCLOSED, Scenario.SUSTAINED_LOW, Scenario.STABLE)
LOW_SESSIONS = 4
LOW_STREAKS = 2


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
