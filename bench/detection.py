"""Detection quality of the drift scoring, measured on labelled simulated streams.

Every simulated user goes through the real per-user fold (``drift.replay.MemoryReplay``,
no broker, no store): three 12-turn baseline sessions, then one test session that
either comes from the same process (the null rows) or changes it in a labelled way.
The figures are per test session and read from the ``drift.scores`` payloads
(``score_kind == "continuity_drift"``):

* ``own`` tier: the highest ``tier`` any score of the session had, i.e. what the
  scorer said about this session's own evidence;
* ``effective`` tier: the highest ``effective_tier``, which also includes a HOLD
  carried over from a baseline session that itself went high (SPEC section 4,
  tighten-only). On null rows the difference is the holds raised in the two
  scored baseline sessions, not new false alarms of the test session.

Beside ours, River's drift detectors run on the same streams (trust and
resonance_depth standardised by the user's baseline sessions, per checkpoint
window, exactly the inputs our test uses), warmed up on the baseline sessions,
with their thresholds tuned on stable users of a different seed to our own
per-session false-alarm rate.

Run ``python bench/detection.py`` (several minutes on two cores), ``--quick`` for a
smoke run, ``--json PATH`` to keep the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.rates import Rate
from drift.model import DriftConfig, Mode, Turn
from drift.replay import MemoryReplay
from drift.simulation import Scenario, SimParams, TruthRow, simulate_user
from streams.wire import payload

START_TS = 1.7e9
TIER_RANK = {"low": 0, "medium": 1, "high": 2}
DEFAULT_SEED = 20261130
DEFAULT_SESSIONS = 2000
QUICK_SESSIONS = 200
CHUNK = 50


def mean_text(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):4.1f}" if values else "   -"


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Row:
    """One line of the table: a scenario at one change size."""

    key: str
    scenario: Scenario
    mode: Mode
    shift_sd: float
    share: float
    users_factor: float
    null: bool
    river: bool
    label: str

    def params(self) -> SimParams:
        return SimParams(shift_sd=self.shift_sd, contradicted_share=self.share, mode=self.mode)

    def stream_code(self) -> int:
        """Seed component shared by every size of one scenario and mode.

        Rows of one scenario see the same users and the same noise, only the size of
        the change differs (common random numbers), so power is compared across sizes
        on equal footing.
        """
        return zlib.crc32(f"{self.scenario.value}/{self.mode.value}".encode())


def rows() -> list[Row]:
    out = [Row("stable", Scenario.STABLE, Mode.FULL, 0.0, 0.0, 3.0, True, True,
               "stable (same process)")]
    for sd in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0):
        out.append(Row(f"attunement_full_{sd:g}", Scenario.ATTUNEMENT_SHIFT, Mode.FULL, sd, 0.0,
                       1.0, sd == 0.0, True, f"attunement shift {sd:g} SD (full)"))
    for sd in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0):
        out.append(Row(f"attunement_light_{sd:g}", Scenario.ATTUNEMENT_SHIFT, Mode.LIGHT, sd,
                       0.0, 0.5, sd == 0.0, False, f"attunement shift {sd:g} SD (light)"))
    for share in (0.25, 0.5, 0.75, 1.0):
        out.append(Row(f"semantic_{share:g}", Scenario.SEMANTIC_CONTRADICTION, Mode.FULL, 0.0,
                       share, 0.5, False, False, f"semantic contradicted {share:g}"))
    out.append(Row("combined", Scenario.COMBINED, Mode.FULL, 1.5, 0.5, 1.0, False, False,
                   "combined 1.5 SD + 0.5 contradicted"))
    out.append(Row("safety", Scenario.SAFETY_MISMATCH, Mode.FULL, 0.0, 0.0, 0.25, False, False,
                   "safety mismatch (gate config)"))
    return out


def user_rng(seed: int, code: int, u: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, code, u]))


# --------------------------------------------------------------------------- our scorer


@dataclass(frozen=True)
class SessionOutcome:
    """What the scorer said about one test session (tiers as ranks 0/1/2, -1: no score)."""

    first_tier: int
    own_tier: int
    effective_tier: int
    first_medium_turn: int | None
    first_high_turn: int | None


def session_outcome(payloads: list[dict[str, Any]]) -> SessionOutcome:
    scores = [p for p in payloads if p.get("score_kind") == "continuity_drift"]
    first = [TIER_RANK[p["tier"]] for p in scores if p["checkpoint"] == "turn_5"]
    own = [TIER_RANK[p["tier"]] for p in scores]
    eff = [TIER_RANK[p["effective_tier"]] for p in scores]

    def first_turn(level: int) -> int | None:
        turns = [int(p["turn"]) for p in scores if TIER_RANK[p["tier"]] >= level]
        return min(turns) if turns else None

    return SessionOutcome(max(first, default=-1), max(own, default=-1), max(eff, default=-1),
                          first_turn(1), first_turn(2))


def standardised_core(events: Iterable[Any], truth: list[TruthRow], config: DriftConfig
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Trust and resonance_depth of the baseline and the test turns, in baseline SDs.

    The same reference our test uses: per checkpoint window, the recency-weighted
    mean of that window across the baseline sessions and the pooled within-window
    standard deviation. Returns ``(baseline (turns, 2), test (turns, 2))``.
    """
    turns: dict[str, list[tuple[float, float]]] = {}
    for event in events:
        if isinstance(event.body, Turn):
            turns.setdefault(event.session_id, []).append(
                (event.body.trust, event.body.resonance_depth))
    base_ids = [t.session_id for t in truth if t.phase == "baseline"]
    test_id = next(t.session_id for t in truth if t.phase == "test")

    def window_of(k: int) -> int:
        return min(k // config.checkpoint_every, config.windows - 1)

    sums = np.zeros((config.windows, 2))
    weights = np.zeros(config.windows)
    m2 = np.zeros(2)
    df = 0
    for age, sid in enumerate(reversed(base_ids)):
        x = np.asarray(turns[sid])
        w_idx = np.array([window_of(k) for k in range(len(x))])
        for w in range(config.windows):
            part = x[w_idx == w]
            if len(part) == 0:
                continue
            weight = config.recency_decay ** age
            sums[w] += weight * part.mean(axis=0)
            weights[w] += weight
            m2 += ((part - part.mean(axis=0)) ** 2).sum(axis=0)
            df += len(part) - 1
    mean = sums / np.maximum(weights, 1e-12)[:, None]
    sd = np.sqrt(np.maximum(m2 / max(df, 1), 1e-8))

    def z(sid: str) -> np.ndarray:
        x = np.asarray(turns[sid])
        w_idx = [window_of(k) for k in range(len(x))]
        return np.asarray((x - mean[w_idx]) / sd)

    base = np.concatenate([z(sid) for sid in base_ids])
    return base, z(test_id)


@dataclass
class UserResult:
    row: int
    outcome: SessionOutcome
    base_z: np.ndarray | None = None
    test_z: np.ndarray | None = None


def run_users(task: tuple[Row, int, int, int, int, DriftConfig]) -> list[UserResult]:
    """Simulate users ``start .. start+count`` of a row and run them through the fold."""
    row, row_index, seed, start, count, config = task
    out = []
    for u in range(start, start + count):
        rng = user_rng(seed, row.stream_code(), u)
        events, truth = simulate_user(rng, row.scenario, f"{row.key}-{u:05d}", START_TS,
                                      row.params())
        replay = MemoryReplay(config)
        payloads: list[dict[str, Any]] = []
        for event in events:
            payloads.extend(payload(o) for o in replay.feed(event))
        test_id = next(t.session_id for t in truth if t.phase == "test")
        outcome = session_outcome([p for p in payloads if p.get("session_id") == test_id])
        result = UserResult(row_index, outcome)
        if row.river:
            result.base_z, result.test_z = standardised_core(events, truth, config)
        out.append(result)
    return out


@dataclass
class RowFigures:
    row: Row
    n: int = 0
    first_medium: int = 0
    first_high: int = 0
    own_medium: int = 0
    own_high: int = 0
    eff_medium: int = 0
    eff_high: int = 0
    delays_medium: list[int] = field(default_factory=list)
    delays_high: list[int] = field(default_factory=list)

    def add(self, o: SessionOutcome) -> None:
        self.n += 1
        self.first_medium += o.first_tier >= 1
        self.first_high += o.first_tier >= 2
        self.own_medium += o.own_tier >= 1
        self.own_high += o.own_tier >= 2
        self.eff_medium += o.effective_tier >= 1
        self.eff_high += o.effective_tier >= 2
        if o.first_medium_turn is not None:
            self.delays_medium.append(o.first_medium_turn)
        if o.first_high_turn is not None:
            self.delays_high.append(o.first_high_turn)

    def rate(self, name: str) -> Rate:
        return Rate(int(getattr(self, name)), self.n)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.row.key, "label": self.row.label, "scenario": self.row.scenario.value,
            "mode": self.row.mode.value, "shift_sd": self.row.shift_sd,
            "contradicted_share": self.row.share, "null": self.row.null, "sessions": self.n,
        }
        for name in ("first_medium", "first_high", "own_medium", "own_high", "eff_medium",
                     "eff_high"):
            out[name] = self.rate(name).as_dict()
        out["mean_delay_medium_turns"] = (sum(self.delays_medium) / len(self.delays_medium)
                                          if self.delays_medium else None)
        out["mean_delay_high_turns"] = (sum(self.delays_high) / len(self.delays_high)
                                        if self.delays_high else None)
        return out


