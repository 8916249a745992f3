"""The benchmarks' records on a broker: their partitions, producing them (paced or as fast
as the broker takes them), topics, the offsets they end at, reading a topic back, and a
group's committed offsets."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from kafka.partitioner.default import murmur2

from streams import topics


def partition_of(key: bytes, partitions: int) -> int:
    """The partition kafka-python's and the Java client's default partitioner pick."""
    return int((murmur2(key) & 0x7FFFFFFF) % partitions)

#: The paced producer's linger. The embedded broker's fetch slows as a partition's count of
#: record batches grows: hand-made batches every 4 ms (and per-record sends without a
#: linger) made a plain consumer's p99 climb over one 15 s offer, 17 -> 382 ms at 5,000/s;
#: with a 10 ms linger it stays at 25-45 ms at 5,000/s and 10,000/s
#: (``python bench/broker_latency.py --rate 5000,10000``).
PACED_LINGER_MS = 10

async def produce_async(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
                   partitions: int, rate: float = 0.0,
                   acks: list[float] | None = None, topic: str = topics.INPUT
                   ) -> tuple[int, float]:
    """Send records to ``topic``; paced at ``rate``/s when ``rate`` > 0, else as fast as the
    broker takes them (in per-partition batches of up to 5,000 records a round).

    A paced offer is steady: each record is handed to the producer when it is due (every
    ``1/rate`` s, checked each millisecond), stamped with the wall-clock time it is offered
    as its Kafka timestamp, and the producer batches it with what else arrives within
    :data:`PACED_LINGER_MS`, as an upstream service's producer does (so the linger counts
    in every latency measured from that timestamp). ``acks`` collects, per record, seconds
    from offer to broker acknowledgement.
    """
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                linger_ms=PACED_LINGER_MS if rate > 0 else 0,
                                max_batch_size=1 << 20, max_request_size=8 << 20,
                                client_id="bench-throughput")
    await producer.start()
    started = time.monotonic()
    try:
        if rate > 0:
            sent = await _offer_steadily(producer, records, partitions, rate, acks, topic,
                                         started)
        else:
            sent = await _produce_batches(producer, records, partitions, topic)
    finally:
        await producer.stop()
    return sent, time.monotonic() - started

def produce(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
            partitions: int) -> float:
    sent, elapsed = asyncio.run(produce_async(bootstrap, records, partitions))
    return float(sent / max(elapsed, 1e-9))

def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create one topic explicitly (the embedded broker would auto-create it with 4
    partitions)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-admin")
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()

def delete_topic(bootstrap: str, name: str) -> None:
    """Delete one topic (the embedded broker keeps its log in memory)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-admin")
    try:
        admin.delete_topics([name])
    finally:
        admin.close()

def offsets_after(records: Sequence[tuple[bytes, bytes, str]], partitions: int
                  ) -> dict[int, int]:
    """Next offset of each partition of a fresh topic after ``records``.

    Counted here rather than asked of the broker: the embedded broker (Tansu 0.6)
    answers ListOffsets(latest) with the base offset of the last batch plus one,
    not the end of the log (fetch responses carry the right high watermark).
    """
    counts = Counter(partition_of(key, partitions) for key, _, _ in records)
    return {p: counts.get(p, 0) for p in range(partitions)}

def read_all(bootstrap: str, topic: str, idle_s: float = 3.0,
             timeout_s: float = 300.0) -> list[tuple[int, bytes]]:
    return asyncio.run(_read_all(bootstrap, topic, idle_s, timeout_s))

def commit_group_offsets(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """Give a fresh consumer group committed offsets, so that it starts there."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topics.INPUT, p): OffsetAndMetadata(o, "", -1)
                         for p, o in offsets.items()})
    finally:
        consumer.close()


async def _offer_steadily(producer: Any, records: Sequence[tuple[bytes, bytes, str]],
                          partitions: int, rate: float, acks: list[float] | None, topic: str,
                          started: float) -> int:
    futures: list[asyncio.Future[Any]] = []
    total = len(records)
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        if due <= sent:
            await asyncio.sleep(0.001)
            continue
        for key, value, _ in records[sent:due]:
            offered = time.time()
            fut = await producer.send(topic, value=value, key=key,
                                      partition=partition_of(key, partitions),
                                      timestamp_ms=int(offered * 1000))
            if acks is not None:
                fut.add_done_callback(lambda _f, t=offered: acks.append(time.time() - t))
            futures.append(fut)
        sent = due
    await asyncio.wait_for(asyncio.gather(*futures), timeout=120)
    return sent

async def _produce_batches(producer: Any, records: Sequence[tuple[bytes, bytes, str]],
                           partitions: int, topic: str) -> int:
    futures: list[asyncio.Future[Any]] = []
    total = len(records)
    sent = 0
    while sent < total:
        due = min(total, sent + 5000)
        batches: dict[int, Any] = {}
        for key, value, _ in records[sent:due]:
            part = partition_of(key, partitions)
            batch = batches.get(part)
            if batch is None:
                batch = batches[part] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batch, topic, partition=part))
                batch = batches[part] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
        for part, batch in batches.items():
            futures.append(await producer.send_batch(batch, topic, partition=part))
        sent = due
        if len(futures) > 200:
            await asyncio.gather(*futures)
            futures.clear()
    await asyncio.wait_for(asyncio.gather(*futures), timeout=120)
    return sent

async def _read_all(bootstrap: str, topic: str, idle_s: float,
                    timeout_s: float) -> list[tuple[int, bytes]]:
    """(timestamp ms, value) of every record of ``topic``, until nothing new for ``idle_s``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    out: list[tuple[int, bytes]] = []
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or [])
        consumer.assign([TopicPartition(topic, p) for p in parts])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < idle_s:
            batches = await consumer.getmany(timeout_ms=200)
            for msgs in batches.values():
                if msgs:
                    quiet_since = time.monotonic()
                out.extend((msg.timestamp, msg.value) for msg in msgs)
    finally:
        await consumer.stop()
    return out
