"""Where detection happens on fixed seeded streams, through the real per-user fold.

The SPEC's detection properties (section 4) are measured at scale by
``bench/detection.py`` (figures in ``docs/scoring.md``); these tests pin them on a
few hundred seeded users so that a change to the scoring, the fold or the
simulator that moves detection shows up in the normal suite. The exact counts are
what the current defaults give on these seeds; a deliberate recalibration updates
them together with the figures in the docs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from drift.model import DriftConfig, Mode
from drift.replay import MemoryReplay
from drift.simulation import Scenario, SimParams, simulate
from streams.edge.wire import payload

RANK = {"low": 0, "medium": 1, "high": 2}
START_TS = 1.7e9


@dataclass(frozen=True)
class ScoredSession:
    """The scores of one user's test session (``tier``: that score's own evidence)."""

    user_id: str
    scores: tuple[tuple[str, str, str], ...]  # (checkpoint, tier, effective_tier)
    actions: tuple[str, ...]
    held_before: bool  # an earlier session of the user raised a HOLD

    def own(self) -> int:
        return max((RANK[t] for _, t, _ in self.scores), default=-1)

    def effective(self) -> int:
        return max((RANK[e] for _, _, e in self.scores), default=-1)

    def at(self, checkpoint: str) -> int:
        return max((RANK[t] for c, t, _ in self.scores if c == checkpoint), default=-1)


DEFAULT_PARAMS = SimParams()


@cache
def sessions(seed: int, scenario: Scenario, users: int, params: SimParams = DEFAULT_PARAMS
             ) -> tuple[ScoredSession, ...]:
    config = DriftConfig()
    out = []
    for events, truth in simulate(seed, [scenario], users, START_TS, params):
        replay = MemoryReplay(config)
        payloads: list[dict[str, Any]] = []
        for event in events:
            payloads.extend(payload(o) for o in replay.feed(event))
        test_id = next(t.session_id for t in truth if t.phase == "test")
        mine = [p for p in payloads if p.get("session_id") == test_id]
        earlier = [p for p in payloads if p.get("session_id") != test_id]
        out.append(ScoredSession(
            events[0].user_id,
            tuple((p["checkpoint"], p["tier"], p["effective_tier"]) for p in mine
                  if p.get("score_kind") == "continuity_drift"),
            tuple(p["action"] for p in mine if "action" in p),
            any(p.get("action") == "continuity_rebaseline_required" for p in earlier),
        ))
    return tuple(out)


def count(items: tuple[ScoredSession, ...], pred: Any) -> int:
    return sum(1 for s in items if pred(s))


# --------------------------------------------------------------------------- no change


def test_stable_users_rarely_reach_medium_and_almost_never_high() -> None:
    stable = sessions(101, Scenario.STABLE, 400)
    medium = count(stable, lambda s: s.own() >= 1)
    high = count(stable, lambda s: s.own() >= 2)
    # SPEC: at most 5% medium+ and 1% high; the defaults spend about 3.6% and 0.45%.
    assert medium <= 20 and high <= 4
    assert (medium, high) == (14, 1)


def test_a_hold_from_a_baseline_session_is_the_only_way_a_stable_session_is_held() -> None:
    stable = sessions(101, Scenario.STABLE, 400)
    carried = [s for s in stable if s.effective() > s.own()]
    assert carried, "these seeds include users held over from a baseline session"
    for s in carried:
        assert s.held_before and s.effective() == 2
        assert s.scores[0][2] == "high", "the HOLD is in force from the first score"
        assert "continuity_rebaseline_required" not in s.actions
    assert len(carried) == 2


# --------------------------------------------------------------------------- attunement


def test_a_one_and_a_half_sd_shift_is_caught_at_the_first_checkpoint() -> None:
    shifted = sessions(202, Scenario.ATTUNEMENT_SHIFT, 200, SimParams(shift_sd=1.5))
    first = count(shifted, lambda s: s.at("turn_5") >= 1)
    by_end = count(shifted, lambda s: s.own() >= 1)
    # SPEC: at least 88% at the first checkpoint (the benchmark measures 90.3%).
    assert first >= 176
    assert (first, by_end) == (180, 193)


def test_where_detection_happens_for_the_first_shifted_users() -> None:
    shifted = sessions(202, Scenario.ATTUNEMENT_SHIFT, 200, SimParams(shift_sd=1.5))
    assert [(s.user_id, s.scores) for s in shifted[:4]] == [
        ("attunement_shift-0000", (("turn_5", "high", "high"), ("turn_10", "medium", "high"))),
        ("attunement_shift-0001", (("turn_5", "high", "high"), ("turn_10", "medium", "high"))),
        ("attunement_shift-0002", (("turn_5", "medium", "medium"),
                                   ("turn_10", "medium", "medium"))),
        ("attunement_shift-0003", (("turn_5", "high", "high"), ("turn_10", "high", "high"))),
    ]


def test_a_light_mode_shift_of_style_features_is_caught() -> None:
    shifted = sessions(303, Scenario.ATTUNEMENT_SHIFT, 100,
                       SimParams(shift_sd=1.5, mode=Mode.LIGHT))
    first = count(shifted, lambda s: s.at("turn_5") >= 1)
    assert first >= 80
    assert first == 88


# --------------------------------------------------------------------------- semantic, safety


def test_half_the_commitments_contradicted_is_always_medium_or_higher() -> None:
    contradicted = sessions(404, Scenario.SEMANTIC_CONTRADICTION, 100,
                            SimParams(contradicted_share=0.5))
    assert all(s.at("turn_5") >= 1 for s in contradicted)


def test_contradiction_with_an_attunement_shift_is_high() -> None:
    combined = sessions(505, Scenario.COMBINED, 100,
                        SimParams(shift_sd=1.5, contradicted_share=0.5))
    high = count(combined, lambda s: s.own() >= 2)
    assert high >= 90
    assert high == 100


def test_a_safety_mismatch_is_high_from_session_start() -> None:
    mismatched = sessions(606, Scenario.SAFETY_MISMATCH, 50)
    for s in mismatched:
        assert s.scores[0][:2] == ("session_start", "high")
        assert all(t == "high" for _, t, _ in s.scores)
        assert "continuity_rebaseline_required" in s.actions
