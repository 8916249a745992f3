"""The two views of :class:`~drift.kernel.columns.UserColumns` by user id: its users'
states (:class:`StateView`) and baselines (:class:`BaselineView`), mutable mappings, so a
shell can hold the columns where it held two dicts. Reading a state builds it from its slot;
writing one loads it into its slot.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING

from drift.baseline import UserBaselines
from drift.kernel.layout import F_EXPIRE, F_LAST, HAS_SESSION, I_FLAGS, PY_ONLY
from drift.state import UserState

if TYPE_CHECKING:
    from drift.kernel.columns import UserColumns

NO_BASELINES = UserBaselines()


class _SlotView:
    """What both views share: the columns, and the slots that hold the view's value."""

    def __init__(self, cols: UserColumns) -> None:
        self._cols = cols

    def _holds(self, s: int) -> bool:
        raise NotImplementedError

    def _slot(self, user_id: str) -> int:
        """The user's slot, if it holds the view's value; else ``KeyError``."""
        s = self._cols._index.get(user_id)
        if s is None or not self._holds(s):
            raise KeyError(user_id)
        return s

    def _clear(self, s: int) -> None:
        raise NotImplementedError

    def __contains__(self, user_id: object) -> bool:
        s = self._cols._index.get(user_id) if isinstance(user_id, str) else None
        return s is not None and self._holds(s)

    def __delitem__(self, user_id: str) -> None:
        s = self._slot(user_id)
        self._clear(s)
        self._cols._release_if_empty(s)

    def __iter__(self) -> Iterator[str]:
        return iter([u for u, s in self._cols._index.items() if self._holds(s)])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class StateView(_SlotView, MutableMapping[str, UserState]):
    """The users' states by user id (a user with only baselines has none)."""

    def _holds(self, s: int) -> bool:
        return self._cols._shells[s] is not None

    def __getitem__(self, user_id: str) -> UserState:
        return self._cols.state_at(self._slot(user_id))

    def __setitem__(self, user_id: str, state: UserState) -> None:
        cols = self._cols
        cols.put_at(cols.slot(user_id), state)

    def _clear(self, s: int) -> None:
        cols = self._cols
        cols._shells[s] = None
        cols._load(s, UserState(cols._users[s]), cols.baselines_at(s))

    def may_be_due(self, user_id: str, ts_s: float) -> bool:
        """Whether :func:`drift.fold.sweep` at event time ``ts_s`` may change the user's
        state: an idle close or an expiry may be due (:func:`drift.fold.due`), or the user
        is memory-only outside a session. Read from the slot without building the state;
        False only where the sweep surely changes nothing, so a tick, and the check for
        one, build only the states of the users it may reach (and leave the others
        stripped).

        >>> from drift.kernel.columns import UserColumns
        >>> from drift.model import DriftConfig, Mode
        >>> cols = UserColumns(DriftConfig())
        >>> cols.states["u"] = UserState("u", Mode.FULL, durable=True)
        >>> cols.states.may_be_due("u", 1e9), cols.states.may_be_due("nobody", 1e9)
        (False, False)
        """
        cols = self._cols
        s = cols._index.get(user_id)
        shell = None if s is None else cols._shells[s]
        if shell is None:
            return False
        flags = int(cols.icols[s, I_FLAGS])
        if flags & PY_ONLY or ts_s >= cols.fcols[s, F_EXPIRE]:
            return True
        if flags & HAS_SESSION:
            return bool(cols.fcols[s, F_LAST] + cols.config.idle_timeout_s <= ts_s)
        return shell.memory_only


class BaselineView(_SlotView, MutableMapping[str, UserBaselines]):
    """The users' baselines by user id."""

    def _holds(self, s: int) -> bool:
        return self._cols._baselines[s] is not None

    def __getitem__(self, user_id: str) -> UserBaselines:
        cols = self._cols
        s = cols._index.get(user_id)
        b = cols._baselines[s] if s is not None else None
        if b is None:
            raise KeyError(user_id)
        return b

    def __setitem__(self, user_id: str, baselines: UserBaselines) -> None:
        cols = self._cols
        cols._set_baselines(cols.slot(user_id), baselines)

    def _clear(self, s: int) -> None:
        self._cols._set_baselines(s, NO_BASELINES)
        self._cols._baselines[s] = None
