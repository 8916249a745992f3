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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from baselines.store import BatchWrite
from drift.baseline import UserBaselines
from drift.fold import Step, initial
from drift.state import UserState
from streams import topics
from streams.meter import Meter

NO_BASELINES = UserBaselines()


class Memory:
    """Every owned user's state and baselines, and the checkpoint staged from them."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.states: dict[str, UserState] = {}
        self.baselines: dict[str, UserBaselines] = {}
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

    def state(self, user_id: str) -> UserState:
        """The user's state (a user not held: one never seen)."""
        return self.states.get(user_id) or initial(user_id)

    def baselines_of(self, user_id: str) -> UserBaselines:
        return self.baselines.get(user_id, NO_BASELINES)

    def users_of(self, partition: int) -> list[str]:
        """The users of ``partition`` with a state, in the order of their ids."""
        return sorted(u for u, p in self.user_partition.items()
                      if p == partition and u in self.states)

    def load(self, partition: int, states: Mapping[str, UserState],
             baselines: Mapping[str, UserBaselines], as_of: Mapping[str, int]) -> None:
        """Hold a partition's users as the store has them."""
        self.states.update(states)
        self.stored.update(states)
        self.as_of.update(as_of)
        self.baselines.update(baselines)
        self.user_partition.update({u: partition for u in (*states, *baselines)})

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the users of partitions no longer owned."""
        gone = set(partitions)
        for u in [u for u, p in self.user_partition.items() if p in gone]:
            self.states.pop(u, None)
            self.baselines.pop(u, None)
            self.user_partition.pop(u, None)
            self.stored.discard(u)
            self.as_of.pop(u, None)
            self.memory_since.pop(u, None)

    def put(self, result: Step) -> None:
        """Hold a step's state and baselines."""
        user_id = result.state.user_id
        self.states[user_id] = result.state
        self.baselines[user_id] = result.baselines

    def track(self, before: UserState, state: UserState, partition: int, offset: int,
              silent: bool = False) -> None:
        """Keep :attr:`memory_since` after the record at ``offset`` moved a user from
        ``before`` to ``state``, and forget a memory-only user outside a session (the
        fold made them a user never seen). A durable user who opens an ephemeral session
        keeps the stored state from before it, staged here as of this record; the
        baseline versions folded meanwhile (the close of a durable session that the
        ephemeral one's start superseded) are staged when the user may be stored again.
        ``silent`` (a replay) stages nothing: the checkpoint covered it."""
        user_id = state.user_id
        if state.persistable:
            if not (silent or before.persistable or before.memory_only):
                self._stage_held(user_id, partition)
            self.memory_since.pop(user_id, None)
        elif state.memory_only:
            if state.session is None:
                self.states.pop(user_id, None)
                self.baselines.pop(user_id, None)
                self.memory_since.pop(user_id, None)
            else:
                self.memory_since.setdefault(user_id, offset)
        else:
            if before.persistable and not silent:
                self.pending.stage_state(user_id, partition, before, offset)
                self.stored.add(user_id)
                self.as_of[user_id] = offset
            self.memory_since.setdefault(user_id, self.as_of.get(user_id, offset))

    def _stage_held(self, user_id: str, partition: int) -> None:
        """Stage a user's current baseline versions, which may not be stored yet: the
        stored state they follow from was held back from before an ephemeral session, and
        storing them with it would fold the superseded session twice on a replay. Versions
        are keyed by id, so one stored already is written again to no effect."""
        current = self.baselines_of(user_id)
        for baseline in (current.attunement, current.semantic, current.safety):
            if baseline is not None and (partition, baseline) not in self.pending.baselines:
                self.pending.baselines.append((partition, baseline))
                self.meter.count(self.meter.metrics.baseline_versions, baseline.meta.kind.value)

    def stage(self, user_id: str, partition: int, as_of: int) -> None:
        """Stage a user's state as of ``as_of`` (its partition's next offset); a
        memory-only user's stored state goes (a durable user in an ephemeral session
        keeps theirs)."""
        state = self.state(user_id)
        if state.persistable:
            self.pending.stage_state(user_id, partition, state, as_of)
            self.stored.add(user_id)
            self.as_of[user_id] = as_of
        elif state.memory_only and user_id in self.stored:
            self.pending.stage_state(user_id, partition, None)
            self.stored.discard(user_id)
            self.as_of.pop(user_id, None)

    def take(self) -> BatchWrite:
        """The checkpoint staged since the last one, with the offset each of its partitions
        is replayed from after a crash; starts anew."""
        write, self.pending = self.pending, BatchWrite(topic=topics.INPUT)
        for user_id, since in self.memory_since.items():
            p = self.user_partition.get(user_id, -1)
            if p in write.offsets:
                write.replay_from[p] = min(since, write.replay_from.get(p, since))
        return write
