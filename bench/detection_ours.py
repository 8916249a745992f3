"""Our scorer on the labelled rows of the detection benchmark: the scenarios and their
parameters, each simulated user through the real fold (``drift.replay.MemoryReplay``), and
what each test session's scores said. Also the standardised inputs River's detectors read,
and the progress-logged pool map both halves run on."""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.rates import Rate
from drift.model import DriftConfig, Mode, Turn
from drift.replay import MemoryReplay
from drift.simulation import Scenario, SimParams, TruthRow, simulate_user
from streams.edge.wire import payload

START_TS = 1.7e9


TIER_RANK = {"low": 0, "medium": 1, "high": 2}


CHUNK = 50


def mean_text(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):4.1f}" if values else "   -"


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


def log_since(msg: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)


def pool_map(pool: Any, fn: Callable[[Any], Any], tasks: list[Any], what: str,
         started: float) -> list[Any]:
    results = []
    step = max(1, len(tasks) // 10)
    for i, res in enumerate(pool.imap(fn, tasks), start=1):
        results.append(res)
        if i % step == 0 or i == len(tasks):
            log_since(f"{what}: {i}/{len(tasks)} chunks", started)
    return results
