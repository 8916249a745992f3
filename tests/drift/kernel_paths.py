"""The two paths every kernel test puts a log through, and their comparison.

A loop of :func:`drift.fold.step` per event (the reference) and
:func:`drift.kernel.fold_batch` over batches (the kernel, with the rare events handed to the
reference). :func:`assert_same` compares outputs as the bytes the worker publishes
(``streams.edge.wire.encode``) and as values, final states as values and as their encoded
snapshots (``baselines.snapshot.encode_state``), baselines as values. No tolerance anywhere.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from baselines.snapshot import encode_state
from drift.baseline import UserBaselines
from drift.evolve import evolve
from drift.fold import initial, step
from drift.kernel import UserColumns, fold_batch
from drift.model import (
    DriftConfig,
    FhrEvent,
)
from drift.outputs import Effects
from drift.state import UserState
from streams.edge.wire import encode
from tests.drift.test_fold_properties import Plan, _events

EXAMPLES = int(os.environ.get("KERNEL_EXAMPLES", "25"))
#: A small ring (it wraps within a few sessions) and checkpoints off the defaults' grid.
SMALL = DriftConfig(recent_event_ids=6, checkpoint_turn=3, checkpoint_every=4,
                    reattune_checkpoint_turn=4, windows=2, late_profile_turns=2)
CONFIGS = (DriftConfig(), SMALL)


@dataclass
class Run:
    effects: list[Effects]
    states: dict[str, UserState]
    baselines: dict[str, UserBaselines]


def reference(events: Sequence[FhrEvent], config: DriftConfig) -> Run:
    states: dict[str, UserState] = {}
    baselines: dict[str, UserBaselines] = {}
    effects = []
    for e in events:
        result = step(states.get(e.user_id) or initial(e.user_id),
                      baselines.get(e.user_id, UserBaselines()), e, config)
        states[e.user_id], baselines[e.user_id] = result.state, result.baselines
        effects.append(result.effects)
    return Run(effects, states, baselines)


def kernel(events: Sequence[FhrEvent], config: DriftConfig, batch: int,
           cols: UserColumns | None = None,
           after_batch: Callable[[UserColumns], None] | None = None) -> tuple[Run, int]:
    """``events`` through the kernel in batches of ``batch``; ``after_batch`` is called with
    the columns after each one (as the worker's checkpoint strips its users)."""
    cols = cols if cols is not None else UserColumns(config, capacity=2)
    effects: list[Effects] = []
    handoffs = 0
    for i in range(0, len(events), batch):
        done = fold_batch(cols, events[i:i + batch], config)
        assert done.stopped_at is None
        handoffs += done.handoffs
        for k in range(len(done.outcomes)):
            eff = done.effects(k)
            assert eff is not None, done.outcomes[k]
            effects.append(eff)
        if after_batch is not None:
            after_batch(cols)
    users = {e.user_id for e in events}
    return Run(effects, {u: cols.states[u] for u in users},
               {u: cols.baselines[u] for u in users if u in cols.baselines}), handoffs


def assert_same(ref: Run, got: Run, seed: object) -> None:
    assert len(got.effects) == len(ref.effects), seed
    for i, (a, b) in enumerate(zip(ref.effects, got.effects, strict=True)):
        assert [encode(o) for o in a.outputs] == [encode(o) for o in b.outputs], (seed, i)
        assert a == b, (seed, i)
    assert ref.states.keys() == got.states.keys(), seed
    for u, state in ref.states.items():
        assert encode_state(got.states[u]) == encode_state(state), (seed, u)
        assert got.states[u] == state, (seed, u)
        assert got.baselines.get(u, UserBaselines()) == ref.baselines[u], (seed, u)



def users_log(sessions: list[list[Plan]], resend: int, eph_every: int, seed: int
               ) -> list[FhrEvent]:
    """Each user's drawn sessions, interleaved in an order drawn from ``seed`` (each user's
    own order kept); every ``eph_every``-th event of the first user marked ephemeral."""
    per_user = []
    for u, plan in enumerate(sessions):
        evs = [evolve(e, user_id=f"u{u}", event_id=f"u{u}-{e.event_id}")
               for e in _events(plan, resend)]
        if u == 0 and eph_every:
            evs = [evolve(e, ephemeral=True) if k % eph_every == eph_every - 1 else e
                   for k, e in enumerate(evs)]
        per_user.append(evs)
    rng = random.Random(seed)
    order = [u for u, evs in enumerate(per_user) for _ in evs]
    rng.shuffle(order)
    cursors = [0] * len(per_user)
    out = []
    for u in order:
        out.append(per_user[u][cursors[u]])
        cursors[u] += 1
    return out
