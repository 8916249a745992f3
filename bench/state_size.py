"""Per-user state size, in process (``bench/throughput.py``, phase 6): simulated users run
through the fold to steady state, replicated; encoded and resident bytes per user, and the
encoded size of one user's state after few and after many sessions."""

from __future__ import annotations

import copy
import gc
import math
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import msgspec
import numpy as np

from bench.harness import fmt, log, pass_fail

#: SPEC 11: at most 2 KB encoded and 4 KB resident per user at steady state.
STATE_ENCODED_GOAL_B = 2048
STATE_RESIDENT_GOAL_B = 4096


def stored(baseline: Any) -> bytes:
    """A baseline version as the store keeps it: its row of ``baseline_versions`` (the
    columns :func:`baselines.columns.baseline_of` reads, in its order), in msgpack."""
    from baselines.columns import BASELINE_COLUMNS, baseline_table

    row = baseline_table([(0, baseline)]).to_pylist()[0]
    return msgspec.msgpack.encode(tuple(row[c.strip()] for c in BASELINE_COLUMNS.split(",")))


def state_size_bound(seed: int, sessions: Sequence[int]) -> list[dict[str, Any]]:
    """Encoded size of one user's state and current baselines after n sessions, per scenario."""
    from baselines.snapshot import encode_state
    from drift.model import DriftConfig
    from drift.replay import MemoryReplay
    from drift.simulation import Scenario, SimParams, simulate_user

    config = DriftConfig()
    rows = []
    for scenario in (Scenario.STABLE, Scenario.ATTUNEMENT_SHIFT, Scenario.SEMANTIC_CONTRADICTION,
                     Scenario.MODEL_CHANGE_COLLAPSED, Scenario.SUSTAINED_LOW,
                     Scenario.GOVERNANCE):
        for n in sessions:
            params = SimParams(test_sessions=max(1, n - SimParams().baseline_sessions))
            events, truth = simulate_user(np.random.default_rng(seed), scenario, "u-bench",
                                          1.7e9, params)
            replay = MemoryReplay(config)
            peak = 0
            for i, e in enumerate(events):
                replay.feed(e)
                if i >= len(events) - 200:  # the last sessions, mid-session included
                    peak = max(peak, len(encode_state(replay.states["u-bench"])))
            state = replay.states["u-bench"]
            base = replay.baselines.get("u-bench")
            base_bytes = 0
            if base is not None:
                base_bytes = sum(len(stored(b)) for b in (base.attunement, base.semantic,
                                                          base.safety) if b is not None)
            rows.append({"scenario": scenario.value, "sessions": len(truth),
                         "events": len(events), "state_bytes": len(encode_state(state)),
                         "state_bytes_peak_recent": peak,
                         "recent_ids": len(state.recent.ring) // 8, "baseline_bytes": base_bytes})
    return rows


def _resident_per_user(build: Callable[[], object], n: int) -> float:
    """Bytes that ``build()`` allocates and keeps (tracemalloc), divided by ``n``."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return (after - before) / n


def per_user_state(seed: int, user_counts: Sequence[int], templates: int,
                   test_sessions: int = 40, cut_events: int = 8,
                   deepcopy_users: int = 2000) -> dict[str, Any]:
    """Encoded and resident bytes per user of the state and baselines, at N users.

    ``templates`` simulated users of every scenario go through the fold
    (:class:`drift.replay.MemoryReplay`) for ``3 + test_sessions`` sessions, enough to
    fill the dedupe ring (``recent_event_ids`` fingerprints), that is to reach steady
    state; every second one stops ``cut_events`` events before its end, so that idle
    users and users with an open session are both represented. They are then replicated
    round robin to N users as the worker holds them: a dict from a distinct user id to a
    state decoded from the template's snapshot (``baselines.snapshot``, as the worker
    loads it from DuckDB), and a dict from the same ids to baselines, each decoded from
    its own msgpack encoding, so that no two users share an object. ``copy.deepcopy``
    would not do: it returns every str, bytes, float and all-atomic tuple as the same
    object, so its copies share the ring and the feature rows; the ``deepcopy`` figures
    (at ``deepcopy_users`` copies) show how much that hides.

    Resident bytes are what tracemalloc counts as allocated and kept, divided by N; the
    state's figure includes the user id key and both dicts' entries.
    """
    from prometheus_client import CollectorRegistry

    from baselines.columns import by_user
    from baselines.snapshot import decode_state, encode_state
    from drift.baseline import UserBaselines
    from drift.model import DriftConfig
    from drift.replay import MemoryReplay
    from drift.simulation import Scenario, SimParams, simulate
    from streams.metrics import build_metrics
    from streams.processing.memory import (
        Memory,  # with the columns, imported before anything is measured
    )
    from streams.processing.meter import Meter

    started = time.monotonic()
    config = DriftConfig()
    replay = MemoryReplay(config)
    ids: list[str] = []
    scenarios: list[str] = []
    per_scenario = max(1, round(templates / len(Scenario)))
    for i, (events, truth) in enumerate(simulate(seed, list(Scenario), per_scenario, 1.7e9,
                                                 SimParams(test_sessions=test_sessions))):
        for e in events[:-cut_events] if i % 2 else events:
            replay.feed(e)
        ids.append(events[0].user_id)
        scenarios.append(truth[0].scenario)
    simulate_s = time.monotonic() - started
    states = [replay.states[u] for u in ids]
    bases = [replay.baselines.get(u, UserBaselines()) for u in ids]
    blobs = [encode_state(st) for st in states]
    decoder = msgspec.msgpack.Decoder(tuple)
    base_blobs = [tuple(None if b is None else stored(b)
                        for b in (ub.attunement, ub.semantic, ub.safety)) for ub in bases]
    state_bytes = [len(b) for b in blobs]
    base_bytes = [sum(len(x) for x in bb if x is not None) for bb in base_blobs]
    t = len(ids)

    def hold_states(n: int, held: dict[str, Any]) -> object:
        held["states"] = {f"{ids[i % t]}~{i:07d}": decode_state(blobs[i % t]) for i in range(n)}
        return held["states"]

    def hold_baselines(held: dict[str, Any]) -> object:
        """Each user's baselines decoded from their own bytes; a user in a session has had
        the attunement baseline's pooled statistics worked out (the re-attunement and the
        checkpoints read them, and the baseline keeps them), as the worker holds it."""
        def user_baselines(blobs: Sequence[bytes | None]) -> UserBaselines:
            rows = [decoder.decode(x) for x in blobs if x is not None]
            return next(iter(by_user(rows).values()), UserBaselines())  # as a restore does

        held["baselines"] = {key: user_baselines(base_blobs[i % t])
                             for i, key in enumerate(held["states"])}
        for i, ub in enumerate(held["baselines"].values()):
            if ub.attunement is not None and states[i % t].session is not None:
                _ = ub.attunement.pooled
        return held["baselines"]

    def hold_columns(n: int, held: dict[str, Any]) -> object:
        """The users' states as the worker holds them: each decoded from its own snapshot
        and loaded by the worker's own :class:`streams.processing.memory.Memory` (as from its store,
        each with an offset its state is as of), which puts them into its columns
        (:class:`drift.kernel.UserColumns`) and strips them: the slot arrays, the index,
        the per-slot caches, the state objects without what the columns hold of them, and
        the memory's own entries per user (its partition, the offset, that it is stored).
        The baselines are the held ones, counted apart."""
        memory = Memory(Meter(build_metrics(CollectorRegistry())), config)
        keys = list(held["states"])
        memory.load(0, {key: decode_state(blobs[i % t]) for i, key in enumerate(keys)},
                    held["baselines"], {key: 10_000_000 + i for i, key in enumerate(keys)})
        held["columns"] = memory
        return memory

    rows = []
    for n in user_counts:
        t0 = time.monotonic()
        held: dict[str, Any] = {}
        state_res = _resident_per_user(partial(hold_states, n, held), n)
        base_res = _resident_per_user(partial(hold_baselines, held), n)
        columns_res = _resident_per_user(partial(hold_columns, n, held), n)
        held.clear()
        picked = [i % t for i in range(n)]
        rows.append({"users": n,
                     "state_encoded_mean": sum(state_bytes[i] for i in picked) / n,
                     "state_encoded_max": max(state_bytes[i] for i in picked),
                     "baselines_encoded_mean": sum(base_bytes[i] for i in picked) / n,
                     "baselines_encoded_max": max(base_bytes[i] for i in picked),
                     "state_resident": state_res, "baselines_resident": base_res,
                     "columns_resident": columns_res, "seconds": time.monotonic() - t0})
        log(f"    {n} users: state {state_res:.0f} B + baselines {base_res:.0f} B resident "
            f"per user; the state as the worker holds it {columns_res:.0f} B")
    m = min(deepcopy_users, max(user_counts))
    deep = {"users": m,
            "state_resident": _resident_per_user(
                lambda: [copy.deepcopy(states[i % t]) for i in range(m)], m),
            "baselines_resident": _resident_per_user(
                lambda: [copy.deepcopy(bases[i % t]) for i in range(m)], m)}
    is_open = [st.session is not None for st in states]
    opened = [b for b, o in zip(state_bytes, is_open, strict=True) if o]
    idle = [b for b, o in zip(state_bytes, is_open, strict=True) if not o]
    by_scenario: dict[str, list[int]] = defaultdict(list)
    for scen, size in zip(scenarios, state_bytes, strict=True):
        by_scenario[scen].append(size)
    ring_ids = [len(st.recent.ring) // 8 for st in states]
    return {"templates": t, "sessions": SimParams().baseline_sessions + test_sessions,
            "cut_events": cut_events, "simulate_s": simulate_s,
            "open_sessions": len(opened),
            "state_encoded_open_mean": sum(opened) / len(opened) if opened else math.nan,
            "state_encoded_open_max": max(opened, default=0),
            "state_encoded_idle_mean": sum(idle) / len(idle) if idle else math.nan,
            "state_encoded_idle_max": max(idle, default=0),
            "recent_event_ids": config.recent_event_ids,
            "ring_ids_mean": sum(ring_ids) / t,
            "ring_full": sum(1 for r in ring_ids if r >= config.recent_event_ids),
            "state_encoded_by_scenario": {k: {"mean": sum(v) / len(v), "max": max(v)}
                                          for k, v in by_scenario.items()},
            "rows": rows, "deepcopy": deep}


def report_state(sp: dict[str, Any] | None, sb: list[dict[str, Any]] | None) -> list[str]:
    lines: list[str] = []
    if sp:
        lines += ["", (f"| per-user state: users (replicas of {sp['templates']} simulated users"
                       ") | encoded state mean / max B | encoded baselines mean / max B "
                       "| resident state B/user | resident baselines B/user |"),
                  "|---|---:|---:|---:|---:|"]
        for r in sp["rows"]:
            lines.append(f"| {r['users']} | {r['state_encoded_mean']:.0f} / "
                         f"{r['state_encoded_max']} | {r['baselines_encoded_mean']:.0f} / "
                         f"{r['baselines_encoded_max']} | {r['state_resident']:.0f} | "
                         f"{r['baselines_resident']:.0f} |")
        lines.append("")
        lines.append(f"simulated users: every scenario, {sp['sessions']} sessions (sustained_low "
                     f"more), {sp['open_sessions']} of {sp['templates']} stopped mid-session "
                     f"(encoded state mean {fmt(sp['state_encoded_open_mean'])} B open, "
                     f"{fmt(sp['state_encoded_idle_mean'])} B idle); dedupe ring mean "
                     f"{sp['ring_ids_mean']:.0f} of {sp['recent_event_ids']} ids, full for "
                     f"{sp['ring_full']} users")
        last = sp["rows"][-1]
        both = last["state_resident"] + last["baselines_resident"]
        held = last["columns_resident"] + last["baselines_resident"]
        lines.append(f"goal: at most {STATE_ENCODED_GOAL_B // 1024} KB encoded and "
                     f"{STATE_RESIDENT_GOAL_B // 1024} KB resident per user. Encoded state max "
                     f"{last['state_encoded_max']} B: "
                     f"{pass_fail(last['state_encoded_max'] <= STATE_ENCODED_GOAL_B)}; resident at "
                     f"{last['users']} users: state {last['state_resident']:.0f} B "
                     f"({pass_fail(last['state_resident'] <= STATE_RESIDENT_GOAL_B)}), state + "
                     f"baselines {both:.0f} B ({pass_fail(both <= STATE_RESIDENT_GOAL_B)}); "
                     "as the worker holds an idle user (loaded by its memory: the columns with "
                     "the slots their growth left empty, the state object stripped, the memory's "
                     f"entries): state {last['columns_resident']:.0f} B "
                     f"({pass_fail(last['columns_resident'] <= STATE_RESIDENT_GOAL_B)}), with "
                     f"the baselines {held:.0f} B ({pass_fail(held <= STATE_RESIDENT_GOAL_B)})")
        d = sp["deepcopy"]
        lines.append(f"(replicated with copy.deepcopy instead, which shares immutable values "
                     f"between copies: state {d['state_resident']:.0f} B + baselines "
                     f"{d['baselines_resident']:.0f} B per user at {d['users']} copies)")
    if sb:
        lines.append("")
        sessions = sorted({r["sessions"] for r in sb if r["scenario"] == "stable"})
        lines.append("| encoded UserState bytes at the end (peak within the last sessions; "
                     "encoded current baselines) after n sessions | "
                     + " | ".join(f"n={n}" for n in sessions) + " |")
        lines.append("|---|" + "---:|" * len(sessions))
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in sb:
            by[r["scenario"]].append(r)
        for scen, rows in by.items():
            cells = [f"{r['state_bytes']} ({r['state_bytes_peak_recent']}; {r['baseline_bytes']})"
                     for r in rows]
            lines.append(f"| {scen} | " + " | ".join(cells) + " |")
    return lines
