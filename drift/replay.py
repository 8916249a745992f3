"""Run events through the fold with baselines held in memory (no store, no broker).

The benchmark harness and the tests use it; the worker does the same with its
store and Kafka around it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from drift.baseline import UserBaselines
from drift.fold import initial, step, sweep
from drift.model import DriftConfig, FhrEvent, Tick
from drift.outputs import ErasureCommand, Output
from drift.state import UserState


@dataclass
class MemoryReplay:
    """Users' states and current baselines, in memory."""

    config: DriftConfig
    states: dict[str, UserState] = field(default_factory=dict)
    baselines: dict[str, UserBaselines] = field(default_factory=dict)
    erasures: list[ErasureCommand] = field(default_factory=list)
    """Every erasure the fold asked for, in order (the worker carries each out and
    publishes its receipt)."""

    def feed(self, event: FhrEvent) -> tuple[Output, ...]:
        user_id = event.user_id
        state = self.states.get(user_id) or initial(user_id)
        result = step(state, self.baselines.get(user_id, UserBaselines()), event, self.config)
        self.states[user_id] = result.state
        self.baselines[user_id] = result.baselines
        self._keep_erasures(result.effects.writes)
        return result.effects.outputs

    def _keep_erasures(self, writes: Iterable[object]) -> None:
        self.erasures.extend(w for w in writes if isinstance(w, ErasureCommand))

    def tick(self, tick: Tick, user_ids: Iterable[str]) -> tuple[Output, ...]:
        """A tick of the partition that holds ``user_ids``: each of them swept at its time,
        in the order of their ids (the worker's order)."""
        out: tuple[Output, ...] = ()
        for user_id in sorted(set(user_ids) & set(self.states)):
            result = sweep(self.states[user_id], self.baselines.get(user_id, UserBaselines()),
                           tick.ts_s, self.config)
            self.states[user_id] = result.state
            self.baselines[user_id] = result.baselines
            self._keep_erasures(result.effects.writes)
            out += result.effects.outputs
        return out


def replay(events: Iterable[FhrEvent], config: DriftConfig) -> list[Output]:
    """All outputs of ``events`` in order.

    >>> import numpy as np
    >>> from drift.outputs import DriftScore, Response
    >>> from drift.simulation import Scenario, simulate_user
    >>> events, _ = simulate_user(np.random.default_rng(5), Scenario.SAFETY_MISMATCH, "u", 1.7e9)
    >>> outs = replay(events, DriftConfig())
    >>> [o.checkpoint for o in outs if isinstance(o, DriftScore) and o.session_id == "u-s3"
    ...  and o.tier.label == "high"]
    ['session_start', 'turn_5', 'turn_10']
    >>> [o.action.value for o in outs if isinstance(o, Response) and o.session_id == "u-s3"]
    ['continuity_rebaseline_required']
    >>> replay(events, DriftConfig()) == outs
    True
    """
    runner = MemoryReplay(config)
    out: list[Output] = []
    for event in events:
        out.extend(runner.feed(event))
    return out
