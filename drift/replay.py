"""Run events through the fold with baselines held in memory (no store, no broker).

The benchmark harness and the tests use it; the worker does the same with its
store and Kafka around it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from drift.baseline import UserBaselines
from drift.model import DriftConfig, FhrEvent
from drift.outputs import Output
from drift.processor import UserState, close_idle, step


@dataclass
class MemoryReplay:
    """Users' states and current baselines, in memory."""

    config: DriftConfig
    states: dict[str, UserState] = field(default_factory=dict)
    baselines: dict[str, UserBaselines] = field(default_factory=dict)

    def feed(self, event: FhrEvent) -> list[Output]:
        state = self.states.setdefault(event.user_id, UserState(event.user_id))
        effects, after = step(state, event, self.baselines.get(event.user_id, UserBaselines()),
                              self.config)
        self.baselines[event.user_id] = after
        return effects.outputs

    def close_all_idle(self, now_s: float) -> list[Output]:
        out: list[Output] = []
        for user_id, state in self.states.items():
            effects, after = close_idle(state, self.baselines.get(user_id, UserBaselines()),
                                        now_s, self.config)
            self.baselines[user_id] = after
            out.extend(effects.outputs)
        return out


def replay(events: Iterable[FhrEvent], config: DriftConfig) -> list[Output]:
    """All outputs of ``events`` in order.

    >>> import numpy as np
    >>> from drift.simulation import Scenario, simulate_user
    >>> events, _ = simulate_user(np.random.default_rng(5), Scenario.SAFETY_MISMATCH, "u", 1.7e9)
    >>> outs = replay(events, DriftConfig())
    >>> last = [o.payload for o in outs if o.payload["session_id"] == "u-s3"]
    >>> [(p.get("checkpoint"), p.get("action")) for p in last if p.get("tier") == "high"]
    [('session_start', None), (None, 'continuity_rebaseline_required'), ('turn_5', None), ('turn_10', None)]
    >>> replay(events, DriftConfig()) == outs
    True
    """
    runner = MemoryReplay(config)
    out: list[Output] = []
    for event in events:
        out.extend(runner.feed(event))
    return out
