"""Frozen dataclasses made fast: ``evolve(value, **changes)`` and ``@fast_init``.

``dataclasses.replace`` looks up the fields and runs ``__init__`` on every call,
which costs microseconds per call on the fold's hot path. :func:`evolve` does the
same job without ``__init__`` (the fold's state classes have no ``__post_init__``):
for a class with a ``__dict__`` it copies that dict and updates it (the large,
often-changed state classes are built that way); for a slots class it calls a
function generated once per class and set of changed fields.

A frozen ``msgspec.Struct`` (the two values built for every record, :class:`drift.model.FhrEvent`
and its :class:`~drift.model.Turn`) is evolved by ``msgspec.structs.replace``.

:func:`fast_init` gives a frozen slots dataclass built on every event (a step and its
effects, a scored checkpoint's values) an ``__init__`` that fills each slot
through its descriptor instead of ``object.__setattr__`` by name: the same
signature and defaults, about half the cost (7.6% fewer instructions per record
through the engine, measured with callgrind; docs/performance.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import msgspec.structs

T = TypeVar("T")

_NEW = object.__new__
_SET = object.__setattr__
_MAKERS: dict[tuple[type, tuple[str, ...]], Callable[..., Any]] = {}


def _maker(cls: type, changed: tuple[str, ...]) -> Callable[..., Any]:
    if hasattr(cls, "__struct_fields__"):  # a frozen msgspec Struct: replaced in C
        return msgspec.structs.replace
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
        merged = {**fields, **changes}
        if len(merged) != len(fields):  # a name that is not a field added a key
            raise TypeError(f"{cls.__name__} has no field {min(changes.keys() - fields.keys())!r}")
        new = _NEW(cls)
        _SET(new, "__dict__", merged)
        return new
    key = (cls, tuple(changes))
    make = _MAKERS.get(key)
    if make is None:
        make = _MAKERS[key] = _maker(type(value), key[1])
    return make(value, **changes)  # type: ignore[no-any-return]


def fast_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of a frozen dataclass by one that sets its slots directly (or,
    without slots, its ``__dict__`` at once).

    Apply it above ``@dataclass(frozen=True, ...)``. Fields with a default
    factory, ``init=False`` or keyword-only fields, and ``__post_init__``, are refused.

    >>> from dataclasses import dataclass
    >>> @fast_init
    ... @dataclass(frozen=True, slots=True)
    ... class P:
    ...     x: int
    ...     y: tuple[int, ...] = ()
    >>> P(1), P(1, y=(2,)) == P(x=1, y=(2,)), P(1).__init__.__qualname__
    (P(x=1, y=()), True, 'P.__init__')
    >>> P(1).x = 2
    Traceback (most recent call last):
    ...
    dataclasses.FrozenInstanceError: cannot assign to field 'x'
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_init takes a frozen dataclass without "
                        "__post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    slots = "__slots__" in cls.__dict__
    scope: dict[str, Any] = {"set_": _SET}
    args, body = [], []
    for i, f in enumerate(fields):
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_init takes plain fields only")
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            scope[f"default_{i}"] = f.default
            args.append(f"{f.name}=default_{i}")
        if slots:
            scope[f"set_{i}"] = getattr(cls, f.name).__set__
            body.append(f"    set_{i}(self, {f.name})")
    if not slots:  # one __dict__ for all the fields, as evolve() makes them
        body.append(f"    set_(self, '__dict__', {{{', '.join(f'{f.name!r}: {f.name}' for f in fields)}}})")
    lines = [f"def __init__(self{''.join(', ' + a for a in args)}):", *(body or ["    pass"])]
    exec("\n".join(lines), scope)  # noqa: S102 - code built from the dataclass's own fields
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
