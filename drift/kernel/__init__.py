"""The compiled batch kernel beside the reference fold (:mod:`drift.fold`).

:func:`fold_batch` applies a batch of events to :class:`UserColumns` (every user's
state as a struct of arrays, one slot per user): the kernel takes the plain turns
and duplicates, the reference fold every other event, and the two give the same
effects and states (``tests/drift/test_kernel.py`` holds them equal). At a checkpoint,
:func:`take_slots` hands over the users' states as the columns hold them, for their
snapshots. The reference fold never imports this package; importing it compiles (or loads
from numba's cache) every kernel.
"""

from drift.kernel.batch import BatchFold, Outcome, fold_batch
from drift.kernel.columns import UserColumns
from drift.kernel.parts import TakenSlots, TakenState, take_slots

__all__ = ["BatchFold", "Outcome", "TakenSlots", "TakenState", "UserColumns", "fold_batch",
           "take_slots"]
