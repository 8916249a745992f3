"""The compiled batch fold against the reference fold, in process (no broker, no store).

Builds a simulated stream (``drift.simulation``: every scenario, users shifted in time so
that the stream interleaves many users at different turns), encodes and decodes it as the
worker does (``streams.edge.codec``), checks that both paths give the same effects and states,
then reports wall time per record of:

- the reference: a loop of ``drift.fold.step`` per event, states and baselines in dicts
  (what ``Engine.process`` does per record, without the shell);
- the kernel: ``drift.kernel.fold_batch`` over batches of ``--batch`` events (the
  worker's ``batch_max``), with the share of events handed to the reference fold, and
  the split of its time into building the event columns, the compiled kernel and the
  hand-offs;
- the attunement statistic of every checkpoint the reference computes, per call, through
  the reference and through its compiled twin (``drift.kernel.attunement``);

and the compile time of the kernel: cold (an empty numba cache) and cached (loaded from
the cache a first run wrote), each in a fresh interpreter, beside the import of what the
kernel module imports anyway (numpy, numba, ``drift.fold``).

    python bench/kernel.py
    python bench/kernel.py --records 60000 --users 600 --batch 500 --repeat 3
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from drift.evolve import evolve

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from drift.attunement import AttunementScore, AttunementTest, score_attunement_drift
from drift.baseline import UserBaselines
from drift.fold import initial, step
from drift.kernel import UserColumns, fold_batch
from drift.kernel import batch as kernel_batch
from drift.kernel.attunement import score_attunement
from drift.kernel.events import EventColumns
from drift.model import DriftConfig, FhrEvent, Turn
from drift.outputs import Effects
from drift.simulation import Scenario, SimParams, simulate
from drift.state import UserState
from streams.edge.codec import decode_event, encode_event

_COMPILE_PROBE = """
import json, time
t0 = time.perf_counter()
import numpy, numba, drift.fold
t1 = time.perf_counter()
import drift.kernel  # its batch fold imports the compiled attunement statistic too
t2 = time.perf_counter()
print(json.dumps({"deps_s": t1 - t0, "kernel_s": t2 - t1}))
"""


def build_events(records: int, users: int, seed: int) -> list[FhrEvent]:
    """``records`` simulated events of ``users`` users (every scenario), merged by event
    time, through the wire codec and back."""
    per_scenario = max(1, round(users / len(Scenario)))
    n_users = per_scenario * len(Scenario)
    sessions = max(1, -(-records * 5 // 4 // (n_users * 15)) - SimParams().baseline_sessions)
    params = SimParams(test_sessions=sessions)
    span = (params.turns + 2) * params.turn_gap_s
    rng = np.random.default_rng(seed ^ 0x5EED)
    rows: list[tuple[float, bytes, bytes]] = []
    for evs, _ in simulate(seed, list(Scenario), per_scenario, 1.8e9, params):
        shift = float(rng.uniform(0.0, span))
        for e in evs:
            e2 = evolve(e, ts_s=e.ts_s + shift)
            rows.append((e2.ts_s, e2.user_id.encode(), encode_event(e2)))
    rows.sort(key=lambda r: r[0])
    out = []
    for _, key, value in rows[:records]:
        event = decode_event(key, value)
        assert isinstance(event, FhrEvent)
        out.append(event)
    return out


def run_reference(events: Sequence[FhrEvent], config: DriftConfig,
                  score: AttunementScore = score_attunement_drift,
                  ) -> tuple[float, list[Effects], dict[str, UserState]]:
    states: dict[str, UserState] = {}
    baselines: dict[str, UserBaselines] = {}
    effects = []
    none = UserBaselines()
    started = time.perf_counter()
    for e in events:
        u = e.user_id
        result = step(states.get(u) or initial(u), baselines.get(u, none), e, config, score)
        states[u] = result.state
        baselines[u] = result.baselines
        effects.append(result.effects)
    return time.perf_counter() - started, effects, states


def reference_by_class(events: Sequence[FhrEvent], config: DriftConfig) -> dict[str, float]:
    """Seconds of the reference fold per class of event: a plain turn (the kernel takes it),
    a checkpoint or re-attunement turn, and every other event type."""
    states: dict[str, UserState] = {}
    baselines: dict[str, UserBaselines] = {}
    none = UserBaselines()
    looks = {config.reattune_checkpoint_turn}
    seconds: dict[str, float] = {}
    for e in events:
        u = e.user_id
        state = states.get(u) or initial(u)
        label = e.event_type
        if isinstance(e.body, Turn) and state.session is not None:
            n = state.session.turns.n_turns + 1
            cp = n >= config.checkpoint_turn \
                and (n - config.checkpoint_turn) % config.checkpoint_every == 0
            label = "turn at a checkpoint" if cp or n in looks else "plain turn"
        t = time.perf_counter()
        result = step(state, baselines.get(u, none), e, config)
        seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t
        states[u], baselines[u] = result.state, result.baselines
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))


class _Split:
    """Seconds in the kernel's parts, timed by wrapping what fold_batch calls."""

    #: (label, where it is looked up when called, its name there)
    PARTS = (("event columns", EventColumns, "of"),
             ("compiled kernel", kernel_batch, "apply_turns"),
             ("hand-offs (reference step)", kernel_batch, "step"))

    def __init__(self) -> None:
        self.seconds = {label: 0.0 for label, _, _ in self.PARTS}
        self._saved = [inspect.getattr_static(owner, name) for _, owner, name in self.PARTS]

    def __enter__(self) -> Self:
        def timed(label: str, fn: Callable[..., object]) -> Callable[..., object]:
            def call(*args: object, **kwargs: object) -> object:
                t = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.seconds[label] += time.perf_counter() - t
            return call

        for (label, owner, name), fn in zip(self.PARTS, self._saved, strict=True):
            setattr(owner, name, timed(label, fn))  # called on the class or the module
        return self

    def __exit__(self, *exc: object) -> None:
        for (_, owner, name), fn in zip(self.PARTS, self._saved, strict=True):
            setattr(owner, name, fn)


