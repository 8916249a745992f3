"""River's drift detectors beside our scorer, on the same streams: the detectors and their
threshold grids, tuned on stable users of a different seed to our own per-session
false-alarm rate, then run on every row."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.detection_ours import CHUNK, START_TS, pool_map, rows, standardised_core, user_rng
from bench.rates import Rate
from drift.model import DriftConfig
from drift.simulation import simulate_user


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
    parts = pool_map(pool, tuning_streams,
                 [(args.tune_seed, s, min(CHUNK, n_tune - s), config)
                  for s in range(0, n_tune, CHUNK)], "River tuning streams", started)
    streams: list[Stream] = [x for part in parts for x in part]
    chunks = [streams[s:s + 4 * CHUNK] for s in range(0, len(streams), 4 * CHUNK)]

    def search(jobs: list[GridJob], what: str) -> dict[str, list[Fires]]:
        merged: dict[str, list[Fires]] = {}
        for part in pool_map(pool, grid_task, [(c, jobs) for c in chunks], what, started):
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
