"""The fold, event by event: the memory-governance rules (SPEC section 6) by mode,
confirmation and blocking state (logs from :mod:`tests.drift.fold_log`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from drift.model import MemoryWrite, MemoryWriteBlocked, Mode, Turn
from drift.outputs import OutputKind
from tests.drift.fold_log import CFG, CONSENT, Log, Run, relational_write, run, turn


def governance(mode: Mode, turns: Iterable[Turn], write: MemoryWrite) -> Run:
    log = Log()
    log.start("g", mode=mode)
    for t in turns:
        log.add("g", t)
    log.add("g", write)
    return run(log.events)


@pytest.mark.parametrize("mode", [Mode.STATELESS, Mode.SESSION_ONLY])
def test_relational_writes_are_forbidden_without_continuity(mode: Mode) -> None:
    result = governance(mode, [turn(1)], relational_write("style"))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_mode_forbidden"]
    assert violations[0]["reason"] == f"mode_{mode.value}"


def test_light_mode_forbids_topic_and_permits_style() -> None:
    forbidden = governance(Mode.LIGHT, [turn(1)], relational_write("topic"))
    assert forbidden.rules() == ["relational_write_mode_forbidden"]
    assert forbidden.of(OutputKind.VIOLATION)[0]["reason"] == "category_not_permitted_in_light"
    for category in ("style", "boundaries", "friction_history"):
        assert governance(Mode.LIGHT, [turn(1)], relational_write(category)).rules() == []


def test_full_mode_permits_every_category_once_confirmed() -> None:
    for category in ("topic", "emotional_trajectory", "resonance", "trust_trajectory"):
        assert governance(Mode.FULL, [turn(1)], relational_write(category)).rules() == []


def test_other_memory_classes_and_blocked_writes_are_not_audited() -> None:
    log = Log()
    log.start("g", mode=Mode.SESSION_ONLY)
    log.add("g", turn(1, crisis=True))
    log.add("g", MemoryWrite(1, "explicit", "style", "pin", CONSENT, False))
    log.add("g", MemoryWriteBlocked(1, "relational", "crisis"))
    assert run(log.events).outputs == []


@pytest.mark.parametrize(("states", "reason"), [
    ({"crisis": True}, "crisis"),
    ({"ae_severity": "med"}, "ae_active"),
    ({"ae_severity": "high"}, "ae_active"),
    ({"care_override": True}, "care_override"),
    ({"care_cooloff": True}, "care_cooloff"),
    ({"legal_hold": True}, "legal_hold"),
])
def test_a_write_in_a_blocking_state_is_a_violation(states: dict[str, Any], reason: str
                                                    ) -> None:
    result = governance(Mode.FULL, [turn(1), turn(2, **states)], relational_write(k=2))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_in_blocked_state"]
    assert violations[0]["reason"] == reason


@pytest.mark.parametrize("states", [{}, {"ae_severity": "low"}])
def test_a_write_outside_a_blocking_state_is_compliant(states: dict[str, Any]) -> None:
    assert governance(Mode.FULL, [turn(1), turn(2, **states)], relational_write(k=2)).rules() == []


def test_a_blocking_state_ends_with_the_next_clear_turn() -> None:
    result = governance(Mode.FULL, [turn(1, crisis=True), turn(2)], relational_write(k=2))
    assert result.rules() == []


def _resonant(k: int, reflection: bool = False) -> Turn:
    return turn(k, resonance_depth=0.85, reflection=reflection)


def test_sustained_high_resonance_without_reflection_blocks_writes() -> None:
    result = governance(Mode.FULL, [_resonant(1), _resonant(2), _resonant(3)], relational_write(k=3))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_in_blocked_state"]
    assert violations[0]["reason"] == "high_resonance_no_reflection"


def test_a_reflection_turn_clears_high_resonance() -> None:
    turns = [_resonant(1), _resonant(2), _resonant(3), _resonant(4, reflection=True)]
    assert governance(Mode.FULL, turns, relational_write(k=4)).rules() == []


def test_two_resonant_turns_are_not_yet_sustained() -> None:
    assert governance(Mode.FULL, [_resonant(1), _resonant(2)], relational_write(k=2)).rules() == []


def test_high_resonance_stays_blocking_until_a_reflection_even_if_it_eases() -> None:
    turns = [_resonant(1), _resonant(2), _resonant(3), turn(4)]
    assert governance(Mode.FULL, turns, relational_write(k=4)).rules() == [
        "relational_write_in_blocked_state"]


def test_exactly_the_threshold_resonance_counts_as_high() -> None:
    turns = [turn(k, resonance_depth=CFG.high_resonance) for k in (1, 2, 3)]
    assert governance(Mode.FULL, turns, relational_write(k=3)).rules() == [
        "relational_write_in_blocked_state"]


def test_an_unconfirmed_write_in_full_mode_is_a_violation() -> None:
    result = governance(Mode.FULL, [turn(1)], relational_write(confirmed=False))
    violations = result.of(OutputKind.VIOLATION)
    assert [v["rule"] for v in violations] == ["relational_write_unconfirmed"]
    assert violations[0]["reason"] == "not_confirmed"
    assert governance(Mode.FULL, [turn(1)], relational_write(confirmed=True)).rules() == []


def test_confirmation_is_required_only_in_full_mode() -> None:
    assert governance(Mode.LIGHT, [turn(1)], relational_write(confirmed=False)).rules() == []


def test_a_violation_names_its_event_user_and_session() -> None:
    log = Log(user_id="u9")
    log.start("g", mode=Mode.SESSION_ONLY)
    write = log.add("g", relational_write())
    violation = run(log.events).of(OutputKind.VIOLATION)[0]
    assert (violation["event_id"], violation["user_id"], violation["session_id"]) == (
        write.event_id, "u9", "g")
    assert violation["schema"] == "drift/1"


def test_one_write_can_break_several_rules() -> None:
    log = Log()
    log.start("g", mode=Mode.FULL)
    log.add("g", turn(1, crisis=True))
    log.add("g", relational_write(confirmed=False))
    assert sorted(run(log.events).rules()) == [
        "relational_write_in_blocked_state", "relational_write_unconfirmed"]