# --------------------------------------------------------------------------- River


@dataclass(frozen=True)
class DetectorSpec:
    """A River detector, the arguments it gets, and the one parameter that is tuned.

    Everything not in ``kwargs`` keeps River's documented default. ``more_sensitive``
    says which way along ``grid`` the detector fires more often; ``refine`` asks for
    a finer grid around the coarse choice.
    """

    key: str
    label: str
    param: str
    grid: tuple[float, ...]
    more_sensitive: str
    kwargs: tuple[tuple[str, Any], ...] = ()
    warm_window: bool = False
    refine: bool = False


def _kswin_grid() -> tuple[float, ...]:
    # The exact two-sample KS p-values at 5 against 5 samples are 0.0079, 0.079,
    # 0.357, ...: the grid brackets each, so every attainable behaviour is on it.
    fine = {0.0079, 0.0080, 0.0793, 0.0794, 0.357, 0.358}
    return tuple(sorted(fine | {float(x) for x in np.geomspace(1e-4, 0.5, 50)}))


def detector_specs() -> list[DetectorSpec]:
    adwin_grid = tuple(float(x) for x in np.geomspace(1e-6, 0.95, 41))
    return [
        DetectorSpec("page_hinkley", "PageHinkley (defaults; threshold tuned)", "threshold",
                     tuple(float(x) for x in np.arange(1.0, 61.0, 1.0)), "lower", refine=True),
        DetectorSpec("page_hinkley_down",
                     "PageHinkley (mode='down': told the direction; threshold tuned)",
                     "threshold", tuple(float(x) for x in np.arange(1.0, 61.0, 1.0)), "lower",
                     (("mode", "down"),), refine=True),
        DetectorSpec("adwin", "ADWIN (defaults, clock=32; delta tuned)", "delta", adwin_grid,
                     "higher"),
        DetectorSpec("adwin_clock1", "ADWIN (clock=1; delta tuned)", "delta", adwin_grid,
                     "higher", (("clock", 1),), refine=True),
        DetectorSpec("kswin", "KSWIN (window=baseline, window_size=41, stat_size=5; alpha tuned)",
                     "alpha", _kswin_grid(), "higher", (("window_size", 41), ("stat_size", 5)),
                     warm_window=True),
        DetectorSpec("kswin_stat10",
                     "KSWIN (window=baseline, window_size=46, stat_size=10; alpha tuned)",
                     "alpha", _kswin_grid(), "higher", (("window_size", 46), ("stat_size", 10)),
                     warm_window=True),
        DetectorSpec("kswin_defaults",
                     "KSWIN (defaults: window_size=100, stat_size=30; window=baseline)",
                     "alpha", (0.005,), "higher", warm_window=True),
    ]


