"""Typed access to numba's ``njit``: the kernels keep their signatures for mypy.

numba ships no type information, so a bare ``@njit`` would make every kernel an
untyped function. :func:`compiled` compiles eagerly for one explicit signature
(the first call then never compiles in the hot path) and caches the machine code
on disk (``cache=True``), and it hands the kernel back under its own Python type.
With ``NUMBA_DISABLE_JIT=1`` the kernel stays the plain Python function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])


def compiled(signature: str, *, cache: bool = True) -> Callable[[F], F]:
    """``numba.njit(signature, cache=cache)``, typed as the function it compiles.

    ``cache`` is for the kernels of a module on disk; a function defined at a prompt
    (as here) has no file to cache beside.

    >>> import numpy as np
    >>> @compiled("f8(f8[::1])", cache=False)
    ... def total(xs):
    ...     out = 0.0
    ...     for x in xs:
    ...         out += x
    ...     return out
    >>> float(total(np.array([0.5, 0.25])))
    0.75
    """
    def wrap(fn: F) -> F:
        return cast(F, numba.njit(signature, cache=cache)(fn))
    return wrap
