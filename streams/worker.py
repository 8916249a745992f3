"""One worker: an aiokafka batch consumer, the engine, checkpoints, a producer and HTTP.

The loop: ``getmany`` a batch, process it (:class:`~streams.processing.engine.Engine`), publish
its messages and await their acks, and every ``checkpoint_interval_s`` commit the
engine's checkpoint to DuckDB in one transaction, then the consumer group's offsets.
The stored offsets are the truth; the group commit only follows them. A
checkpoint is also taken when partitions are revoked, after an erasure (then the
database file is rewritten), and on shutdown (:mod:`streams.kafka.checkpoints`). Any failure
while processing, publishing or checkpointing ends the process at once (exit 70), before
anything is checkpointed: a restart replays from the last checkpoint and re-publishes
the same ids.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from prometheus_client import CollectorRegistry

from baselines.store import BaselineStore, Retention
from drift.model import Tick
from drift.outputs import ErasureReceipt, SessionSummary
from streams import topics
from streams.edge.tick import TICK_KEY, encode_tick
from streams.http import make_app
from streams.kafka.batches import FETCH_BYTES, fetch_raw, read_batches
from streams.kafka.broker_watch import BROKER_FAULTS, BrokerWatch
from streams.kafka.changelog import Changelog
from streams.kafka.checkpoints import Checkpoints, exit_for_replay
from streams.kafka.owners import Owners, partition_of
from streams.kafka.producers import AiokafkaSends, LibrdkafkaSends, Sends
from streams.kafka.publish import Publisher
from streams.metrics import Metrics, build_metrics
from streams.processing.engine import Engine
from streams.processing.records import InputRecord
from streams.settings import Settings

log = logging.getLogger("continuity_drift.worker")

#: What ``getmany`` raises when a record batch of the input cannot be read (a CRC mismatch,
#: a codec it lacks, bytes that do not decompress or parse): the worker then reads its
#: partitions by hand to find the batch (:meth:`Worker._skip_unreadable`).
UNREADABLE = (CorruptRecordException, UnsupportedCodecError, ValueError, struct.error,
              IndexError, EOFError)
#: The collector's thresholds while the worker runs. With Python's default (700) it traced
#: each event's new, surviving state again and again (7.6 of 61 us a record); the fold makes
#: no reference cycles, so one young collection in 50,000 allocations holds no more memory.
GC_THRESHOLDS = (50_000, 10, 10)
#: The most aiokafka's producer puts in one record batch of a partition (its default is 16 KB).
#: At 16 KB a partition's batch filled while the one before was in flight, so the loop waited
#: on ``send``, and each small batch was compressed by a call of its own: 256 KB made one
#: worker 14% faster (docs/performance.md). A real broker takes batches up to its
#: ``message.max.bytes`` (1 MB by default).
PRODUCER_BATCH_BYTES = 1 << 18

T = TypeVar("T")


def _log_failed_tick(ack: asyncio.Future[Any]) -> None:
    if not ack.cancelled() and ack.exception() is not None:
        log.warning("tick not written; the next timer round will",
                    extra={"error_type": type(ack.exception()).__name__})


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.worker.revoked({tp.partition for tp in revoked if tp.topic == topics.INPUT})

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.worker.assigned({tp.partition for tp in assigned
                                    if tp.topic == topics.INPUT})


class Worker:
    """The consumer loop, the engine and the store of one worker process."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.registry = CollectorRegistry()
        self.metrics: Metrics = build_metrics(self.registry)
        self.store = BaselineStore(settings.data_dir / "continuity.duckdb", retention=Retention(
            settings.history_versions, settings.history_sessions))
        self.engine = Engine(self.store, settings.drift, self.metrics, app_id=settings.app_id)
        self.review_token = settings.review_token
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.processing = False
        self.restoring = False
        self._last_tick = time.monotonic()
        self.checkpoints: Checkpoints | None = None
        self.publisher: Publisher | None = None
        self.sends: Sends | None = None
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self.changelog: Changelog | None = None
        self.owners: Owners | None = None
        self.input_partitions = 0
        self.broker = BrokerWatch(self.metrics, bootstrap)
        self._raw_client: AIOKafkaClient | None = None
        self._tick_sent: dict[int, int] = {}  # partition -> log end at its last tick

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT; returns the exit code."""
        gc.set_threshold(*GC_THRESHOLDS)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        runner = web.AppRunner(make_app(self), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.settings.web_host, self.settings.web_port).start()
        s = self.settings
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=2,
            max_batch_size=PRODUCER_BATCH_BYTES, enable_idempotence=False,
            client_id=f"{s.app_id}-producer",
            compression_type=None if s.compression == "none" else s.compression)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=s.app_id, client_id=s.app_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=int(s.session_timeout_s * 1000),
            heartbeat_interval_ms=int(s.heartbeat_interval_s * 1000),
            rebalance_timeout_ms=int(s.rebalance_timeout_s * 1000),
            fetch_max_wait_ms=int(s.fetch_wait_s * 1000), max_poll_records=s.batch_max,
            max_partition_fetch_bytes=FETCH_BYTES)
        try:
            await self.producer.start()
            self.sends = (LibrdkafkaSends(self.bootstrap, f"{s.app_id}-producer", s.compression)
                          if s.producer == "librdkafka" else AiokafkaSends(self.producer))
            self.changelog = Changelog(self.bootstrap, s.app_id, self.sends, topics.INPUT,
                                       self.metrics)
            await self.changelog.start()
            self.owners = Owners(self.bootstrap, s.app_id, self.producer, s.url)
            await self.owners.start(self.changelog.replication)
            self.publisher = Publisher(self.producer, self.sends, self.metrics, self.broker)
            self.input_partitions = await self.publisher.learn_partitions()
            self.checkpoints = Checkpoints(self.engine, self.store, self.changelog,
                                           self.publisher, self.consumer, self.metrics,
                                           self.broker)
            await self.consumer.start()
            self.consumer.subscribe([topics.INPUT], listener=_Rebalance(self))
            probe = asyncio.create_task(self.broker.watch(self.producer))
            try:
                await self._consume()
            finally:
                probe.cancel()
            async with self.lock:
                await self.checkpoints.take()
            return 0
        finally:
            await self.consumer.stop()
            if self.sends is not None:
                await self.sends.close()
            await self.producer.stop()
            if self.changelog is not None:
                self.changelog.close()
            if self.owners is not None:
                await self.owners.stop()
            if self._raw_client is not None:
                await self._raw_client.close()
            await runner.cleanup()
            self.store.close()

    async def _consume(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        s = self.settings
        while not self.stopping.is_set():
            try:
                fetched = await consumer.getmany(timeout_ms=int(s.batch_within_s * 1000),
                                                 max_records=s.batch_max)
            except UNREADABLE as exc:
                async with self.lock:
                    await self._guarded(self._skip_unreadable(exc))
                continue
            records = [m for msgs in fetched.values() for m in msgs]
            async with self.lock:
                await self._guarded(self._step(records))
            self.processing = True

    async def _step(self, records: Sequence[InputRecord]) -> None:
        consumer, checkpoints = self.consumer, self.checkpoints
        assert consumer is not None and checkpoints is not None
        if records:
            checkpoints.records += len(records)
            decoded = self.engine.decode(records)
            while True:
                batch = self.engine.process(records, decoded,
                                            stop_before_erasure=checkpoints.in_flight)
                for p, offset in batch.rewind.items():
                    consumer.seek(TopicPartition(topics.INPUT, p), offset)
                await checkpoints.publish(batch)
                if batch.stopped_at is None:
                    break
                await checkpoints.settle()  # the next record may erase: it must find it all
                records, decoded = records[batch.stopped_at:], decoded[batch.stopped_at:]
        clock = time.monotonic()
        if clock - self._last_tick >= self.settings.timer_interval_s:
            self._last_tick = clock
            await self._write_ticks()
            self._update_lag()
        if checkpoints.due(self.settings.checkpoint_interval_s):
            await checkpoints.take(wait=False)

    async def _write_ticks(self) -> None:
        """A tick record into each owned partition with something due by its event time
        (:meth:`Engine.ticks_due`): read back like any record, it closes idle sessions and
        expires baselines at the same place in every replay of the log. One tick at a time
        per partition (none until the worker has read past the log's end when it wrote the
        last), and for a quiet partition only once the worker has read it to its end."""
        consumer, producer = self.consumer, self.producer
        assert consumer is not None and producer is not None
        s = self.settings
        for p, (ts, quiet) in self.engine.ticks_due(s.quiet_after_s, s.tick_lateness_s).items():
            offset = self.engine.next_offsets.get(p, 0)
            high = consumer.highwater(TopicPartition(topics.INPUT, p))
            if high is None or (quiet and high > offset) or self._tick_sent.get(p, -1) >= offset:
                continue
            try:
                ack = await producer.send(topics.INPUT, encode_tick(Tick(self.settings.app_id,
                                                                         ts)),
                                          key=TICK_KEY, partition=p)
            except BROKER_FAULTS as exc:
                log.warning("tick not written; the next timer round will",
                            extra={"partitions": [p], "error_type": type(exc).__name__})
                continue
            ack.add_done_callback(_log_failed_tick)
            self._tick_sent[p] = high

    async def _skip_unreadable(self, error: BaseException) -> None:
        """``getmany`` met a record batch it cannot read: fetch each owned partition by hand
        from the offset processed to, process the records before its first unreadable
        batch, dead-letter that batch by its offsets, and seek every partition to where the
        engine stands (the failed call may have moved other partitions past records it
        never returned). If no partition holds such a batch, the error was something else,
        and it is raised."""
        consumer = self.consumer
        assert consumer is not None
        if self._raw_client is None:
            self._raw_client = AIOKafkaClient(bootstrap_servers=self.bootstrap,
                                              client_id=f"{self.settings.app_id}-reader")
            await self._until_done("reading a batch by hand", self._raw_client.bootstrap)
        client = self._raw_client
        found = False
        for p in sorted(self.engine.partitions):
            start = self.engine.fetch_from(p)
            raw = await self._until_done("reading a batch by hand", partial(
                fetch_raw, client, topics.INPUT, p, start))
            walked = read_batches(raw, p, start)
            if walked.unreadable is None:
                continue
            found = True
            await self._step(walked.records)
            bad = walked.unreadable
            await self._checkpoints().publish(self.engine.unreadable(
                p, bad.first_offset, bad.last_offset, bad.fault.value))
        for p in self.engine.partitions:
            consumer.seek(TopicPartition(topics.INPUT, p), self.engine.fetch_from(p))
        if not found:
            raise error

    async def _guarded(self, work: Awaitable[Any]) -> Any:
        """Run ``work``; on any failure exit before a checkpoint can cover it."""
        try:
            return await work
        except Exception:  # noqa: BLE001 - logged and ended in exit_for_replay
            exit_for_replay("processing failed")

    def _checkpoints(self) -> Checkpoints:
        assert self.checkpoints is not None, "the worker is running"
        return self.checkpoints

    # ------------------------------------------------------------------ partitions

    async def assigned(self, partitions: set[int]) -> None:
        async with self.lock:
            await self._guarded(self._assign(partitions))

    async def _assign(self, partitions: set[int]) -> None:
        """Restore each new partition from its changelog, then resume at its stored offset."""
        consumer, changelog = self.consumer, self.changelog
        assert consumer is not None and changelog is not None
        new = sorted(partitions - self.engine.partitions)
        self.restoring = True
        try:
            for p in new:
                restored = await self._until_done(
                    "restoring", partial(changelog.restore, p, self.store))
                self.metrics.restore_seconds.observe(restored.seconds)
                log.info("partition restored", extra={
                    "partitions": [p], "generation": restored.generation,
                    "records": restored.records, "bytes": restored.bytes,
                    "deltas": restored.deltas, "seconds": round(restored.seconds, 3)})
            stale = await asyncio.to_thread(self.store.held_partitions)
            if await asyncio.to_thread(self.store.drop_partitions, stale - partitions):
                await asyncio.to_thread(self.store.compact)
            self.engine.assign(partitions)
            for p in new:
                consumer.seek(TopicPartition(topics.INPUT, p), self.engine.fetch_from(p))
            owners = self.owners
            assert owners is not None
            # Ready only once the claim is written: the others route this worker's users by it.
            await self._until_done("claiming partitions",
                                   lambda: owners.announce(self.engine.partitions))
        finally:
            self.restoring = False
        gc.collect()
        gc.freeze()
        self.metrics.worker_ready.set(1 if self.engine.partitions else 0)
        log.info("partitions assigned", extra={"partitions": sorted(partitions)})

    async def revoked(self, partitions: set[int]) -> None:
        """Checkpoint, then hand the partitions over: their rows leave this worker's file
        (except on shutdown: a stopped worker's file keeps them for ``report`` until it
        starts again and drops what it no longer owns)."""
        async with self.lock:
            await self._guarded(self._checkpoints().take())
            self.engine.revoke(partitions)
            changelog = self.changelog
            assert changelog is not None
            changelog.forget(partitions)
            if not self.stopping.is_set() and await self._guarded(
                    asyncio.to_thread(self.store.drop_partitions, partitions)):
                await self._guarded(asyncio.to_thread(self.store.compact))
            owners = self.owners
            assert owners is not None
            await self._guarded(self._until_done(
                "claiming partitions", lambda: owners.announce(self.engine.partitions)))
        self.metrics.worker_ready.set(1 if self.engine.partitions else 0)
        log.info("partitions revoked", extra={"partitions": sorted(partitions)})

    # ------------------------------------------------------------------ broker faults

    async def _until_done(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        return await self.broker.until_done(what, attempt)

    def health(self) -> dict[str, Any]:
        return self.broker.health()

    def _update_lag(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        for p in self.engine.partitions:
            high = consumer.highwater(TopicPartition(topics.INPUT, p))
            if high is None:
                continue
            behind = max(0, int(high) - self.engine.next_offsets.get(p, 0))
            self.metrics.consumer_lag.labels(partition=str(p)).set(behind)

    # ------------------------------------------------------------------ HTTP host

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        degraded = self.health()["status"] != "ok"
        ok = (bool(self.engine.partitions) and self.processing and not self.restoring
              and not degraded)
        # The pid says which process answered (a port can change hands between workers).
        return ok, {"partitions": sorted(self.engine.partitions), "restoring": self.restoring,
                    "degraded": degraded, "pid": os.getpid()}

    def owner_of(self, user_id: str) -> str | None:
        """None when this worker answers for ``user_id``; else the owner's address, or ""
        while the user's partition has no owner (it is moving)."""
        partition = self.engine.memory.user_partition.get(user_id)
        if partition is None and self.input_partitions:
            partition = partition_of(user_id, self.input_partitions)
        if partition is None or partition in self.engine.partitions:
            return None
        owner = self.owners.owner(partition) if self.owners is not None else None
        return "" if owner is None or owner == self.settings.url else owner

    def open_session(self, user_id: str, session_id: str) -> SessionSummary | None:
        return self.engine.open_session(user_id, session_id)

    async def erase_user(self, user_id: str, request_id: str) -> ErasureReceipt:
        async with self.lock:
            checkpoints = self._checkpoints()
            await self._guarded(checkpoints.settle())
            batch, receipt = self.engine.erase_user(user_id, request_id)
            await self._guarded(checkpoints.publish(batch))
            await self._guarded(checkpoints.take())
        return receipt