def run_kernel(events: Sequence[FhrEvent], config: DriftConfig, batch: int
               ) -> tuple[float, list[Effects], UserColumns, int, int]:
    cols = UserColumns(config, capacity=1024)
    effects: list[Effects] = []
    handoffs = calls = 0
    started = time.perf_counter()
    for i in range(0, len(events), batch):
        done = fold_batch(cols, events[i:i + batch], config)
        handoffs += done.handoffs
        calls += done.handoffs + 1
        for k in range(len(done.outcomes)):
            eff = done.effects(k)
            assert eff is not None
            effects.append(eff)
    return time.perf_counter() - started, effects, cols, handoffs, calls


def attunement_per_call(events: Sequence[FhrEvent], config: DriftConfig, repeat: int
                        ) -> tuple[int, float, float]:
    """Every attunement statistic the reference fold computes over ``events``, then each
    one again through the reference and through its compiled twin (checked equal):
    the number of calls and seconds per call of each, best of ``repeat``."""
    calls: list[tuple[Any, ...]] = []

    def recording(*a: Any) -> AttunementTest:
        calls.append(a)
        return score_attunement_drift(*a)

    run_reference(events, config, recording)
    assert all(score_attunement(*a) == score_attunement_drift(*a) for a in calls), \
        "the compiled attunement statistic differs from the reference's"
    best = {}
    for name, fn in (("reference", score_attunement_drift), ("compiled", score_attunement)):
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            for a in calls:
                fn(*a)
            times.append(time.perf_counter() - started)
        best[name] = min(times) / max(1, len(calls))
    return len(calls), best["reference"], best["compiled"]


def compile_times() -> dict[str, float]:
    """Import of the kernel module in fresh interpreters: with an empty numba cache, then
    from the cache that first import wrote."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as cache:
        env["NUMBA_CACHE_DIR"] = cache
        for label in ("cold", "cached"):
            proc = subprocess.run([sys.executable, "-c", _COMPILE_PROBE], env=env, cwd=ROOT,
                                  capture_output=True, text=True, check=True)
            figures = json.loads(proc.stdout)
            out[f"{label}_kernel_s"] = figures["kernel_s"]
            out[f"{label}_deps_s"] = figures["deps_s"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--batch", type=int, default=500, help="events per fold_batch call")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each path (best)")
    args = parser.parse_args(argv)
    config = DriftConfig()
    print(f"building {args.records:,} simulated records of about {args.users:,} users ...",
          file=sys.stderr)
    events = build_events(args.records, args.users, args.seed)
    n = len(events)
    refs, runs = [], []
    for _ in range(args.repeat):  # alternated, so that a host that slows hits both paths
        refs.append(run_reference(events, config))
        with _Split() as split:
            runs.append((run_kernel(events, config, args.batch), split.seconds))
    ref_s, ref_effects, ref_states = min(refs, key=lambda r: r[0])
    (ker_s, ker_effects, cols, handoffs, calls), parts = min(runs, key=lambda r: r[0][0])
    pairs = sorted(r[0] / k[0][0] for r, k in zip(refs, runs, strict=True))
    assert ker_effects == ref_effects, "the kernel's effects differ from the reference's"
    assert all(cols.states[u] == s for u, s in ref_states.items()), "states differ"
    by_class = reference_by_class(events, config)
    compile_s = compile_times()
    users = len(ref_states)
    print(f"{n:,} records of {users:,} users, batches of {args.batch}, best of {args.repeat} "
          "alternated runs of each path; "
          "effects and states equal on both paths")
    print(f"  reference (step per event)   {1e6 * ref_s / n:8.1f} us/record")
    for label, seconds in list(by_class.items())[:4]:
        print(f"    {label:<28}{1e6 * seconds / n:8.1f} us/record")
    print(f"  kernel (fold_batch)          {1e6 * ker_s / n:8.1f} us/record   "
          f"x{ref_s / ker_s:.2f}; per pair of runs x{pairs[0]:.2f} to x{pairs[-1]:.2f}, "
          f"median x{statistics.median(pairs):.2f}")
    for label, seconds in parts.items():
        print(f"    {label:<28}{1e6 * seconds / n:8.1f} us/record")
    print(f"  handed off to the reference  {handoffs:,} of {n:,} ({100 * handoffs / n:.1f}%), "
          f"{calls:,} kernel calls")
    att_calls, att_ref, att_ker = attunement_per_call(events, config, args.repeat)
    print(f"  attunement statistic ({att_calls:,} checkpoints): reference "
          f"{1e6 * att_ref:.1f} us, compiled {1e6 * att_ker:.1f} us a call "
          f"(x{att_ref / att_ker:.2f}; equal on every call)")
    print("  kernel module import (compile): "
          f"cold {compile_s['cold_kernel_s']:.2f} s, cached {compile_s['cached_kernel_s']:.2f} s"
          f" (numpy + numba + drift.fold before it: {compile_s['cached_deps_s']:.2f} s)")
    cmd = ["python", "bench/kernel.py", "--records", str(args.records), "--users",
           str(args.users), "--batch", str(args.batch), "--seed", str(args.seed),
           "--repeat", str(args.repeat)]
    print(f"reproduce: {shlex.join(cmd)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
