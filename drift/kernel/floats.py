"""Python's floats from compiled code: the C functions Python calls, and NumPy's sum order.

A compiled twin of a reference function must give its floats to the last bit. Where the
reference calls the C library (``math.exp``, ``x ** 2``, which is ``pow``) or SciPy's
special functions, the twin calls the same C functions by a symbol of their own
(:func:`external`), so that LLVM neither inlines its own versions nor rewrites them; and
its sums follow :func:`drift.sums.array_sum`'s order (:func:`array_sum`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import cast

import llvmlite.binding as llvm
import numpy as np
import numpy.typing as npt
from numba import config, types
from numba.extending import get_cython_function_address

from drift.kernel.jit import compiled


def external(name: str, address: int, args: int) -> Callable[..., float]:
    """The C function at ``address``, callable from compiled code by a symbol of its own
    (so the compiled code refers to it by name, numba's disk cache stays usable, and LLVM
    does not take it for a function it knows and rewrite it). With ``NUMBA_DISABLE_JIT=1``
    the kernels run as Python and call it through ctypes."""
    if getattr(config, "DISABLE_JIT", False):  # numba.config sets it from the environment
        c_double = ctypes.c_double
        return cast(Callable[..., float],
                    ctypes.CFUNCTYPE(c_double, *([c_double] * args))(address))
    symbol = f"continuity_drift_{name}"
    llvm.add_symbol(symbol, address)
    return cast(Callable[..., float],
                types.ExternalFunction(symbol, types.float64(*([types.float64] * args))))


def special(name: str, args: int) -> Callable[..., float]:
    """A SciPy special function by its C entry point."""
    return external(name, get_cython_function_address("scipy.special.cython_special", name),
                     args)


def libm(name: str, args: int) -> Callable[..., float]:
    """A function of the C library this process runs with (the one Python calls)."""
    address = ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value
    if address is None:
        raise ImportError(f"the C library has no {name}")
    return external(name, address, args)


#: Python's ``z ** 2`` is C's ``pow(z, 2.0)``, which is not ``z * z`` for about one float
#: in a thousand (it is not correctly rounded there); numba and LLVM would compile either
#: spelling to ``z * z``, so the reference's squares come from pow itself.
c_pow = libm("pow", 2)
c_exp = libm("exp", 1)
"""Python's ``math.exp`` is the C library's ``exp``; LLVM may compile its own."""


@compiled("f8(f8[::1])")
def array_sum(values: npt.NDArray[np.float64]) -> float:
    """:func:`drift.sums.array_sum`, in its order."""
    n = values.shape[0]
    if n < 8:
        total = -0.0
        for i in range(n):
            total += values[i]
        return total
    if n <= 128:
        r = values[:8].copy()
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = float(((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])))
        while i < n:
            total += values[i]
            i += 1
        return total
    half = n // 2
    half -= half % 8
    return array_sum(values[:half].copy()) + array_sum(values[half:].copy())
