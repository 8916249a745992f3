"""The users a worker holds in memory, and what of each its store may hold.

A user's state lives in memory between checkpoints; what the checkpoint may store of it
follows the user's mode (SPEC section 7). :class:`Memory` keeps the states and baselines
by user, the partition of each, and the rules that stage them
(:attr:`Memory.pending`, the checkpoint being gathered):

* a persistable state is staged as of its partition's next offset;
* a memory-only user (stateless, session_only, ephemeral-only) is never staged; outside a
  session the fold makes them a user never seen, and memory forgets them; a stored state
  of theirs (from before a downgrade) is dropped;
* a durable user in an ephemeral session keeps the stored state from before it, staged as
  of the record that opened it; :attr:`Memory.memory_since` says where a replay after a
  crash rebuilds each user whose state in memory is not the stored one.

The states live in :class:`~drift.kernel.UserColumns` (the compiled kernel's columns, with
``states`` and ``baselines`` views by user id). A state staged at the end of a batch is
built from its columns only when the checkpoint is taken (:meth:`Memory.take`): what it
holds then is the state as of the staged offset, since every batch that moves a user
stages them again. Its state object lets go of what the columns hold
(:meth:`~drift.kernel.UserColumns.strip`) at the next checkpoint that does not stage it
again, as does a user loaded from the store at once: a user who stays idle keeps only that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from baselines.store import BatchWrite
from drift.baseline import UserBaselines
from drift.fold import Step, initial
from drift.kernel import TakenState, UserColumns, take_slots
from drift.kernel.views import NO_BASELINES
from drift.model import DriftConfig
from drift.state import UserState
from streams import topics
from streams.processing.meter import Meter


class Memory:
    """Every owned user's state and baselines, and the checkpoint staged from them."""

    def __init__(self, meter: Meter, config: DriftConfig) -> None:
        self.meter = meter
        self.columns = UserColumns(config, capacity=1024)
        self.states = self.columns.states
        self.baselines = self.columns.baselines
        self.user_partition: dict[str, int] = {}
        self.stored: set[str] = set()
        """Users with a stored state: only theirs is dropped when it stops being persistable,
        so a user who never had one is never named in the store or the changelog."""
        self.as_of: dict[str, int] = {}
        """The offset of its partition that each stored state reflects the log up to."""
        self.memory_since: dict[str, int] = {}
        """Users whose state in memory is not the stored one (memory-only users in a session,
        durable users in an ephemeral one): the offset replaying them from rebuilds it."""
        self.pending = BatchWrite(topic=topics.INPUT)
        self.staged: dict[str, tuple[int, int]] = {}
        """Users whose current state is staged (built at :meth:`take`): partition, as of."""
        self.last_taken: set[str] = set()
        """The users the last checkpoint built: those of them the next one does not build have
        been idle for a whole interval, and it strips them (:meth:`take`)."""
        self.leaving: set[str] = set()
        """Users a step made memory-only outside a session while a batch is folded:
        :meth:`settle` forgets those still so at its end."""

    def state(self, user_id: str) -> UserState:
        """The user's state (a user not held: one never seen)."""
        return self.states.get(user_id) or initial(user_id)

    def baselines_of(self, user_id: str) -> UserBaselines:
        return self.baselines.get(user_id, NO_BASELINES)

    def users_of(self, partition: int) -> list[str]:
        """The users of ``partition`` with a state, in the order of their ids."""
        return sorted(u for u, p in self.user_partition.items()
                      if p == partition and u in self.states)

    def users_to_sweep(self, partition: int, ts_s: float) -> list[str]:
        """The users of ``partition`` whose state a sweep at event time ``ts_s`` may change
        (:meth:`~drift.kernel.views.StateView.may_be_due`, read from their slots without building
        their states), in the order of their ids: the others' sweep changes nothing."""
        may_be_due = self.columns.states.may_be_due
        return sorted(u for u, p in self.user_partition.items()
                      if p == partition and may_be_due(u, ts_s))

    def load(self, partition: int, states: Mapping[str, UserState],
             baselines: Mapping[str, UserBaselines], as_of: Mapping[str, int]) -> None:
        """Hold a partition's users as the store has them."""
        columns = self.columns
        for user_id, state in states.items():
            columns.put(user_id, state, baselines.get(user_id))
            columns.strip(user_id)
        for user_id in baselines.keys() - states.keys():
            self.baselines[user_id] = baselines[user_id]
        self.stored.update(states)
        self.as_of.update(as_of)
        self.user_partition.update({u: partition for u in (*states, *baselines)})

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the users of partitions no longer owned."""
        gone = set(partitions)
        leaving = [u for u, p in self.user_partition.items() if p in gone]
        self._build_staged(leaving)
        for u in leaving:
            self.columns.drop(u)
            self.leaving.discard(u)
            self.last_taken.discard(u)
            self.user_partition.pop(u, None)
            self.stored.discard(u)
            self.as_of.pop(u, None)
            self.memory_since.pop(u, None)

    def put(self, result: Step) -> None:
        """Hold a step's state and baselines."""
        self.columns.put(result.state.user_id, result.state, result.baselines)

    def track(self, before: UserState, result: Step, partition: int, offset: int, *,
              silent: bool = False, defer: bool = False) -> None:
        """Keep :attr:`memory_since` after the record at ``offset`` moved a user from
        ``before`` to ``result.state``, and forget a memory-only user outside a session (the
        fold made them a user never seen). A durable user who opens an ephemeral session
        keeps the stored state from before it, staged here as of this record; the
        baseline versions folded meanwhile (the close of a durable session that the
        ephemeral one's start superseded) are staged when the user may be stored again.
        ``silent`` (a replay) stages nothing: the checkpoint covered it. ``defer`` (a
        batch through the kernel, whose columns hold the state after the batch) leaves
        forgetting to :meth:`settle`."""
        state = result.state
        user_id = state.user_id
        if state.persistable:
            if not (silent or before.persistable or before.memory_only):
                self._stage_held(user_id, partition, result.baselines)
            self.memory_since.pop(user_id, None)
        elif state.memory_only:
            if state.session is None:
                if defer:
                    self.leaving.add(user_id)
                else:
                    self.columns.drop(user_id)
                self.memory_since.pop(user_id, None)
            else:
                self.memory_since.setdefault(user_id, offset)
        else:
            if before.persistable and not silent:
                self._stage_now(user_id, partition, before, offset)
                self.stored.add(user_id)
                self.as_of[user_id] = offset
            self.memory_since.setdefault(user_id, self.as_of.get(user_id, offset))

    def settle(self) -> None:
        """After a batch through the kernel: forget the users it left memory-only outside a
        session (as :meth:`track` does at once), and the slots of users it met but holds
        nothing of (an event that raised)."""
        columns = self.columns
        for user_id in self.leaving:
            shell = columns.shell_of(user_id)
            if shell is None or (shell.memory_only and shell.session is None):
                columns.drop(user_id)
        self.leaving.clear()
        for user_id in columns.fresh:
            if user_id not in self.states and user_id not in self.baselines:
                columns.drop(user_id)
        columns.fresh.clear()

    def _stage_held(self, user_id: str, partition: int, current: UserBaselines) -> None:
        """Stage a user's current baseline versions, which may not be stored yet: the
        stored state they follow from was held back from before an ephemeral session, and
        storing them with it would fold the superseded session twice on a replay. Versions
        are keyed by id, so one stored already is written again to no effect."""
        for baseline in (current.attunement, current.semantic, current.safety):
            if baseline is not None and (partition, baseline) not in self.pending.baselines:
                self.pending.baselines.append((partition, baseline))
                self.meter.count(self.meter.metrics.baseline_versions, baseline.meta.kind.value)

    def stage(self, users: Mapping[str, int], offsets: Mapping[int, int]) -> None:
        """Stage each of ``users`` (user id: partition) as of their partition's next offset
        in ``offsets``; a memory-only user's stored state goes (a durable user in an
        ephemeral session keeps theirs). The states are built when the checkpoint is taken
        (:meth:`take`). One call a batch: every user a batch moved."""
        shell_of, staged, stored, as_of = (self.columns.shell_of, self.staged, self.stored,
                                           self.as_of)
        for user_id, partition in users.items():
            state = shell_of(user_id) or initial(user_id)
            if state.persistable:
                offset = offsets.get(partition, 0)
                staged[user_id] = (partition, offset)
                stored.add(user_id)
                as_of[user_id] = offset
            elif state.memory_only and user_id in stored:
                self._stage_now(user_id, partition, None)
                stored.discard(user_id)
                as_of.pop(user_id, None)

    def take(self) -> BatchWrite:
        """The checkpoint staged since the last one, with the offset each of its partitions
        is replayed from after a crash; starts anew. The users the last checkpoint built and
        this one does not (idle since) let go of what the columns hold: the next read builds
        it again. The users active since keep it: most of them come back before the next
        checkpoint, and stripping them at once cost the worker 7-8% of its rate
        (docs/performance.md)."""
        taken = list(self.staged)
        self._build_staged(taken)
        for user_id in self.last_taken.difference(taken):
            self.columns.strip(user_id)
        self.last_taken = set(taken)
        write, self.pending = self.pending, BatchWrite(topic=topics.INPUT)
        for user_id, since in self.memory_since.items():
            p = self.user_partition.get(user_id, -1)
            if p in write.offsets:
                write.replay_from[p] = min(since, write.replay_from.get(p, since))
        return write

    def _stage_now(self, user_id: str, partition: int, state: UserState | None,
                   as_of: int = 0) -> None:
        """Stage ``state`` (None: drop the stored one) in place of any staged before."""
        self.staged.pop(user_id, None)
        self.pending.stage_state(user_id, partition, state, as_of)

    def _build_staged(self, users: list[str]) -> None:
        """Stage the states :meth:`stage` named for those of ``users`` it named, as the columns
        hold them now (:func:`~drift.kernel.parts.take_slots`: the checkpoint's thread encodes
        them from there, without each state object built here)."""
        users = [u for u in users if u in self.staged]
        slots, whole = take_slots(self.columns, users)
        of_slots = {user_id: TakenState(slots, i) for i, user_id in enumerate(slots.users)}
        for user_id in users:
            partition, as_of = self.staged.pop(user_id)
            state = of_slots.get(user_id)
            self.pending.stage_state(user_id, partition,
                                     whole[user_id] if state is None else state, as_of)
