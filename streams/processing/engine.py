"""The processing engine: records in, the fold stepped, messages and store writes out.

It knows nothing of Kafka clients: the shell (``streams.worker``) hands it batches
of records and publishes what it returns. The engine decodes a batch, folds its
events through the compiled kernel (:func:`drift.kernel.fold_batch`, which hands the
rare events to the reference fold), carries out each outcome in log order
(:class:`streams.processing.carry_out.CarryOut`) and observes metrics from the typed results;
every decision is the core's.

State lives in memory between checkpoints. A processed batch is a
:class:`~streams.processing.records.PendingBatch` (its messages); what it changed is staged in the engine's
checkpoint, a :class:`~baselines.store.BatchWrite` with the changed users' state,
new baseline versions, session summaries and the next offset of every partition.
The shell publishes each batch's messages and waits for the broker's acks; every
so often it takes the checkpoint (:meth:`Engine.take_checkpoint`) and commits it
in one transaction, so:

* a crash before a checkpoint replays from the previous one (outputs carry
  derived ids, so a re-published message is a duplicate consumers drop);
* a crash after it skips what it covers (offsets below the stored next offset),
  whatever offset the consumer group had committed.

An erasure is carried out on the store while the batch is processed, in its
own transaction (with the user's baseline versions staged since the last
checkpoint written first, so they are tombstoned and verified like older ones);
the shell then checkpoints at once and rewrites the database file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

from baselines.store import BaselineStore, BatchWrite
from drift.erasure import expiry_due, operator_erase
from drift.fold import Step, due, summarize, sweep
from drift.kernel import fold_batch
from drift.kernel.attunement import score_attunement
from drift.model import DriftConfig, FhrEvent, Tick
from drift.outputs import NO_EFFECTS, ErasureReceipt, SessionSummary, dead_letter_id
from drift.state import UserState
from streams import topics
from streams.edge.codec import decode_record
from streams.edge.rejection import Rejection
from streams.edge.wire import DeadLetter, encode
from streams.metrics import Metrics
from streams.processing.carry_out import CarryOut
from streams.processing.memory import Memory
from streams.processing.meter import Meter
from streams.processing.rebuild import Rebuild
from streams.processing.records import InputRecord, OutMessage, PendingBatch

log = logging.getLogger("continuity_drift.engine")


def _processing_error(exc: Exception, event_id: str | None, record: InputRecord) -> Rejection:
    """A record whose processing raised: logged by type and place only (the message of an
    exception may quote values), dead-lettered, and not retried."""
    log.error("record could not be processed; dead-lettered as processing_error",
              extra={"partitions": [record.partition], "offset": record.offset,
                     "error_type": type(exc).__name__})
    return Rejection("processing_error", (), event_id)


class Engine:
    """Per-partition user state in memory, backed by a :class:`BaselineStore`."""

    def __init__(self, store: BaselineStore, config: DriftConfig, metrics: Metrics,
                 clock: Callable[[], float] = time.time, app_id: str = "continuity-drift"
                 ) -> None:
        self.store = store
        self.app_id = app_id
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.partitions: set[int] = set()
        self.next_offsets: dict[int, int] = {}
        self.watermarks: dict[int, float] = {}
        """The newest event time seen on each partition (what a tick starts from)."""
        self.seen_at: dict[int, float] = {}
        """When (wall clock) each partition's last record was processed."""
        self.meter = Meter(metrics)
        self.memory = Memory(self.meter, config)
        self.carry = CarryOut(store, self.memory, self.meter)
        self.rebuild = Rebuild(self.memory, self.next_offsets, config, app_id)

    # ------------------------------------------------------------------ partitions

    def assign(self, partitions: Iterable[int]) -> None:
        """Load the state of newly owned partitions from the store."""
        new = set(partitions) - self.partitions
        if not new:
            return
        offsets = self.store.offsets(topics.INPUT)
        replay = self.store.replay_offsets(topics.INPUT)
        now = self.clock()
        for p in sorted(new):
            states = self.store.load_states([p])
            self.memory.load(p, states, self.store.load_baselines([p]),
                             self.store.state_offsets([p]))
            self.next_offsets[p] = offsets.get(p, 0)
            self.rebuild.start(p, replay.get(p))
            self.watermarks[p] = max((s.clock_s for s in states.values()), default=0.0)
            self.seen_at[p] = now
        self.partitions |= new
        self.refresh_gauges()

    def revoke(self, partitions: Iterable[int]) -> None:
        gone = set(partitions) & self.partitions
        if not gone:
            return
        self.memory.forget(gone)
        self.rebuild.forget(gone)
        for p in gone:
            self.next_offsets.pop(p, None)
            self.watermarks.pop(p, None)
            self.seen_at.pop(p, None)
        self.partitions -= gone
        self.refresh_gauges()

    def fetch_from(self, partition: int) -> int:
        """The offset to read ``partition`` from: the replay's, if one is under way."""
        return self.rebuild.fetch_from(partition)

    # ------------------------------------------------------------------ batches

    @staticmethod
    def decode(records: Sequence[InputRecord]) -> list[FhrEvent | Tick | Rejection]:
        """Each record as an event, a tick or the reason it is neither (no record raises)."""
        out: list[FhrEvent | Tick | Rejection] = []
        for record in records:
            try:
                out.append(decode_record(record.key, record.value))
            except Exception as exc:  # noqa: BLE001 - no record may stop a partition
                out.append(_processing_error(exc, None, record))
        return out

    def process(self, records: Sequence[InputRecord],
                decoded: list[FhrEvent | Tick | Rejection] | None = None, *,
                stop_before_erasure: bool = False) -> PendingBatch:
        """Apply a batch of records (decoded by :meth:`decode` if not given) to memory;
        returns what to publish and to commit. The events between two ticks (or records
        of a partition under replay) are folded together (:meth:`_fold`).

        With ``stop_before_erasure`` (the shell has a checkpoint in flight), processing
        stops before the first record that may erase stored baselines
        (:func:`drift.fold.may_erase`) and the batch says where (``stopped_at``): the shell
        lets the checkpoint land, so the erasure finds every version written before it,
        and hands over the rest.
        """
        batch = PendingBatch()
        touched: dict[str, int] = {}
        self.meter.observe_value(self.metrics.batch_size, len(records))
        now = self.clock()
        items = decoded or self.decode(records)
        replaying = self.rebuild.replaying
        ahead = dict(self.next_offsets)
        run: list[int] = []
        for index, (record, item) in enumerate(zip(records, items, strict=True)):
            p = record.partition
            if p in replaying:  # replayed here, unless the replay ends before the record
                batch.stopped_at = self._fold(records, items, run, batch, touched, now,
                                              stop_before_erasure)
                run = []
                if batch.stopped_at is not None:
                    break
                if not self.rebuild.take(record, item, batch):
                    continue
            if record.offset < ahead.get(p, 0):
                continue
            if not isinstance(item, Tick):
                run.append(index)
                ahead[p] = record.offset + 1
                continue
            batch.stopped_at = self._fold(records, items, run, batch, touched, now,
                                          stop_before_erasure)
            run = []
            if batch.stopped_at is not None:
                break
            if item.app_id == self.app_id and stop_before_erasure \
                    and self.expiring(p, item.ts_s):
                batch.stopped_at = index
                break
            self._passed(p, record.offset, now)
            ahead[p] = record.offset + 1
            if item.app_id == self.app_id:
                self._tick(p, record.offset, item.ts_s, batch, touched)
        else:
            batch.stopped_at = self._fold(records, items, run, batch, touched, now,
                                          stop_before_erasure)
        self.memory.stage(touched, self.next_offsets)
        self.meter.flush()
        return batch

    def _fold(self, records: Sequence[InputRecord], items: list[FhrEvent | Tick | Rejection],
              run: list[int], batch: PendingBatch, touched: dict[str, int], now: float,
              stop_before_erasure: bool) -> int | None:
        """Fold the events of the records at ``run`` (indices, in log order) through the
        kernel and carry out each record's outcome in order; the index of the record it
        stopped before, if it did.

        An event the kernel took has no effects but a checkpoint's outputs, and changes
        nothing :meth:`Memory.track` follows (the user's mode, whether a session is open):
        it is counted, its outputs published, and its user staged. A step of the reference
        is carried out, and tracked from the state it was applied to."""
        if not run:  # a tick or a replayed record right after another, or a batch's start
            return None
        events = [e for e in (items[i] for i in run) if isinstance(e, FhrEvent)]
        folded = fold_batch(self.memory.columns, events, self.config,
                            stop_before_erasure=stop_before_erasure)
        self.metrics.kernel_handoffs.inc(folded.handoffs)
        outcomes, befores, stop = folded.outcomes, folded.befores, folded.stopped_at
        user_partition, watermarks = self.memory.user_partition, self.watermarks
        counted: list[FhrEvent] = []
        last: dict[int, int] = {}
        k = 0
        stopped: int | None = None
        for index in run:
            record, item = records[index], items[index]
            p = record.partition
            if isinstance(item, FhrEvent):
                if k == stop:
                    stopped = index
                    break
                outcome = outcomes[k]
                k += 1
                last[p] = record.offset
                if isinstance(outcome, Exception):
                    rejection = _processing_error(outcome, item.event_id, record)
                    self.carry.dead_letter(record, rejection, batch)
                    batch.source_timestamps.append(record.timestamp)
                    continue
                counted.append(item)
                user_id = item.user_id
                user_partition[user_id] = p
                if item.ts_s > watermarks.get(p, 0.0):
                    watermarks[p] = item.ts_s
                if outcome is NO_EFFECTS:
                    touched[user_id] = p
                elif isinstance(outcome, Step):
                    if self._carry_out(outcome, befores[k - 1], record, batch):
                        batch.source_timestamps.append(record.timestamp)
                    if not outcome.effects.duplicate:
                        touched[user_id] = p
                elif not outcome.duplicate:
                    touched[user_id] = p
                    if outcome.outputs:  # a checkpoint the kernel's caller scored
                        self.carry.outputs(outcome.outputs, p, batch)
                        batch.source_timestamps.append(record.timestamp)
            else:
                assert isinstance(item, Rejection)
                last[p] = record.offset
                self.carry.dead_letter(record, item, batch)
                batch.source_timestamps.append(record.timestamp)
        for p, offset in last.items():
            self._passed(p, offset, now)
        self.meter.events(counted, now)
        self.memory.settle()
        return stopped

    def _passed(self, partition: int, offset: int, now: float) -> None:
        """The partition goes on after ``offset``, processed at wall time ``now``."""
        self.next_offsets[partition] = self.memory.pending.offsets[partition] = offset + 1
        self.seen_at[partition] = now

    def _carry_out(self, result: Step, before: UserState, record: InputRecord,
                   batch: PendingBatch) -> bool:
        """A reference step carried out, tracked from ``before``; whether it has outputs."""
        if result.effects.duplicate:
            return False
        self.carry.step(result, record.partition, batch)
        self.memory.track(before, result, record.partition, record.offset, defer=True)
        return bool(result.effects.outputs)

    def unreadable(self, partition: int, first_offset: int, last_offset: int, reason: str
                   ) -> PendingBatch:
        """A record batch of ``partition`` that could not be read (offsets inclusive): one
        dead letter naming its range, and the partition goes on after it. A batch already
        passed (a replay after a crash) changes nothing."""
        batch = PendingBatch()
        if last_offset < self.next_offsets.get(partition, 0):
            return batch
        self.next_offsets[partition] = self.memory.pending.offsets[partition] = last_offset + 1
        self.meter.count(self.metrics.rejections, reason)
        self.meter.count(self.metrics.unreadable_batches, reason)
        log.warning("a record batch could not be read; dead-lettered and skipped",
                    extra={"partitions": [partition], "offset": first_offset,
                           "last_offset": last_offset, "reason": reason})
        letter = DeadLetter(dead_letter_id(topics.INPUT, partition, first_offset, last_offset),
                            reason, topics.INPUT, partition, first_offset, None, (),
                            last_offset)
        batch.messages.append(OutMessage(topics.DEADLETTER, b"", encode(letter), partition))
        self.meter.flush()
        return batch

    def refresh_gauges(self) -> None:
        """Set the gauges of open sessions and holds: a walk over every user, so the shell
        calls it per checkpoint, not per batch."""
        self.meter.gauges(self.memory.columns.shells())

    # ------------------------------------------------------------------ event time

    def quiet_time(self, partition: int) -> float:
        """Event time on a partition that has had no record for a while: its newest event
        time, moved on by the wall time since its last record. Only a tick record carries
        it into the fold (:meth:`ticks_due`), so a replay moves it at the same place."""
        now = float(self.clock())
        return self.watermarks.get(partition, 0.0) + max(
            0.0, now - self.seen_at.get(partition, now))

    def ticks_due(self, quiet_after_s: float, lateness_s: float
                  ) -> dict[int, tuple[float, bool]]:
        """The tick to write into each owned partition that holds a user with something due
        by the partition's event time (an idle session to close, a baseline past its TTL),
        and whether the partition is quiet; the caller writes them.

        A quiet partition (no record for ``quiet_after_s``) is swept at its
        :meth:`quiet_time`. A busy one is swept at its newest event time less
        ``lateness_s``: a session its user left is closed while others keep the partition
        busy, and a user whose events lag the partition's by less than that is not cut off.
        A partition under replay gets none."""
        now = float(self.clock())
        out: dict[int, tuple[float, bool]] = {}
        memory = self.memory
        for p in sorted(self.partitions - set(self.rebuild.replaying)):
            quiet = now - self.seen_at.get(p, now) >= quiet_after_s
            ts = self.quiet_time(p) if quiet else self.watermarks.get(p, 0.0) - lateness_s
            if any(due(memory.states[u], memory.baselines_of(u), ts, self.config)
                   for u in memory.users_to_sweep(p, ts)):
                out[p] = (ts, quiet)
        return out

    def expiring(self, partition: int, ts_s: float) -> bool:
        """Whether a tick at ``ts_s`` on ``partition`` erases a baseline past its TTL: the
        shell then lets the checkpoint in flight land first, so the erasure finds its
        versions."""
        memory = self.memory
        return any(expiry_due(memory.states[u], memory.baselines_of(u), ts_s, self.config)
                   for u in memory.users_to_sweep(partition, ts_s))

    def _tick(self, partition: int, offset: int, ts_s: float, batch: PendingBatch,
              touched: dict[str, int]) -> None:
        """Every user of ``partition`` swept at ``ts_s``, in the order of their ids
        (:meth:`drift.replay.MemoryReplay.tick` is the same); a user whose state the sweep
        surely leaves as it is (:meth:`Memory.users_to_sweep`) is passed over without
        building it."""
        self.meter.count(self.metrics.ticks)
        memory = self.memory
        for user_id in memory.users_to_sweep(partition, ts_s):
            state = memory.states[user_id]
            result = sweep(state, memory.baselines_of(user_id), ts_s, self.config,
                           score=score_attunement)
            if result.effects.empty and result.state is state:
                continue
            memory.put(result)
            self.carry.step(result, partition, batch)
            memory.track(state, result, partition, offset)
            touched[user_id] = partition

    # ------------------------------------------------------------------ review API

    def erase_user(self, user_id: str, request_id: str) -> tuple[PendingBatch, ErasureReceipt]:
        """An operator's erase request for every baseline kind; returns the batch and receipt."""
        batch = PendingBatch()
        memory = self.memory
        partition = memory.user_partition.get(user_id, -1)
        known = user_id in memory.states
        state, baselines, command = operator_erase(
            memory.state(user_id), memory.baselines_of(user_id), request_id, self.config)
        done = self.carry.erase(command, partition, batch)
        self.meter.flush()
        if known:
            memory.put(Step(state, baselines))
            if partition >= 0:
                memory.stage({user_id: partition}, self.next_offsets)
        return batch, done

    def take_checkpoint(self) -> BatchWrite:
        """Everything changed since the last checkpoint, for one transaction; starts anew."""
        write = self.memory.take()
        self.refresh_gauges()
        return write

    def open_session(self, user_id: str, session_id: str) -> SessionSummary | None:
        """The review API's view of a session that is still open (it is stored when it ends)."""
        state = self.memory.states.get(user_id)
        if state is None or not state.persistable:
            return None
        session = state.open_session(session_id)
        if session is None or not session.summarized:
            return None
        return summarize(user_id, session, None)
