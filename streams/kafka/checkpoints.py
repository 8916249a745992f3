"""A worker's checkpoints: the engine's staged writes committed in order, one at a time.

A checkpoint commits, in this order, the acks of the outputs it covers, the changelog,
DuckDB, then the consumer group's offsets: each is at least as new as the next, and the
stored offsets are the truth. Any failure ends the process at once (exit 70) before a
checkpoint can cover the failed work: a restart replays from the last checkpoint and
re-publishes the same ids.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import NoReturn, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

from baselines.rows import Rows
from baselines.store import BaselineStore, BatchWrite
from streams import topics
from streams.kafka.broker_watch import BROKER_FAULTS, BrokerWatch
from streams.kafka.changelog import Changelog
from streams.kafka.publish import Publisher, Sent
from streams.metrics import Metrics
from streams.processing.engine import Engine
from streams.processing.records import PendingBatch

log = logging.getLogger("continuity_drift.worker")

EXIT_REPLAY = 70

T = TypeVar("T")


def exit_for_replay(what: str) -> NoReturn:
    """End the process at once, before a checkpoint can cover the failed work."""
    log.exception("%s; exiting so that the work since the last checkpoint is replayed on "
                  "restart", what)
    logging.shutdown()
    os._exit(EXIT_REPLAY)


class Checkpoints:
    """When the worker checkpoints, and the commit of each checkpoint."""

    def __init__(self, engine: Engine, store: BaselineStore, changelog: Changelog,
                 publisher: Publisher, consumer: AIOKafkaConsumer, metrics: Metrics,
                 broker: BrokerWatch) -> None:
        # Its collaborators assigned one by one, as Engine.__init__ assigns its own: other objects.
        self.engine = engine
        self.store = store
        self.changelog = changelog
        self.publisher = publisher
        self.consumer = consumer
        self.metrics = metrics
        self.broker = broker
        self._erased: set[int] = set()
        self.records = 0
        """Input records processed since the last checkpoint."""
        self._last = time.monotonic()
        self._inflight: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> bool:
        """Whether a checkpoint's commit is running in the background."""
        return self._inflight is not None

    async def publish(self, batch: PendingBatch) -> None:
        """Hand a batch's messages to the producer and go on (:class:`Publisher`)."""
        self._erased |= batch.erased
        await self.publisher.publish(batch)

    def due(self, interval_s: float) -> bool:
        """Whether to checkpoint now: after an erasure (at once), or every ``interval_s``
        (when the one in flight has landed)."""
        if self._erased:
            return True
        task = self._inflight
        return time.monotonic() - self._last >= interval_s and (task is None or task.done())

    async def take(self, wait: bool = True) -> None:
        """One transaction with everything since the last checkpoint, then the group offsets.

        Checkpoints commit in order, one at a time. Unless ``wait`` (revoke, shutdown, the
        review API) or an erasure asks for it at once, the write runs in the background
        while the loop goes on with the next batches.
        """
        await self.settle()
        taking = time.monotonic()
        write = self.engine.take_checkpoint()
        took = time.monotonic() - taking  # the states, taken on the loop
        erased, self._erased = self._erased, set()
        records, self.records = self.records, 0
        sent = self.publisher.take_unacked()
        self._last = time.monotonic()
        task = asyncio.create_task(self._commit(write, erased, records, sent, took))
        if wait or erased:
            await task
        else:
            self._inflight = task

    async def settle(self) -> None:
        """Wait for the checkpoint in flight, if any."""
        task, self._inflight = self._inflight, None
        if task is not None:
            await task

    async def _commit(self, write: BatchWrite, erased: set[int], records: int, sent: Sent,
                      took: float) -> None:
        """The acks of the outputs it covers, then the changelog, then DuckDB, then the
        group: each is at least as new as the next. ``took`` is how long its states took to
        build on the loop (timed with the steps here).

        A partition with an erasure writes no delta: after DuckDB's commit it rolls to
        a new generation, whose snapshot carries the erasure, and the old one is
        deleted. Until then its changelog ends before the erasure's offset, so a
        crash in between replays the erasure instead of restoring erased values.
        """
        started = time.monotonic()
        ends: list[tuple[str, float]] = []  # each step's name and when it ended, in order
        store, changelog = self.store, self.changelog
        try:
            await self.publisher.acked(sent)
            ends.append(("acks", time.monotonic()))
            await self._write(write, erased, ends)
            owned = self.engine.partitions
            rolls = sorted((erased | set(changelog.due())) & owned)
            for p in rolls:
                self.metrics.changelog_bytes.inc(await self._until_done(
                    "rolling the changelog", partial(changelog.roll, p, store)))
            if erased:
                await asyncio.to_thread(store.compact)
            if rolls or erased:
                ends.append(("roll", time.monotonic()))
            offsets = {TopicPartition(topics.INPUT, p): o for p, o in write.offsets.items()
                       if p in owned}
            if offsets:
                try:
                    await self.consumer.commit(offsets)
                except BROKER_FAULTS as exc:  # the stored offsets are the truth; next time
                    log.warning("group offsets not committed; the next checkpoint will",
                                extra={"error_type": type(exc).__name__})
        except Exception:  # noqa: BLE001 - logged and ended in exit_for_replay
            exit_for_replay("checkpoint failed")
        ends.append(("group", time.monotonic()))
        self.metrics.checkpoint_seconds.observe(ends[-1][1] - started)
        self.metrics.checkpoint_records.observe(records)
        steps, since = {"states": took}, started
        for step, end in ends:
            steps[step], since = end - since, end
        for step, seconds in steps.items():
            self.metrics.checkpoint_steps.labels(step).observe(seconds)
        # When it ran, what it covered and how long each step took (the roll with the
        # compaction after an erasure): to match a spell of slow outputs with a checkpoint.
        log.debug("checkpoint committed", extra={
            "records": records, "states": len(write.states),
            "steps_ms": {step: round(1e3 * seconds, 1) for step, seconds in steps.items()}})

    async def _write(self, write: BatchWrite, erased: set[int],
                     ends: list[tuple[str, float]]) -> None:
        """The checkpoint's rows and deltas built, the deltas on the changelog, the rows in
        DuckDB; each step's end added to ``ends``. The rows and the deltas (10-30 MB at full
        speed) are let go when it returns, before the changelog rolls."""
        rows, deltas = await asyncio.to_thread(_rows_and_deltas, self.store, write, erased)
        ends.append(("rows", time.monotonic()))
        self.metrics.changelog_bytes.inc(await self._until_done(
            "writing the changelog", lambda: self.changelog.append(deltas)))
        ends.append(("changelog", time.monotonic()))
        await asyncio.to_thread(self.store.apply_rows, rows)
        ends.append(("duckdb", time.monotonic()))

    async def _until_done(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        return await self.broker.until_done(what, attempt)


def _rows_and_deltas(store: BaselineStore, write: BatchWrite, erased: set[int]
                     ) -> tuple[Rows, dict[int, bytes]]:
    """A checkpoint's rows, and each partition's delta encoded for its changelog (none for a
    partition with an erasure, or with nothing to write). In the checkpoint's thread, not
    on the event loop: a large checkpoint's Arrow filters and IPC encoding take a few hundred
    milliseconds, and the loop would stall the partitions' records for as long."""
    rows = store.rows_of(write)
    return rows, {p: r.encode() for p, r in rows.by_partition(write.dropped_states).items()
                  if p not in erased and not r.empty}