VARIANTS = ("core", "per_feature")
VARIANT_LABEL = {"core": "one detector on (z_trust + z_resonance) / sqrt(2)",
                 "per_feature": "one detector each on z_trust and z_resonance; either fires"}

Stream = tuple[int, int, np.ndarray, np.ndarray]
Fires = list[int | None]


def _series(variant: str, z: np.ndarray) -> list[list[float]]:
    if variant == "core":
        return [[float(x) for x in (z[:, 0] + z[:, 1]) / math.sqrt(2.0)]]
    return [[float(x) for x in z[:, 0]], [float(x) for x in z[:, 1]]]


def first_fire(spec: DetectorSpec, value: float, variant: str, base_z: np.ndarray,
               test_z: np.ndarray, seed: int) -> int | None:
    """The test-session turn (1-based) at which the detector first fires, or None.

    Each series gets a fresh detector warmed up on the baseline turns (fed through
    ``update``, or given as KSWIN's ``window``, its documented way to avoid a cold
    start); a fire during the warm-up is River's own business (it resets itself).
    """
    from river import drift as rdrift

    first: int | None = None
    for j, (base, test) in enumerate(zip(_series(variant, base_z), _series(variant, test_z))):
        kwargs = dict(spec.kwargs)
        kwargs[spec.param] = value
        det: Any
        if spec.key.startswith("page_hinkley"):
            det = rdrift.PageHinkley(**kwargs)
        elif spec.key.startswith("adwin"):
            det = rdrift.ADWIN(**kwargs)  # type: ignore[no-untyped-call]
        else:
            det = rdrift.KSWIN(seed=seed * 7 + j, window=base, **kwargs)
        if not spec.warm_window:
            for x in base:
                det.update(x)
        for k, x in enumerate(test, start=1):
            det.update(x)
            if det.drift_detected:
                first = k if first is None else min(first, k)
                break
    return first


