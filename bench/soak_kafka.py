"""The Kafka side of a soak run: the paced producer of the input records, the reader of every
output topic and the dead letters (up to a marker written to each partition), and the
input read back for its Kafka timestamps."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from bench.kafka_io import partition_of
from bench.soak_expected import digest
from streams import topics

MARKER_PREFIX = "bench-soak-marker-"


class PacedProducer(threading.Thread):
    """Offers the records at ``rate``/s from its own event loop; counts sends and acks."""

    def __init__(self, bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
                 partitions: int, rate: float) -> None:
        super().__init__(name="paced-producer", daemon=True)
        self.bootstrap, self.records, self.partitions, self.rate = (
            bootstrap, records, partitions, rate)
        self.sent = 0
        self.acked = 0
        self.acked_per_partition: Counter[int] = Counter()
        self.failed = 0
        self.errors: list[str] = []
        self.max_behind = 0
        self.started_wall = math.nan
        self.started_at = math.nan
        self.finished_at = math.nan
        self.stop_flag = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as exc:  # noqa: BLE001 - reported
            self.errors.append(repr(exc))
        finally:
            self.finished_at = time.monotonic()

    def _acked(self, fut: asyncio.Future[Any], part: int, n: int) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.failed += n
            if len(self.errors) < 5:
                self.errors.append(repr(fut.exception()) if not fut.cancelled() else "cancelled")
        else:
            self.acked += n
            self.acked_per_partition[part] += n

    async def _run(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=0,
                                    max_batch_size=1 << 20, max_request_size=8 << 20,
                                    request_timeout_ms=120_000, client_id="bench-soak")
        await producer.start()
        futures: list[asyncio.Future[Any]] = []
        try:
            total = len(self.records)
            self.started_wall = time.time()
            self.started_at = start = time.monotonic()
            while self.sent < total and not self.stop_flag.is_set():
                due = min(total, int((time.monotonic() - start) * self.rate))
                if due <= self.sent:
                    await asyncio.sleep(0.004)
                    continue
                self.max_behind = max(self.max_behind, due - self.sent)
                ts_ms = int(time.time() * 1000)
                batches: dict[int, Any] = {}
                counts: Counter[int] = Counter()
                for key, value, _ in self.records[self.sent:due]:
                    part = partition_of(key, self.partitions)
                    batch = batches.get(part)
                    if batch is None:
                        batch = batches[part] = producer.create_batch()
                    if batch.append(key=key, value=value, timestamp=ts_ms) is None:
                        fut = await producer.send_batch(batch, topics.INPUT, partition=part)
                        fut.add_done_callback(lambda f, p=part, n=counts[part]:
                                              self._acked(f, p, n))
                        futures.append(fut)
                        batch = batches[part] = producer.create_batch()
                        counts[part] = 0
                        batch.append(key=key, value=value, timestamp=ts_ms)
                    counts[part] += 1
                for part, batch in batches.items():
                    fut = await producer.send_batch(batch, topics.INPUT, partition=part)
                    fut.add_done_callback(lambda f, p=part, n=counts[part]: self._acked(f, p, n))
                    futures.append(fut)
                self.sent = due
                if len(futures) > 2000:
                    futures = [f for f in futures if not f.done()]
            await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 300)
        finally:
            await producer.stop()


class _Out(msgspec.Struct):
    id: str = ""
    user_id: str | None = None
    source_event_id: str | None = None
    cause_event_id: str | None = None
    event_id: str | None = None
    reason: str | None = None


@dataclass
class Seen:
    topic: str
    ts_ms: int
    cause: str | None
    user: str | None
    digest: bytes
    copies: int = 1
    differing_copies: int = 0


class Collector(threading.Thread):
    """Reads every partition of the output topics and the dead-letter topic from offset 0."""

    def __init__(self, bootstrap: str, partitions: int, expected: set[str]) -> None:
        super().__init__(name="output-reader", daemon=True)
        self.bootstrap, self.partitions, self.expected = bootstrap, partitions, expected
        self.seen: dict[str, Seen] = {}
        self.messages: Counter[str] = Counter()
        self.found_expected = 0
        self.deadletters: Counter[str] = Counter()
        self.undecodable = 0
        self.last_new = time.monotonic()
        self.finish = threading.Event()
        self.markers_seen = False
        self.error: str | None = None
        self._decode = msgspec.json.Decoder(_Out).decode

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as exc:  # noqa: BLE001 - reported
            self.error = repr(exc)

    def _take(self, topic: str, ts_ms: int, value: bytes | None) -> str | None:
        """Record one message; returns the marker id if it is one of ours."""
        try:
            o = self._decode(value or b"")
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.undecodable += 1
            return None
        if o.id.startswith(MARKER_PREFIX):
            return o.id
        self.last_new = time.monotonic()
        if topic == topics.DEADLETTER:
            self.deadletters[o.reason or "?"] += 1
            return None
        self.messages[topic] += 1
        d = digest(value or b"")
        s = self.seen.get(o.id)
        if s is not None:
            s.copies += 1
            if d != s.digest:
                s.differing_copies += 1
            return None
        self.seen[o.id] = Seen(topic, ts_ms, o.source_event_id or o.cause_event_id or o.event_id,
                               o.user_id, d)
        if o.id in self.expected:
            self.found_expected += 1
        return None

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        names = [*topics.OUTPUT_TOPICS.values(), topics.DEADLETTER]
        tps = [TopicPartition(t, p) for t in names for p in range(self.partitions)]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                    client_id="bench-soak-reader")
        await consumer.start()
        try:
            consumer.assign(tps)
            await consumer.seek_to_beginning()
            while not self.finish.is_set():
                got = await consumer.getmany(timeout_ms=300)
                for tp, msgs in got.items():
                    for m in msgs:
                        self._take(tp.topic, m.timestamp, m.value)
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                        client_id="bench-soak-marker")
            await producer.start()
            marker = MARKER_PREFIX + uuid.uuid4().hex
            try:
                await asyncio.gather(*[
                    await producer.send(tp.topic, json.dumps({"id": marker}).encode(),
                                        partition=tp.partition) for tp in tps])
            finally:
                await producer.stop()
            remaining = set(tps)
            deadline = time.monotonic() + 120
            while remaining and time.monotonic() < deadline:
                got = await consumer.getmany(timeout_ms=300)
                for tp, msgs in got.items():
                    for m in msgs:
                        if self._take(tp.topic, m.timestamp, m.value) == marker:
                            remaining.discard(tp)
            self.markers_seen = not remaining
            if remaining:
                self.error = (f"markers not read back on {len(remaining)} partitions within "
                              "120 s")
        finally:
            await consumer.stop()


async def read_input(bootstrap: str, partitions: int, want: set[str],
                      counts: dict[int, int], timeout_s: float
                      ) -> tuple[dict[str, int], dict[int, int]]:
    """Kafka timestamps of the input records whose event id is in ``want``; reads each
    partition until it has seen as many records as were acknowledged on it."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    class _Id(msgspec.Struct):
        event_id: str = ""

    decode = msgspec.json.Decoder(_Id).decode
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                max_partition_fetch_bytes=4 << 20, client_id="bench-soak-input")
    await consumer.start()
    found: dict[str, int] = {}
    read: Counter[int] = Counter()
    try:
        tps = [TopicPartition(topics.INPUT, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        quiet = time.monotonic()
        while time.monotonic() < deadline and any(read[p] < counts.get(p, 0)
                                                  for p in range(partitions)):
            got = await consumer.getmany(timeout_ms=500)
            if got:
                quiet = time.monotonic()
            elif time.monotonic() - quiet > 30:
                break
            for tp, msgs in got.items():
                read[tp.partition] += len(msgs)
                for m in msgs:
                    try:
                        eid = decode(m.value or b"").event_id
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        continue
                    if eid in want:
                        found[eid] = m.timestamp
    finally:
        await consumer.stop()
    return found, dict(read)


async def read_log(bootstrap: str, partitions: int, timeout_s: float
                   ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of ``fhr.events`` (partition, offset, key, value), read until each
    partition's position reaches the high watermark its fetch responses carry (the embedded
    broker's ListOffsets is not trusted). Call it once nothing writes to the topic."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                max_partition_fetch_bytes=4 << 20, client_id="bench-soak-log")
    await consumer.start()
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    try:
        tps = [TopicPartition(topics.INPUT, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                out.extend((tp.partition, m.offset, m.key, m.value) for m in msgs)
            done = True
            for tp in tps:
                high = consumer.highwater(tp)
                done = done and high is not None and await consumer.position(tp) >= high
            if done:
                break
    finally:
        await consumer.stop()
    return out

