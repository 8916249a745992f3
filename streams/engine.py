"""The processing engine: records in, state in DuckDB, messages out.

It knows nothing of faust: the Kafka shell (``streams.app``) hands it batches of
records and publishes what it returns. One batch is one DuckDB transaction that
holds the users' new state, their new baseline versions, any erasure, and the
next offset of every partition in the batch. The transaction stays open while
the batch's messages are published and commits only after the broker has
acknowledged them, so:

* a crash before the commit replays the batch (outputs carry derived ids, so a
  re-published message is a duplicate consumers drop);
* a crash after the commit skips the batch's records (their offsets are below
  the stored next offset), whatever offset the consumer group had committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from baselines.store import BaselineStore, BatchWrite, ErasureResult, SessionSummary
from drift.baseline import UserBaselines, derive_id
from drift.model import (
    BaselineKind,
    DriftConfig,
    FhrEvent,
    MemoryWrite,
    MemoryWriteBlocked,
    Mode,
    NoticeShown,
)
from drift.outputs import ErasureCommand, Output, OutputKind, envelope
from drift.processor import SessionState, UserState, close_idle, expired_kinds, step
from streams import topics
from streams.codec import Rejection, decode_event, encode_json
from streams.metrics import Metrics

log = logging.getLogger("continuity_drift.engine")

_TIER_RANK = {"low": 0, "medium": 1, "high": 2}


@dataclass(frozen=True, slots=True)
class Record:
    """One input record as the engine needs it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_s: float


@dataclass(frozen=True, slots=True)
class OutMessage:
    topic: str
    key: bytes
    value: bytes


@dataclass
class _SessionStat:
    partition: int
    mode: str = "unknown"
    started_s: float = 0.0
    turns: int = 0
    model_change: bool = False
    scores: int = 0
    max_tier: str = "low"
    reattune_quality: float | None = None


@dataclass
class PendingBatch:
    """A batch that has been processed but not yet committed."""

    write: BatchWrite
    messages: list[OutMessage] = field(default_factory=list)
    source_timestamps: list[float] = field(default_factory=list)
    erased: bool = False


