"""A step's effects carried out: the store writes it stages or makes, the messages it
publishes, and the dead letter of a record that has none.

:class:`CarryOut` is the engine's hand for every effect of the fold (the engine decides
which step, and when): baseline versions and session summaries are staged in the
checkpoint being gathered (:attr:`streams.processing.memory.Memory.pending`), an erasure is carried
out on the store at once, and each output becomes a message of the batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from baselines.store import BaselineStore, BatchWrite
from drift.erasure import receipt
from drift.fold import Step
from drift.outputs import ErasureCommand, ErasureReceipt, Output
from streams import topics
from streams.edge.rejection import Rejection
from streams.edge.wire import encode
from streams.processing.memory import Memory
from streams.processing.meter import Meter
from streams.processing.records import InputRecord, OutMessage, PendingBatch, dead_letter


class CarryOut:
    """Carries out effects on a store, a worker's memory and a batch's messages."""

    def __init__(self, store: BaselineStore, memory: Memory, meter: Meter) -> None:
        self.store = store
        self.memory = memory
        self.meter = meter
        self.metrics = meter.metrics

    def step(self, result: Step, partition: int, batch: PendingBatch) -> None:
        """Carry out a step's effects: store writes, then messages (the caller holds its
        state)."""
        state = result.state
        effects = result.effects
        if effects.empty:
            return
        for write in effects.writes:
            if isinstance(write, ErasureCommand):
                self.erase(write, partition, batch)
            elif state.persistable:
                self.memory.pending.baselines.append((partition, write))
                self.meter.count(self.metrics.baseline_versions, write.meta.kind.value)
        self.outputs(effects.outputs, partition, batch)
        if not state.memory_only:  # a durable session's summary, even closed by an ephemeral
            self.memory.pending.sessions.extend((partition, s) for s in effects.sessions)

    def outputs(self, outputs: Iterable[Output], partition: int, batch: PendingBatch) -> None:
        """Observe and publish each output."""
        for out in outputs:
            self.meter.output(out)
            self.publish(batch, out, partition)

    def erase(self, command: ErasureCommand, partition: int, batch: PendingBatch
              ) -> ErasureReceipt:
        """Carry out an erasure on the store and publish its receipt."""
        self._flush_pending(command.user_id)
        result = self.store.erase(command, partition)
        batch.erased.add(partition)
        self.meter.erasure(result)
        done = receipt(command, result)
        if not result.repeat:  # else its receipt went out with the first request
            self.publish(batch, done, partition)
        return done

    def _flush_pending(self, user_id: str) -> None:
        """Write a user's baseline versions staged since the checkpoint before erasing them.

        The erasure then finds, tombstones and verifies them like older versions.
        Writing them early is safe: versions are immutable and keyed by id, so a
        replay after a crash writes the same rows again.
        """
        pending = self.memory.pending
        mine = [(p, b) for p, b in pending.baselines if b.meta.user_id == user_id]
        if mine:
            pending.baselines = [(p, b) for p, b in pending.baselines
                                 if b.meta.user_id != user_id]
            self.store.commit_batch(BatchWrite(topic=topics.INPUT, baselines=mine))

    def publish(self, batch: PendingBatch, out: Output, partition: int) -> None:
        """``out`` as a message of the batch, to its topic, keyed by its user."""
        topic = topics.OUTPUT_TOPICS[out.kind]
        self.meter.count(self.metrics.outputs, topic)
        batch.messages.append(OutMessage(topic, out.user_id.encode("utf-8"), encode(out),
                                         partition))

    def dead_letter(self, record: InputRecord, rejection: Rejection, batch: PendingBatch) -> None:
        """The record's dead letter (why, and where from) as a message of the batch."""
        self.meter.count(self.metrics.rejections, rejection.reason)
        letter = dead_letter(rejection, record.partition, record.offset)
        batch.messages.append(OutMessage(topics.DEADLETTER, record.key or b"", encode(letter),
                                         record.partition))

