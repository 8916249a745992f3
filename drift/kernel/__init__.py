"""The compiled batch kernel beside the reference fold (:mod:`drift.fold`).

:func:`fold_batch` applies a batch of events to :class:`UserColumns` (every user's
state as a struct of arrays, one slot per user): the kernel takes the plain turns
and duplicates, the reference fold every other event, and the two give the same
effects and states (``tests/drift/test_kernel.py`` holds them equal). The
reference fold never imports this package.
"""

from drift.kernel.batch import BatchFold, Outcome, fold_batch
from drift.kernel.columns import UserColumns

__all__ = ["BatchFold", "Outcome", "UserColumns", "fold_batch"]