def kswin_first_fires(spec: DetectorSpec, grid: Sequence[float], variant: str,
                      base_z: np.ndarray, test_z: np.ndarray, seed: int) -> Fires:
    """First firing turn for every alpha of ``grid`` from one pass.

    KSWIN's state (window, sampler) changes only when it fires, so up to its first
    detection the sequence of p-values does not depend on alpha; it fires at the
    first test whose p-value is at most alpha (its extra condition ``D > 0.1`` holds
    whenever the p-value is below that of ``D = 0.1``, above 0.99 at these sizes, so
    for every alpha on the grid). One pass with ``alpha=0`` gives the first detection
    for every alpha, exactly as running the detector once per alpha would.
    """
    from river import drift as rdrift

    out: Fires = [None] * len(grid)
    for j, (base, test) in enumerate(zip(_series(variant, base_z), _series(variant, test_z))):
        det = rdrift.KSWIN(alpha=0.0, seed=seed * 7 + j, window=base, **dict(spec.kwargs))
        pvals = []
        for x in test:
            det.update(x)  # type: ignore[no-untyped-call]
            tested = len(det.window) >= det.window_size
            pvals.append(float(det.p_value) if tested else 2.0)
        for g, alpha in enumerate(grid):
            k = next((i + 1 for i, p in enumerate(pvals) if p <= alpha), None)
            prev = out[g]
            if k is not None and (prev is None or k < prev):
                out[g] = k
    return out


def tuning_streams(task: tuple[int, int, int, DriftConfig]) -> list[Stream]:
    """Standardised trust/resonance streams of stable users of the tuning seed."""
    seed, start, count, config = task
    row = rows()[0]
    out = []
    for u in range(start, start + count):
        rng = user_rng(seed, row.stream_code(), u)
        events, truth = simulate_user(rng, row.scenario, f"tune-{u:05d}", START_TS, row.params())
        base_z, test_z = standardised_core(events, truth, config)
        out.append((-1, u, base_z, test_z))
    return out


GridJob = tuple[DetectorSpec, str, tuple[float, ...]]


def grid_task(task: tuple[list[Stream], list[GridJob]]) -> dict[str, list[Fires]]:
    """First fires of each (detector, input, grid) on each stream."""
    streams, jobs = task
    out: dict[str, list[Fires]] = {}
    for _, u, base_z, test_z in streams:
        for spec, variant, grid in jobs:
            key = f"{spec.key}/{variant}"
            if spec.key.startswith("kswin"):
                fires = kswin_first_fires(spec, grid, variant, base_z, test_z, u)
            else:
                fires = [first_fire(spec, v, variant, base_z, test_z, u) for v in grid]
            out.setdefault(key, []).append(fires)
    return out


