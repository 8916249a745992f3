"""``fast_init``: the same constructor as the dataclass's own, or a refusal at import."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drift.evolve import evolve, fast_init
from drift.model import FhrEvent, SessionEnd, Turn


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "b"
    c: tuple[int, ...] = ()


Fast = fast_init(dataclass(frozen=True, slots=True)(type("Fast", (), {
    "__annotations__": {"a": "int", "b": "str", "c": "tuple[int, ...]"}, "b": "b", "c": ()})))


@given(st.integers(), st.none() | st.text(max_size=5), st.none() | st.tuples(st.integers()))
def test_a_fast_init_takes_the_arguments_the_generated_one_does(a, b, c) -> None:
    kwargs = {k: v for k, v in (("b", b), ("c", c)) if v is not None}
    plain, fast = Plain(a, **kwargs), Fast(a, **kwargs)
    assert dataclasses.astuple(plain) == dataclasses.astuple(fast)
    assert Fast(*dataclasses.astuple(plain)) == fast
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.a = 1  # type: ignore[misc]


NoSlots = fast_init(dataclass(frozen=True)(type("NoSlots", (), {
    "__annotations__": {"a": "int", "b": "str"}, "b": "b"})))


def test_a_class_without_slots_gets_its_dict_at_once() -> None:
    value = NoSlots(1)
    assert value.__dict__ == {"a": 1, "b": "b"} and NoSlots(1, b="c").b == "c"
    assert value == NoSlots(a=1) and hash(value) == hash(NoSlots(1, "b"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.a = 2  # type: ignore[attr-defined]


def test_the_values_built_for_every_record_are_frozen_structs_evolved_alike() -> None:
    turn = Turn.neutral(3, crisis=True)
    assert [getattr(turn, f) for f in Turn.__struct_fields__] == [
        3, 0.5, 0.5, 0.0, False, False, 40, 900.0, "none", False, False, True, False]
    event = FhrEvent("e", "session_end", 1.0, "u", "s", False, SessionEnd(1, "closed"))
    moved = evolve(event, user_id="v", ts_s=2.0)
    assert (moved.user_id, moved.ts_s, moved.body) == ("v", 2.0, event.body)
    assert moved == FhrEvent("e", "session_end", 2.0, "v", "s", False, SessionEnd(1, "closed"))
    assert hash(moved) == hash(evolve(moved, user_id="v")) and event.user_id == "u"
    with pytest.raises(AttributeError):
        event.user_id = "w"  # type: ignore[misc]
    with pytest.raises(TypeError):
        evolve(event, nope=1)
    with pytest.raises(TypeError):
        Turn(1)  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", [
    dataclass(slots=True)(type("NotFrozen", (), {"__annotations__": {"a": "int"}})),
    dataclass(frozen=True, slots=True)(type("Factory", (), {
        "__annotations__": {"a": "list[int]"}, "a": field(default_factory=list)})),
    dataclass(frozen=True, slots=True)(type("Post", (), {
        "__annotations__": {"a": "int"}, "__post_init__": lambda self: None})),
])
def test_what_it_cannot_keep_the_meaning_of_is_refused(cls: type) -> None:
    with pytest.raises(TypeError):
        fast_init(cls)
