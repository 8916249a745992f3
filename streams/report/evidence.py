"""What the outputs say about one user, as both of the report's aggregates read it.

Who is shown on their own (:func:`shown_individually`): a user appears, under
``baselines.erasure.user_ref`` and never under their id, only when the outputs
show them in a baselining mode: their latest evidence of a mode is a
``continuity_drift`` score with ``mode`` light or full (the only output that
names the mode), not a later ``relational_write_mode_forbidden`` violation
for stateless / session_only or a downgrade receipt that erased everything.
Everyone else counts in the aggregates only. Beside it: a user's HOLD as of a
time (:func:`holds_at`) and what drove a score (:class:`Driver`).

>>> import numpy as np
>>> from drift.model import DriftConfig
>>> from drift.replay import replay
>>> from drift.simulation import Scenario, simulate_user
>>> from streams.report.messages import outputs_of
>>> events, _ = simulate_user(np.random.default_rng(5), Scenario.SAFETY_MISMATCH, "u", 1.7e9)
>>> outputs = outputs_of(replay(events, DriftConfig()))
>>> shown_individually(outputs, "2023-11-20")
{'u'}
>>> hold = holds_at(outputs.responses, "2023-11-20")["u"]
>>> hold.open, hold.kinds
(True, ('safety',))
"""

# The example replays the simulated user that the overview's does: each module's example
# runs on its own, as its reader meets it.

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from drift.model import Mode, Tier
from drift.outputs import Action, Rule
from streams.report.messages import (
    AttributionMsg,
    FeatureMoved,
    Outputs,
    ReceiptMsg,
    ResponseMsg,
    ViolationMsg,
)

TIERS = tuple(t.label for t in Tier)
TIER_RANK = {t.label: int(t) for t in Tier}
BASELINING_MODES = frozenset(m.value for m in Mode if m.keeps_baselines)
#: The reason codes of ``relational_write_mode_forbidden`` in a mode that keeps nothing.
KEEPS_NOTHING_REASONS = frozenset(f"mode_{m.value}" for m in Mode if not m.keeps_baselines)


def keeps_nothing(m: ViolationMsg | ReceiptMsg) -> bool:
    """Whether an output shows its user in a mode that keeps nothing about them."""
    if isinstance(m, ViolationMsg):
        return m.rule == Rule.MODE_FORBIDDEN.value and m.reason in KEEPS_NOTHING_REASONS
    return m.reason == "mode_downgrade" and m.replacement is None


def shown_individually(outputs: Outputs, until: str) -> set[str]:
    """The user ids whose latest evidence of a mode before ``until`` is a baselining one."""
    baselining: dict[str, str] = {}
    for s in outputs.scores:
        if s.mode in BASELINING_MODES and s.event_ts < until and s.event_ts > baselining.get(
                s.user_id, ""):
            baselining[s.user_id] = s.event_ts
    nothing: dict[str, str] = {}
    evidence: list[ViolationMsg | ReceiptMsg] = [*outputs.violations, *outputs.receipts]
    for m in evidence:
        if m.event_ts < until and keeps_nothing(m) and m.event_ts > nothing.get(m.user_id, ""):
            nothing[m.user_id] = m.event_ts
    return {u for u, ts in baselining.items() if ts > nothing.get(u, "")}


@dataclass(frozen=True, slots=True)
class HoldState:
    open: bool
    since: str
    kinds: tuple[str, ...]


def holds_at(responses: Iterable[ResponseMsg], until: str) -> dict[str, HoldState]:
    """Each user's HOLD as of ``until``: opened by ``continuity_rebaseline_required``, lifted
    by ``hold_released`` (event time order; ties keep the order the worker published)."""
    events: dict[str, list[ResponseMsg]] = defaultdict(list)
    for r in responses:
        if r.event_ts < until and r.action in (Action.REBASELINE_REQUIRED.value,
                                               Action.HOLD_RELEASED.value):
            events[r.user_id].append(r)
    out = {}
    for user, rs in events.items():
        rs.sort(key=lambda r: r.event_ts)
        last = rs[-1]
        out[user] = HoldState(last.action == Action.REBASELINE_REQUIRED.value, last.event_ts,
                              last.hold_kinds)
    return out


@dataclass(frozen=True, slots=True)
class Moved:
    """A feature that moved most in a score's attribution."""

    feature: str
    direction: str
    z: float

    @staticmethod
    def of(f: FeatureMoved) -> Moved:
        return Moved(f.feature, f.direction, round(f.z, 2))


@dataclass(frozen=True, slots=True)
class Driver:
    """What a score's attribution says drove it: the component, its statistic (attunement: the
    adjusted p-value of its test; semantic and safety: the share of commitments or fields that
    changed) and, for attunement, the features that moved most."""

    component: str
    statistic: str | None
    value: float | None
    features: tuple[Moved, ...]

    @staticmethod
    def of(a: AttributionMsg) -> Driver:
        st = a.statistic
        value = None if st is None else (st.p_adjusted if st.p_adjusted is not None else st.value)
        return Driver(a.component, st.name if st is not None else None,
                      round(value, 4) if value is not None else None,
                      tuple(Moved.of(f) for f in a.features[:3]))