def eval_task(task: tuple[list[Stream], list[tuple[DetectorSpec, str, float]]]
              ) -> list[tuple[int, str, int | None]]:
    streams, tuned = task
    out = []
    for row_index, u, base_z, test_z in streams:
        for spec, variant, value in tuned:
            out.append((row_index, f"{spec.key}/{variant}",
                        first_fire(spec, value, variant, base_z, test_z, u)))
    return out


def _least_sensitive_first(spec: DetectorSpec, grid: Sequence[float]) -> list[int]:
    """Indices of ``grid`` from the least to the most sensitive setting."""
    return sorted(range(len(grid)), key=grid.__getitem__,
                  reverse=spec.more_sensitive == "lower")


def choose(spec: DetectorSpec, grid: Sequence[float], rates: Sequence[float], target: float
           ) -> int:
    """Index of the tuned grid value: walk from the least sensitive end towards the
    more sensitive one and stop before the false-alarm rate first exceeds ``target``.

    This is the usual way to set a threshold, and it matters here: a detector that
    fires during the warm-up resets itself and is blind for a while (PageHinkley for
    ``min_instances`` values), so at very sensitive settings its false-alarm rate in
    the test session falls again; those settings are not a fair operating point.

    >>> spec = DetectorSpec("page_hinkley", "", "threshold", (), "lower")
    >>> choose(spec, [2.0, 5.0, 10.0, 20.0], [0.01, 0.30, 0.04, 0.01], 0.03)
    3
    """
    order = _least_sensitive_first(spec, grid)
    chosen = order[0]
    for g in order:
        if rates[g] > target:
            break
        chosen = g
    return chosen


# --------------------------------------------------------------------------- driver


def _log(msg: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)


