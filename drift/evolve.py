"""``evolve(value, **changes)``: a frozen dataclass with some fields changed, made fast.

``dataclasses.replace`` looks up the fields and runs ``__init__`` on every call,
which costs microseconds per call on the fold's hot path. :func:`evolve` does the
same job without ``__init__`` (the fold's state classes have no ``__post_init__``):
for a class with a ``__dict__`` it copies that dict and updates it (the large,
often-changed state classes are built that way); for a slots class it calls a
function generated once per class and set of changed fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_NEW = object.__new__
_SET = object.__setattr__
_MAKERS: dict[tuple[type, tuple[str, ...]], Callable[..., Any]] = {}


def _maker(cls: type, changed: tuple[str, ...]) -> Callable[..., Any]:
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = set(changed) - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {min(unknown)!r}")
    lines = [f"def make(self, {', '.join(changed)}):", "    new = new_(cls)"]
    lines += [f"    set_(new, {n!r}, {n if n in changed else 'self.' + n})" for n in names]
    lines.append("    return new")
    scope: dict[str, Any] = {"cls": cls, "new_": object.__new__, "set_": object.__setattr__}
    exec("\n".join(lines), scope)  # noqa: S102 - code built from the dataclass's own fields
    return scope["make"]  # type: ignore[no-any-return]


def evolve(value: T, **changes: Any) -> T:
    """``value`` with ``changes`` applied; equal to ``dataclasses.replace(value, **changes)``.

    >>> from drift.state import Guard
    >>> evolve(Guard(("crisis",), 2, False), high_res_block=True)
    Guard(blocking=('crisis',), high_res_streak=2, high_res_block=True)
    >>> evolve(Guard(), nope=1)
    Traceback (most recent call last):
    ...
    TypeError: Guard has no field 'nope'
    """
    cls = type(value)
    if hasattr(value, "__dict__"):
        fields = value.__dict__
        if not changes.keys() <= fields.keys():
            raise TypeError(f"{cls.__name__} has no field {min(changes.keys() - fields.keys())!r}")
        new = _NEW(cls)
        _SET(new, "__dict__", {**fields, **changes})
        return new
    key = (cls, tuple(changes))
    make = _MAKERS.get(key)
    if make is None:
        make = _MAKERS[key] = _maker(type(value), key[1])
    return make(value, **changes)  # type: ignore[no-any-return]
