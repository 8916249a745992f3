"""The semantic and safety components, and the composite score with its tier.

The attunement component is :mod:`drift.attunement`; each component is calibrated
evidence on one scale (``docs/scoring.md``), so the composite adds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drift.evolve import fast_init
from drift.model import DriftConfig, Tier


def semantic_drift(referenced: Mapping[str, str]) -> float | None:
    """Share of referenced baseline commitments whose latest stance contradicts or retracts.

    ``None`` when the session referenced none of them.

    >>> semantic_drift({"c1": "affirm", "c2": "contradict", "c3": "retract", "c4": "affirm"})
    0.5
    >>> semantic_drift({}) is None
    True
    """
    if not referenced:
        return None
    broken = sum(1 for stance in referenced.values() if stance in ("contradict", "retract"))
    return broken / len(referenced)


def safety_drift(baseline: tuple[str, str, str], current: tuple[str, str, str]) -> float:
    """Share of the safety fields (gate config, drift policy, consent state) that differ.

    >>> safety_drift(("g1", "p1", "c1"), ("g1", "p2", "c1"))
    0.3333333333333333
    """
    changed = (baseline[0] != current[0]) + (baseline[1] != current[1]) \
        + (baseline[2] != current[2])
    return changed / 3


@fast_init
@dataclass(frozen=True, slots=True)
class Composite:
    score: float
    tier: Tier
    driver: str


def composite(
    attunement: float | None, semantic: float | None, safety: float | None,
    config: DriftConfig,
) -> Composite | None:
    """Combine the available components into ``continuity_drift_score`` and its tier.

    The components are calibrated evidence on one scale, so the composite is
    their weighted sum, capped at 1: with no semantic or safety change it equals
    the attunement component and keeps its false-alarm rates; independent
    evidence from several components adds up. Any safety mismatch is high.

    >>> cfg = DriftConfig()
    >>> composite(0.2, None, 0.0, cfg)
    Composite(score=0.2, tier=<Tier.LOW: 0>, driver='attunement')
    >>> composite(0.35, 0.5, 0.0, cfg).tier.label
    'high'
    >>> composite(0.0, None, 1 / 3, cfg).tier.label
    'high'
    >>> composite(None, None, None, cfg) is None
    True
    """
    # Straight-line on purpose: every checkpoint scores here. The weighted components are
    # added left to right (as drift.sums.left_sum does) and the driver is the first of the
    # largest, in the order attunement, semantic, safety.
    total, driver, top = 0.0, "", 0.0
    if attunement is not None:
        top = attunement * config.weight_attunement
        total, driver = total + top, "attunement"
    if semantic is not None:
        weighted = semantic * config.weight_semantic
        total += weighted
        if not driver or weighted > top:
            driver, top = "semantic", weighted
    if safety is not None:
        weighted = safety * config.weight_safety
        total += weighted
        if not driver or weighted > top:
            driver, top = "safety", weighted
    if not driver:
        return None
    score = min(1.0, total)
    if safety:
        return Composite(max(score, config.threshold_high), Tier.HIGH, "safety")
    tier = (Tier.HIGH if score >= config.threshold_high
            else Tier.MEDIUM if score >= config.threshold_medium else Tier.LOW)
    return Composite(score, tier, driver)