def _map(pool: Any, fn: Callable[[Any], Any], tasks: list[Any], what: str,
         started: float) -> list[Any]:
    results = []
    step = max(1, len(tasks) // 10)
    for i, res in enumerate(pool.imap(fn, tasks), start=1):
        results.append(res)
        if i % step == 0 or i == len(tasks):
            _log(f"{what}: {i}/{len(tasks)} chunks", started)
    return results


@dataclass
class RiverFigures:
    spec: DetectorSpec
    variant: str
    value: float
    tune_rate: float
    tune_n: int
    next_rate: float | None
    first: dict[int, Rate] = field(default_factory=dict)
    by_end: dict[int, Rate] = field(default_factory=dict)
    delays: dict[int, list[int]] = field(default_factory=dict)


def _rates(fires: list[Fires]) -> list[float]:
    n = len(fires)
    return [sum(1 for f in fires if f[g] is not None) / n for g in range(len(fires[0]))]


def tune_river(pool: Any, args: argparse.Namespace, config: DriftConfig, target: float,
               started: float) -> list[RiverFigures]:
    """Grid search on stable users of the tuning seed, coarse then fine where asked."""
    n_tune = max(1, round(args.sessions * rows()[0].users_factor))
    parts = _map(pool, tuning_streams,
                 [(args.tune_seed, s, min(CHUNK, n_tune - s), config)
                  for s in range(0, n_tune, CHUNK)], "River tuning streams", started)
    streams: list[Stream] = [x for part in parts for x in part]
    chunks = [streams[s:s + 4 * CHUNK] for s in range(0, len(streams), 4 * CHUNK)]

    def search(jobs: list[GridJob], what: str) -> dict[str, list[Fires]]:
        merged: dict[str, list[Fires]] = {}
        for part in _map(pool, grid_task, [(c, jobs) for c in chunks], what, started):
            for key, fires in part.items():
                merged.setdefault(key, []).extend(fires)
        return merged

    jobs = [(spec, v, spec.grid) for spec in detector_specs() for v in VARIANTS]
    coarse = search(jobs, "River tuning, coarse grid")
    grids = {f"{spec.key}/{v}": list(grid) for spec, v, grid in jobs}
    results = {key: list(fires) for key, fires in coarse.items()}
    fine_jobs = []
    for spec, v, grid in jobs:
        key = f"{spec.key}/{v}"
        if not spec.refine:
            continue
        g = choose(spec, grid, _rates(coarse[key]), target)
        order = _least_sensitive_first(spec, grid)
        i = order.index(g)
        if i + 1 < len(order):
            lo, hi = grid[order[i]], grid[order[i + 1]]
            fine = (tuple(float(x) for x in np.geomspace(lo, hi, 22)[1:-1]) if spec.param == "delta"
                    else tuple(float(x) for x in np.linspace(lo, hi, 22)[1:-1]))
            fine_jobs.append((spec, v, fine))
    if fine_jobs:
        refined = search(fine_jobs, "River tuning, fine grid")
        for spec, v, fine in fine_jobs:
            key = f"{spec.key}/{v}"
            grids[key].extend(fine)
            results[key] = [a + b for a, b in zip(results[key], refined[key])]
    out = []
    for spec, v, _ in jobs:
        key = f"{spec.key}/{v}"
        rates = _rates(results[key])
        g = choose(spec, grids[key], rates, target)
        order = _least_sensitive_first(spec, grids[key])
        at = order.index(g)
        next_rate = rates[order[at + 1]] if at + 1 < len(order) else None
        out.append(RiverFigures(spec, v, grids[key][g], rates[g], len(streams), next_rate))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = DriftConfig()
    started = time.monotonic()
    table_rows = rows()
    tasks = []
    for i, row in enumerate(table_rows):
        n = max(1, round(args.sessions * row.users_factor))
        for start in range(0, n, CHUNK):
            tasks.append((row, i, args.seed, start, min(CHUNK, n - start), config))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.workers) as pool:
        chunks = _map(pool, run_users, tasks, "our scorer", started)
        figures = [RowFigures(r) for r in table_rows]
        streams: list[Stream] = []
        for chunk in chunks:
            for res in chunk:
                figures[res.row].add(res.outcome)
                if res.base_z is not None and res.test_z is not None:
                    streams.append((res.row, len(streams), res.base_z, res.test_z))

        river: list[RiverFigures] = []
        target = (args.river_fa if args.river_fa is not None
                  else figures[0].rate("own_medium").value)
        if not args.no_river:
            river = tune_river(pool, args, config, target, started)
            tuned = [(r.spec, r.variant, r.value) for r in river]
            eval_tasks = [(streams[s:s + CHUNK], tuned) for s in range(0, len(streams), CHUNK)]
            fired = _map(pool, eval_task, eval_tasks, "River on the benchmark streams", started)
            by_key = {f"{r.spec.key}/{r.variant}": r for r in river}
            counts: dict[tuple[str, int], list[int | None]] = {}
            for part in fired:
                for row_index, key, first in part:
                    counts.setdefault((key, row_index), []).append(first)
            for (key, row_index), firsts in counts.items():
                fig = by_key[key]
                n = len(firsts)
                fig.first[row_index] = Rate(sum(1 for f in firsts if f is not None and f <= 5), n)
                fig.by_end[row_index] = Rate(sum(1 for f in firsts if f is not None), n)
                fig.delays[row_index] = [f for f in firsts if f is not None]
    elapsed = time.monotonic() - started
    _log("done", started)
    return {"figures": figures, "river": river, "target": target, "elapsed_s": elapsed,
            "config": config}


# --------------------------------------------------------------------------- report


def command(args: argparse.Namespace) -> str:
    parts = ["python bench/detection.py", f"--sessions {args.sessions}", f"--seed {args.seed}"]
    if args.tune_seed != args.seed + 1:
        parts.append(f"--tune-seed {args.tune_seed}")
    if args.no_river:
        parts.append("--no-river")
    if args.river_fa is not None:
        parts.append(f"--river-fa {args.river_fa:g}")
    return " ".join(parts)


