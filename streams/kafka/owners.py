"""Which worker owns which partition, so any worker can answer the review API for any user.

Each worker appends a :class:`Claim` to the one-partition topic ``<app_id>.owners``
whenever its partitions change: its HTTP address and the partitions it owns
now (empty once they are revoked). Every worker reads the topic from the start
and keeps following it. The owner of a partition is the worker whose latest
claim names it, latest by offset; a claim replaces the same worker's earlier
ones. A user's partition is the one Kafka's default partitioner (murmur2 of the
key, as every Kafka client computes it) puts the user id on.

The topic holds a few records per rebalance and no user data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.partitioner.default import murmur2

log = logging.getLogger("continuity_drift.owners")


class Claim(msgspec.Struct, frozen=True, array_like=True):
    worker: str
    partitions: tuple[int, ...]
    ts: float


def partition_of(user_id: str, partitions: int) -> int:
    """The input partition of ``user_id``, as Kafka's default partitioner places its key.

    >>> partition_of("u-1", 4) == partition_of("u-1", 4) and 0 <= partition_of("u-1", 4) < 4
    True
    """
    return (int(murmur2(user_id.encode("utf-8"))) & 0x7FFFFFFF) % partitions


class Owners:
    """The claims of the group's workers, followed from the owners topic."""

    def __init__(self, bootstrap: str, app_id: str, producer: AIOKafkaProducer, url: str) -> None:
        self.bootstrap = bootstrap
        self.topic = f"{app_id}.owners"
        self.producer = producer
        self.url = url
        self._claims: dict[str, tuple[int, frozenset[int]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self, replication: int) -> None:
        def create() -> None:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
            try:
                if self.topic not in admin.list_topics():
                    admin.create_topics([NewTopic(self.topic, 1, replication)])
            except TopicAlreadyExistsError:
                pass
            finally:
                admin.close()

        await asyncio.to_thread(create)
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                          enable_auto_commit=False)
        await self._consumer.start()
        tp = TopicPartition(self.topic, 0)
        self._consumer.assign([tp])
        self._consumer.seek(tp, 0)
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def _follow(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        decode = msgspec.msgpack.Decoder(Claim).decode
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=1000)
            except KafkaError as e:  # a follower that stopped would forward nothing again
                log.warning("owners topic not read; retrying", extra={"error_type": type(e).__name__})
                await asyncio.sleep(1.0)
                continue
            for messages in batches.values():
                for m in messages:
                    try:
                        claim = decode(m.value)
                    except msgspec.DecodeError:
                        log.warning("unreadable owner claim skipped", extra={"offset": m.offset})
                        continue
                    self._claims[claim.worker] = (m.offset, frozenset(claim.partitions))

    async def announce(self, partitions: set[int]) -> None:
        """Claim exactly ``partitions`` for this worker."""
        claim = Claim(self.url, tuple(sorted(partitions)), time.time())
        await (await self.producer.send(self.topic, msgspec.msgpack.encode(claim), partition=0))

    def owner(self, partition: int) -> str | None:
        """The address of the worker that claimed ``partition`` last, or None."""
        best: tuple[int, str] | None = None
        for worker, (offset, parts) in self._claims.items():
            if partition in parts and (best is None or offset > best[0]):
                best = (offset, worker)
        return best[1] if best else None