class Engine:
    """Per-partition user state in memory, backed by a :class:`BaselineStore`."""

    def __init__(self, store: BaselineStore, config: DriftConfig, metrics: Metrics,
                 clock: Any = time.time) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.partitions: set[int] = set()
        self.next_offsets: dict[int, int] = {}
        self.states: dict[str, UserState] = {}
        self.baselines: dict[str, UserBaselines] = {}
        self.user_partition: dict[str, int] = {}
        self.watermarks: dict[int, tuple[float, float]] = {}
        self._sessions: dict[str, dict[str, _SessionStat]] = {}

    # ------------------------------------------------------------------ partitions

    def assign(self, partitions: Iterable[int]) -> None:
        """Load the state of newly owned partitions from the store."""
        new = set(partitions) - self.partitions
        if not new:
            return
        offsets = self.store.offsets(topics.INPUT)
        now = self.clock()
        for p in sorted(new):
            states = self.store.load_states([p])
            baselines = self.store.load_baselines([p])
            self.states.update(states)
            self.baselines.update(baselines)
            self.user_partition.update({u: p for u in (*states, *baselines)})
            self.next_offsets[p] = offsets.get(p, 0)
            self.watermarks[p] = (max((s.clock_s for s in states.values()), default=0.0), now)
        self.partitions |= new
        self._refresh_gauges()

    def revoke(self, partitions: Iterable[int]) -> None:
        gone = set(partitions) & self.partitions
        if not gone:
            return
        users = [u for u, p in self.user_partition.items() if p in gone]
        for u in users:
            self.states.pop(u, None)
            self.baselines.pop(u, None)
            self.user_partition.pop(u, None)
        for p in gone:
            self.next_offsets.pop(p, None)
            self.watermarks.pop(p, None)
        self.partitions -= gone
        self._refresh_gauges()

    # ------------------------------------------------------------------ batches

    def process(self, records: list[Record]) -> PendingBatch:
        """Apply a batch of records to memory; returns what to publish and to commit."""
        batch = PendingBatch(BatchWrite(topic=topics.INPUT))
        touched: dict[str, int] = {}
        self.metrics.batch_size.observe(len(records))
        now = self.clock()
        for record in records:
            expected = self.next_offsets.get(record.partition, 0)
            if record.offset < expected:
                continue
            self.next_offsets[record.partition] = record.offset + 1
            batch.write.offsets[record.partition] = record.offset + 1
            produced = self._process_record(record, batch, touched, now)
            if produced:
                batch.source_timestamps.append(record.timestamp_s)
        self._stage_states(batch, touched)
        return batch

    def _process_record(self, record: Record, batch: PendingBatch, touched: dict[str, int],
                        now: float) -> bool:
        decoded = decode_event(record.key, record.value)
        if isinstance(decoded, Rejection):
            self._dead_letter(record, decoded, batch)
            return True
        event = decoded
        self._count_event(event)
        self.metrics.event_time_lag.observe(max(0.0, now - event.ts_s))
        user_id = event.user_id
        self.user_partition[user_id] = record.partition
        state = self.states.get(user_id)
        if state is None:
            state = UserState(user_id)
            self.states[user_id] = state
        self._advance_watermark(record.partition, event.ts_s, now)
        before = state.session
        effects, after = step(state, event, self.baselines.get(user_id, UserBaselines()),
                              self.config)
        if effects.duplicate:
            return False
        self.baselines[user_id] = after
        touched[user_id] = record.partition
        self._track_session(state, before, record.partition)
        self._apply(effects.outputs, effects.baseline_writes, effects.erasures, batch,
                    record.partition, state)
        return bool(effects.outputs)

    def _apply(self, outputs: list[Output], writes: list[Any], erasures: list[ErasureCommand],
               batch: PendingBatch, partition: int, state: UserState) -> None:
        for command in erasures:
            self._flush_pending(batch, command.user_id)
            result = self._erase(command, partition)
            batch.erased = True
            self._publish(batch, self._receipt(command, result))
        if state.persistable:
            batch.write.baselines.extend((partition, b) for b in writes)
            for b in writes:
                self.metrics.baseline_versions.labels(kind=b.meta.kind.value).inc()
        for out in outputs:
            self._observe_output(out, state, partition, batch)
            self._publish(batch, out)

    def _flush_pending(self, batch: PendingBatch, user_id: str) -> None:
        """Write a user's baseline versions from earlier in this batch before erasing them.

        The erasure then finds, tombstones and verifies them like older versions.
        Writing them early is safe: versions are immutable and keyed by id, so a
        replay after a crash writes the same rows again.
        """
        mine = [(p, b) for p, b in batch.write.baselines if b.meta.user_id == user_id]
        if mine:
            batch.write.baselines = [(p, b) for p, b in batch.write.baselines
                                     if b.meta.user_id != user_id]
            self.store.commit_batch(BatchWrite(topic=topics.INPUT, baselines=mine))

    def _erase(self, command: ErasureCommand, partition: int) -> ErasureResult:
        everything = set(command.kinds) == set(BaselineKind)
        result = self.store.erase(command, partition, drop_user_rows=everything)
        for target in result.targets:
            self.metrics.erasures.labels(outcome=target.outcome).inc()
        if not result.targets:
            self.metrics.erasures.labels(outcome=result.outcome).inc()
        return result

    def _receipt(self, command: ErasureCommand, result: ErasureResult) -> Output:
        out_id = derive_id("receipt", command.request_id)
        payload = envelope(out_id, command.user_id, command.session_id, command.ts_s)
        payload.update(
            request_id=command.request_id, reason=command.reason,
            cause_event_id=command.cause_event_id, outcome=result.outcome,
            targets=[{"kind": t.kind, "baseline_id": t.baseline_id, "versions": t.versions,
                      "outcome": t.outcome} for t in result.targets],
            replacement=({"kind": "attunement", "features": list(command.replacement.features)}
                         if command.replacement is not None else None),
            checks=["baseline_versions re-read: none left", "database file rewritten"],
        )
        return Output(OutputKind.RECEIPT, command.user_id, payload)

    def _publish(self, batch: PendingBatch, out: Output) -> None:
        topic = topics.OUTPUT_TOPICS[out.kind]
        batch.messages.append(OutMessage(topic, out.key.encode("utf-8"), encode_json(out.payload)))

    def _dead_letter(self, record: Record, rejection: Rejection, batch: PendingBatch) -> None:
        self.metrics.rejections.labels(reason=rejection.reason).inc()
        out_id = derive_id("deadletter", topics.INPUT, str(record.partition), str(record.offset))
        payload: dict[str, Any] = {
            "schema": "drift/1", "id": out_id, "reason": rejection.reason,
            "source": {"topic": topics.INPUT, "partition": record.partition,
                       "offset": record.offset},
            "event_id": rejection.event_id, "fields": list(rejection.fields),
        }
        batch.messages.append(OutMessage(topics.DEADLETTER, record.key or b"",
                                         encode_json(payload)))

    # ------------------------------------------------------------------ bookkeeping

    def _count_event(self, event: FhrEvent) -> None:
        m = self.metrics
        m.events.labels(event_type=event.event_type).inc()
        body = event.body
        if isinstance(body, MemoryWrite):
            m.memory_writes.labels(memory_class=body.memory_class).inc()
        elif isinstance(body, MemoryWriteBlocked):
            m.memory_writes_blocked.labels(reason=body.reason).inc()
        elif isinstance(body, NoticeShown):
            m.model_change_notices_shown.inc()

    def _observe_output(self, out: Output, state: UserState, partition: int,
                        batch: PendingBatch) -> None:
        m = self.metrics
        p = out.payload
        m.outputs.labels(topic=topics.OUTPUT_TOPICS[out.kind]).inc()
        session_id = p.get("session_id")
        stat = None
        if session_id is not None and state.persistable:
            stat = self._sessions.setdefault(state.user_id, {}).setdefault(
                session_id, _SessionStat(partition))
        if out.kind is OutputKind.SCORE:
            if p.get("score_kind") == "continuity_drift":
                m.scores.labels(tier=p["tier"]).inc()
                m.drift_score.observe(p["continuity_drift_score"])
                for name, value in p["components"].items():
                    if value is not None:
                        m.drift_component.labels(component=name).observe(value)
                if stat is not None:
                    stat.scores += 1
                    if _TIER_RANK[p["effective_tier"]] > _TIER_RANK[stat.max_tier]:
                        stat.max_tier = p["effective_tier"]
            else:
                self._observe_reattune(p, stat)
        elif out.kind is OutputKind.RESPONSE:
            action = p["action"]
            m.responses.labels(action=action).inc()
            if action == "model_change_notice":
                m.model_changes_detected.inc()
            if action in ("reattune_completed", "reattune_failed"):
                m.reattune_outcomes.labels(outcome=action.removeprefix("reattune_")).inc()
                self._observe_reattune(p, stat)
        elif out.kind is OutputKind.ESCALATION:
            m.escalations.labels(kind=p["kind"]).inc()
        elif out.kind is OutputKind.VIOLATION:
            m.violations.labels(rule=p["rule"]).inc()

    def _observe_reattune(self, p: dict[str, Any], stat: _SessionStat | None) -> None:
        quality = p["reattune_quality_score"]
        self.metrics.reattune_quality.observe(quality)
        if p["reattune_turns_to_baseline"] is not None:
            self.metrics.reattune_turns_to_baseline.observe(p["reattune_turns_to_baseline"])
        else:
            self.metrics.reattune_outcomes.labels(outcome="never_reached_baseline").inc()
        if stat is not None:
            stat.reattune_quality = quality

    def _stage_states(self, batch: PendingBatch, touched: dict[str, int]) -> None:
        for user_id, partition in touched.items():
            state = self.states[user_id]
            if state.persistable:
                batch.write.states[user_id] = (partition, state)
            else:
                batch.write.dropped_states.add(user_id)
            session = state.session
            self._track_session(state, session, partition)
            mine = self._sessions.get(user_id, {})
            for sid, stat in list(mine.items()):
                if session is not None and session.session_id == sid:
                    continue
                if state.persistable:
                    batch.write.sessions.append(self._summary(user_id, sid, stat,
                                                              state.clock_s))
                del mine[sid]
            if not mine:
                self._sessions.pop(user_id, None)
        self._refresh_gauges()

    @staticmethod
    def _summary(user_id: str, session_id: str, stat: _SessionStat, ended_s: float | None
                 ) -> SessionSummary:
        return SessionSummary(user_id, session_id, stat.partition, stat.mode, stat.started_s,
                              ended_s, stat.turns, stat.max_tier, stat.scores,
                              stat.model_change, stat.reattune_quality)

    def open_session(self, user_id: str, session_id: str) -> SessionSummary | None:
        """The review API's view of a session that is still open (it is stored when it ends)."""
        state = self.states.get(user_id)
        stat = self._sessions.get(user_id, {}).get(session_id)
        if state is None or stat is None or not state.persistable:
            return None
        return self._summary(user_id, session_id, stat, None)

    def _track_session(self, state: UserState, session: SessionState | None, partition: int
                       ) -> None:
        """Keep what the review API shows of a session, while it is open and as it ends."""
        if session is None or session.ephemeral or not session.mode.keeps_baselines:
            return
        stat = self._sessions.setdefault(state.user_id, {}).setdefault(
            session.session_id, _SessionStat(partition))
        stat.mode, stat.started_s = session.mode.value, session.started_s
        stat.turns, stat.model_change = session.n_turns, session.model_change

    def _advance_watermark(self, partition: int, ts_s: float, now: float) -> None:
        mark, _ = self.watermarks.get(partition, (0.0, now))
        if ts_s > mark:
            self.watermarks[partition] = (ts_s, now)

    def event_now(self, partition: int) -> float:
        """Event time on a partition: its newest event time, moved on by wall time since.

        With traffic this is event time; on a quiet partition idle sessions still
        close once the idle timeout has passed on the wall clock too.
        """
        now = float(self.clock())
        mark, seen_at = self.watermarks.get(partition, (0.0, now))
        return mark + max(0.0, now - seen_at)

    def _refresh_gauges(self) -> None:
        counts = {mode.value: 0 for mode in Mode}
        holds = 0
        for state in self.states.values():
            if state.session is not None:
                counts[state.session.mode.value] += 1
            if state.ladder.hold:
                holds += 1
        for mode, n in counts.items():
            self.metrics.active_sessions.labels(mode=mode).set(n)
        self.metrics.active_holds.set(holds)

    # ------------------------------------------------------------------ timers

    def tick(self) -> PendingBatch:
        """Close idle sessions and expire unused baselines, by each partition's event time."""
        batch = PendingBatch(BatchWrite(topic=topics.INPUT))
        touched: dict[str, int] = {}
        for user_id, state in list(self.states.items()):
            partition = self.user_partition.get(user_id)
            if partition is None or partition not in self.partitions:
                continue
            now_s = self.event_now(partition)
            base = self.baselines.get(user_id, UserBaselines())
            expired = expired_kinds(state, base, now_s, self.config)
            if expired:
                request_id = derive_id("ttl_expired", user_id, *(k.value for k in expired),
                                       *(m.baseline_id for m in base.metas()))
                command = ErasureCommand(user_id, state.session.session_id if state.session
                                         else "", expired, "ttl_expired", request_id,
                                         request_id, now_s)
                self._apply([], [], [command], batch, partition, state)
                base = base.without(frozenset(expired))
                self.baselines[user_id] = base
                touched[user_id] = partition
            if state.session is not None:
                before = state.session
                effects, after = close_idle(state, base, now_s, self.config)
                self._track_session(state, before, partition)
                if effects.outputs or effects.baseline_writes or state.session is None:
                    self.baselines[user_id] = after
                    touched[user_id] = partition
                    self._apply(effects.outputs, effects.baseline_writes, effects.erasures,
                                batch, partition, state)
        self._stage_states(batch, touched)
        return batch

    # ------------------------------------------------------------------ review API

    def erase_user(self, user_id: str, request_id: str) -> tuple[PendingBatch, dict[str, Any]]:
        """An operator's erase request for every baseline kind; returns the batch and receipt."""
        batch = PendingBatch(BatchWrite(topic=topics.INPUT))
        partition = self.user_partition.get(user_id, -1)
        state = self.states.get(user_id)
        now_s = state.clock_s if state is not None else 0.0
        command = ErasureCommand(user_id, "", tuple(BaselineKind), "operator", request_id,
                                 f"api:{request_id}", now_s)
        result = self._erase(command, partition)
        batch.erased = True
        if state is not None and state.session is not None:
            state.session.foldable = False
        self.baselines[user_id] = UserBaselines()
        receipt = self._receipt(command, result)
        self._publish(batch, receipt)
        if state is not None and state.persistable and partition >= 0:
            batch.write.states[user_id] = (partition, state)
        return batch, receipt.payload