def our_table(figures: list[RowFigures]) -> list[str]:
    head = ("| scenario | sessions | medium+ at turn_5 | medium+ by end | high by end "
            "| effective medium+ | effective high | delay medium+ (turns) |")
    lines = [head, "|" + "---|" * 8]
    for f in figures:
        lines.append(
            f"| {f.row.label} | {f.n} | {f.rate('first_medium').text()} "
            f"| {f.rate('own_medium').text()} | {f.rate('own_high').text()} "
            f"| {f.rate('eff_medium').text()} | {f.rate('eff_high').text()} "
            f"| {mean_text(f.delays_medium)} |")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def river_table(result: dict[str, Any]) -> list[str]:
    figures: list[RowFigures] = result["figures"]
    river: list[RiverFigures] = result["river"]
    shift_rows = [i for i, f in enumerate(figures) if f.row.river and not f.row.null]
    stable = 0
    at15 = next(i for i, f in enumerate(figures) if f.row.key == "attunement_full_1.5")
    lines = [
        ("| detector | input | tuned value | false alarms, tuning seed (next step) "
         "| false alarms, stable | 1.5 SD by turn 5 | 1.5 SD by end | delay (turns) |"),
        "|" + "---|" * 8,
    ]
    ours = figures[at15]
    lines.append(
        f"| ours (continuity_drift, medium+) | all six features | alpha_medium="
        f"{result['config'].alpha_medium:g} | - | {figures[stable].rate('own_medium').text()} "
        f"| {ours.rate('first_medium').text()} | {ours.rate('own_medium').text()} "
        f"| {mean_text(ours.delays_medium)} |")
    for r in river:
        lines.append(
            f"| {r.spec.label} | {r.variant} | {r.spec.param}={r.value:.4g} "
            f"| {100 * r.tune_rate:.1f}% ({_pct(r.next_rate)}) | {r.by_end[stable].text()} "
            f"| {r.first[at15].text()} | {r.by_end[at15].text()} "
            f"| {mean_text(r.delays[at15])} |")
    lines.append("")
    sizes = [figures[i].row.shift_sd for i in shift_rows]
    lines.append("| detector | input | " + " | ".join(f"{s:g} SD turn 5 / end" for s in sizes)
                 + " |")
    lines.append("|" + "---|" * (2 + len(sizes)))
    cells = [f"{100 * figures[i].rate('first_medium').value:.1f} / "
             f"{100 * figures[i].rate('own_medium').value:.1f}" for i in shift_rows]
    lines.append("| ours | all six features | " + " | ".join(cells) + " |")
    for r in river:
        cells = [f"{100 * r.first[i].value:.1f} / {100 * r.by_end[i].value:.1f}"
                 for i in shift_rows]
        lines.append(f"| {r.spec.key} | {r.variant} | " + " | ".join(cells) + " |")
    return lines


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def checks(figures: list[RowFigures]) -> list[Check]:
    by_key = {f.row.key: f for f in figures}
    out = []
    stable = by_key["stable"]
    for label, group in (("stable", [stable]),
                         ("all null rows pooled", [f for f in figures if f.row.null])):
        med = Rate(sum(f.own_medium for f in group), sum(f.n for f in group))
        high = Rate(sum(f.own_high for f in group), sum(f.n for f in group))
        out.append(Check(
            f"{label}: medium+ <= 5% and high <= 1% (95% CI upper bounds)",
            med.ci[1] <= 0.05 and high.ci[1] <= 0.01,
            f"medium+ {med.text()}, high {high.text()}, n={med.n}"))
    shifted = by_key["attunement_full_1.5"]
    first = shifted.rate("first_medium")
    out.append(Check("1.5 SD trust+resonance shift: medium+ at first checkpoint >= 88% "
                     "(95% CI lower bound)", first.ci[0] >= 0.88, first.text()))
    for share in (0.5, 0.75, 1.0):
        r = by_key[f"semantic_{share:g}"].rate("own_medium")
        out.append(Check(f"{share:g} of commitments contradicted: medium+ in every session",
                         r.k == r.n, r.text()))
    comb = by_key["combined"].rate("own_high")
    out.append(Check("combined 1.5 SD + 0.5 contradicted: high >= 90% (95% CI lower bound)",
                     comb.ci[0] >= 0.90, comb.text()))
    saf = by_key["safety"].rate("own_high")
    out.append(Check("safety mismatch: high in every session", saf.k == saf.n, saf.text()))
    return out


