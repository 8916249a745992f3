"""Sums of floats, bit for bit: NumPy's order over plain sequences, and Python 3.11's
``sum`` on any interpreter."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def left_sum(values: Iterable[float]) -> float:
    """``sum(values)`` as Python 3.11 adds floats: one by one, left to right.

    From Python 3.12 the built-in ``sum`` compensates the rounding of a float sum, so the
    same values can add up to another last bit there; a score must not depend on the
    interpreter, nor differ from its compiled twin (which adds left to right).

    >>> xs = [0.1] * 10
    >>> left_sum(xs) == 0.9999999999999999, left_sum([])
    (True, 0.0)
    """
    total = 0.0
    for x in values:
        total += x
    return total


def array_sum(values: Sequence[float]) -> float:
    """``numpy.sum`` of ``values``, bit for bit, without building an array.

    NumPy adds short runs in order and longer ones pairwise in blocks of eight;
    the scores must not depend on which of the two computed them.

    >>> import numpy as np
    >>> xs = [0.1 * k for k in range(1, 20)]
    >>> array_sum(xs) == float(np.sum(xs)), array_sum(xs[:5]) == float(np.sum(xs[:5]))
    (True, True)
    """
    n = len(values)
    if n < 8:
        total = -0.0
        for x in values:
            total += x
        return total
    if n <= 128:
        r = list(values[:8])
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for x in values[i:]:
            total += x
        return total
    half = n // 2
    half -= half % 8
    return array_sum(values[:half]) + array_sum(values[half:])


def column_means(rows: Sequence[Sequence[float]]) -> list[float]:
    """Per-column means of ``rows``, summed row after row and divided by the count.

    For fewer than 8 rows (every early window and late profile at the default
    configuration) these are the floats NumPy's ``mean(axis=0)`` gives; from 8 rows
    NumPy may sum in pairwise blocks and differ in the last bits.

    >>> column_means([(1.0, 0.0), (2.0, 1.0)])
    [1.5, 0.5]
    >>> import numpy as np
    >>> rows = [(0.1, 0.7), (0.2, 0.3), (0.3, 0.9)]
    >>> column_means(rows) == np.asarray(rows).mean(axis=0).tolist()
    True
    """
    total = [float(x) for x in rows[0]]
    for row in rows[1:]:
        total = [a + float(b) for a, b in zip(total, row, strict=True)]
    n = len(rows)
    return [t / n for t in total]
