"""After a restore, the users the store does not hold rebuilt from the log, silently.

The store holds no state of memory-only users, nor of a durable user during an ephemeral
session (SPEC section 7). A checkpoint stores, per partition, the offset from which a
replay rebuilds them (``partition_offsets.replay_from``); after a restore the engine reads
the partition from there (:meth:`Rebuild.fetch_from`), and every record below the stored
next offset goes through :meth:`Rebuild.take`: applied in memory only, with no effect
carried out (its outputs were published and its writes stored before the checkpoint).
"""

from __future__ import annotations

import logging

from drift.fold import Step, step, sweep
from drift.kernel.attunement import score_attunement
from drift.model import DriftConfig, FhrEvent, Tick
from drift.state import UserState
from streams.edge.rejection import Rejection
from streams.processing.memory import Memory
from streams.processing.records import InputRecord, PendingBatch

log = logging.getLogger("continuity_drift.engine")


class Rebuild:
    """The partitions under replay, and the replay of each record below their next offset."""

    def __init__(self, memory: Memory, next_offsets: dict[int, int], config: DriftConfig,
                 app_id: str) -> None:
        self.memory = memory
        self.next_offsets = next_offsets
        """The engine's next offset per partition (the same dict: the replay ends there)."""
        self.config = config
        self.app_id = app_id
        self.replaying: dict[int, int] = {}
        """Partitions being replayed: the next offset to replay, below the partition's next
        offset."""
        self._rewound: dict[int, int] = {}
        """Per partition, the replay offset the shell was last asked to seek back to."""

    def start(self, partition: int, replay_from: int | None) -> None:
        """Replay ``partition`` from ``replay_from`` (stored), if that is below its next
        offset."""
        if replay_from is not None and replay_from < self.next_offsets.get(partition, 0):
            self.replaying[partition] = replay_from

    def forget(self, partitions: set[int]) -> None:
        """Let go of partitions no longer owned, with any rewind they asked for: each owning's
        first batch may come from the group's offset again (a partition is started again only
        after it was forgotten)."""
        for p in partitions:
            self.replaying.pop(p, None)
            self._rewound.pop(p, None)

    def fetch_from(self, partition: int) -> int:
        """The offset to read ``partition`` from: the replay's, if one is under way."""
        return self.replaying.get(partition, self.next_offsets.get(partition, 0))

    def take(self, record: InputRecord, item: FhrEvent | Tick | Rejection,
             batch: PendingBatch) -> bool:
        """A record of a partition under replay: replayed if it is the next one, skipped if
        replayed already; a later one means the consumer skipped part of the replay (it
        fetched from the group's offset before the seek took), so the batch asks the shell
        to seek back, once. A second time at the same offset is a gap in the log (a
        transaction marker takes an offset), and the replay goes on past it.

        True when the replay ended before the record: a record at or past the partition's
        next offset is the checkpoint's to process, never replayed silently (its outputs
        were not published)."""
        p, at = record.partition, self.replaying[record.partition]
        if record.offset < at or p in batch.rewind:
            return False
        if record.offset > at and self._rewound.get(p) != at:
            self._rewound[p] = batch.rewind[p] = at
            log.info("replay resumed from its start after records from a later offset",
                     extra={"partitions": [p], "offset": at})
            return False
        if record.offset >= self.next_offsets.get(p, 0):
            del self.replaying[p]
            return True
        self._replay(record, item)
        return False

    def _replay(self, record: InputRecord, item: FhrEvent | Tick | Rejection) -> None:
        """Apply the record to the users the store does not hold as of it."""
        p, offset = record.partition, record.offset
        if offset + 1 >= self.next_offsets.get(p, 0):
            self.replaying.pop(p, None)
        else:
            self.replaying[p] = offset + 1
        memory = self.memory
        if isinstance(item, Tick):
            if item.app_id != self.app_id:
                return
            for user_id in memory.users_of(p):
                if memory.as_of.get(user_id, -1) <= offset:
                    state = memory.states[user_id]
                    result = sweep(state, memory.baselines_of(user_id), item.ts_s, self.config,
                                   score=score_attunement)
                    self._keep(state, result, p, offset)
        elif isinstance(item, FhrEvent) and memory.as_of.get(item.user_id, -1) <= offset:
            state = memory.state(item.user_id)
            try:
                result = step(state, memory.baselines_of(item.user_id), item, self.config,
                              score_attunement)
            except Exception:  # noqa: BLE001 - dead-lettered when it was first processed
                return
            if not result.effects.duplicate:
                memory.user_partition[item.user_id] = p
                self._keep(state, result, p, offset)

    def _keep(self, before: UserState, result: Step, partition: int, offset: int) -> None:
        self.memory.put(result)
        self.memory.track(before, result, partition, offset, silent=True)