NOTE = (
    "Rates with Wilson 95% intervals. On null rows (stable, shift 0) 'by end' is the "
    "per-session false-alarm rate; elsewhere it is detection power. 'medium+ at turn_5' is "
    "the tier of the first checkpoint's score; 'by end' the highest tier of any score of the "
    "session (turn_5, turn_10). 'effective' adds a HOLD carried over from a baseline session "
    "that itself went high (tighten-only); the session's own evidence is the 'by end' column. "
    "Delay: turn of the first medium+ score (0 = session_start)."
)


def report(result: dict[str, Any], args: argparse.Namespace) -> list[str]:
    figures: list[RowFigures] = result["figures"]
    title = (f"Detection quality (seed {args.seed}; each row: one test session per user "
             "after three 12-turn baseline sessions)")
    lines = [title, ""]
    lines += our_table(figures)
    lines += ["", NOTE, ""]
    if result["river"]:
        what = ("our stable medium+ rate" if args.river_fa is None
                else "the rate given by --river-fa")
        head = (f"River {_river_version()} on the same streams, thresholds tuned on "
                f"{result['river'][0].tune_n} stable users of seed {args.tune_seed} to {what} "
                f"({100 * result['target']:.2f}%); 'next step' is the false-alarm rate of the "
                "next more sensitive grid value:")
        lines += [head, ""]
        lines += river_table(result)
        lines.append("")
    for c in checks(figures):
        lines.append(f"{'PASS' if c.passed else 'FAIL'}  {c.name}: {c.detail}")
    took = f"{result['elapsed_s']:.0f} s, {args.workers} workers"
    lines += ["", f"Reproduce: {command(args)}   ({took})"]
    return lines


def _river_version() -> str:
    import river

    return str(getattr(river, "__version__", "?"))


def to_json(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    figures: list[RowFigures] = result["figures"]
    config: DriftConfig = result["config"]
    out: dict[str, Any] = {
        "command": command(args), "seed": args.seed, "tune_seed": args.tune_seed,
        "elapsed_s": result["elapsed_s"],
        "config": {k: v for k, v in asdict(config).items() if k != "extra"},
        "rows": [f.as_dict() for f in figures],
        "checks": [asdict(c) for c in checks(figures)],
        "river": [],
    }
    for r in result["river"]:
        out["river"].append({
            "detector": r.spec.key, "label": r.spec.label, "input": r.variant,
            "param": r.spec.param, "value": r.value, "tuning_false_alarm_rate": r.tune_rate,
            "tuning_sessions": r.tune_n, "next_step_false_alarm_rate": r.next_rate,
            "river_version": _river_version(), "target_false_alarm_rate": result["target"],
            "rows": {figures[i].row.key: {
                "by_turn_5": r.first[i].as_dict(), "by_end": r.by_end[i].as_dict(),
                "mean_delay_turns": (sum(r.delays[i]) / len(r.delays[i])
                                     if r.delays[i] else None)} for i in r.first},
        })
    return out


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sessions", type=int, default=None,
                   help=f"test sessions per row before the row's factor (default "
                        f"{DEFAULT_SESSIONS}; stable gets 3x)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--tune-seed", type=int, default=None,
                   help="seed of the stable users River is tuned on (default: seed + 1)")
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run ({QUICK_SESSIONS} sessions per row)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--no-river", action="store_true", help="skip the River comparison")
    p.add_argument("--river-fa", type=float, default=None,
                   help="tune River to this per-session false-alarm rate instead of ours")
    p.add_argument("--json", type=Path, default=None, help="write the figures to this file")
    args = p.parse_args(argv)
    if args.sessions is None:
        args.sessions = QUICK_SESSIONS if args.quick else DEFAULT_SESSIONS
    if args.tune_seed is None:
        args.tune_seed = args.seed + 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    result = run(args)
    print("\n".join(report(result, args)))
    if args.json is not None:
        args.json.write_text(json.dumps(to_json(result, args), indent=2) + "\n")
    return 0 if all(c.passed for c in checks(result["figures"])) else 1


if __name__ == "__main__":
    raise SystemExit(main())
