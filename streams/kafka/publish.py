"""Outputs to Kafka: each batch's messages handed to the producer without waiting, and
their acknowledgements awaited by the checkpoint that covers the batch (docs/design.md,
"Processing guarantees"). What the broker refused is sent again, the same messages with the
same ids, until it has taken everything. The producer is either client
(:mod:`streams.kafka.producers`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from streams import topics
from streams.kafka.broker_watch import BROKER_FAULTS, BrokerWatch
from streams.kafka.producers import Sends
from streams.metrics import Metrics, observe_many
from streams.processing.records import OutMessage, PendingBatch

Refused = list[tuple[OutMessage, BaseException]]
"""Messages the broker refused, each with why."""
#: Batches handed to the producer, in order: for each, a future of what the broker refused of
#: it, set once all its acks are in.
Sent = list[asyncio.Future[Refused]]


def _refused(messages: list[OutMessage], results: list[Any]) -> Refused:
    """The messages the broker refused, with why; any other failure is raised."""
    failed = [(m, r) for m, r in zip(messages, results, strict=True)
              if isinstance(r, BaseException)]
    for _, r in failed:
        if not isinstance(r, BROKER_FAULTS):
            raise r
    return failed


def _refusals(messages: list[OutMessage], done: asyncio.Future[list[Any]]
              ) -> asyncio.Future[Refused]:
    """What the broker refused of ``messages``, once ``done`` (their acks) is; the messages it
    took, and their acks, are let go then. Held until the checkpoint that covers them, they
    would keep 5-10 s of outputs in memory (100-190 MB of a worker's RSS at full speed:
    docs/performance.md, "1M events at full speed"). Any failure other than a broker fault
    is the future's exception."""
    refused: asyncio.Future[Refused] = done.get_loop().create_future()

    def settle(acks: asyncio.Future[list[Any]]) -> None:
        if acks.cancelled():
            refused.cancel()
            return
        try:
            refused.set_result(_refused(messages, acks.result()))
        except BaseException as exc:  # noqa: BLE001 - the checkpoint that awaits it raises it
            refused.set_exception(exc)

    done.add_done_callback(settle)
    return refused


class Publisher:
    """The producer's side of one worker."""

    def __init__(self, producer: AIOKafkaProducer | None, sends: Sends, metrics: Metrics,
                 broker: BrokerWatch) -> None:
        assert producer is not None
        self.producer = producer
        """aiokafka's producer, which learns the topics' partitions."""
        self.sends = sends
        self.metrics = metrics
        self.broker = broker
        self.copartitioned: set[str] = set()
        self._unacked: Sent = []

    async def learn_partitions(self) -> int:
        """Output topics with as many partitions as the input get each message on its input
        partition: co-partitioned by user, without running the partitioner per message.
        Returns the input's partition count."""
        wanted = len(await self.producer.partitions_for(topics.INPUT))
        for topic in (*topics.OUTPUT_TOPICS.values(), topics.DEADLETTER):
            if len(await self.producer.partitions_for(topic)) == wanted:
                self.copartitioned.add(topic)
        return wanted

    async def publish(self, batch: PendingBatch) -> None:
        """Hand a batch's messages to the producer and go on; the checkpoint that covers
        the batch waits for their acks (:meth:`acked`) before it writes anything."""
        if not batch.messages:
            return
        done = await self.send_all(batch.messages)
        latency, sources = self.metrics.end_to_end_latency, batch.source_timestamps

        def observe(_: asyncio.Future[Any]) -> None:
            now_ms = 1000.0 * time.time()
            observe_many(latency, [max(0.0, now_ms - ts) / 1000.0 for ts in sources if ts > 0])

        done.add_done_callback(observe)
        self._unacked.append(_refusals(batch.messages, done))

    def take_unacked(self) -> Sent:
        """The batches handed over since the last call, for the checkpoint to await."""
        sent, self._unacked = self._unacked, []
        return sent

    async def send_all(self, messages: Sequence[OutMessage]) -> asyncio.Future[list[Any]]:
        """Enqueue ``messages``; each one's ack or the broker fault that refused it, in their
        order, once all are settled."""
        copartitioned = self.copartitioned
        return await self.sends.send_all(
            [(m.topic, m.key, m.value,
              m.partition if m.partition >= 0 and m.topic in copartitioned else None)
             for m in messages])

    async def acked(self, sent: Sent) -> None:
        """Wait for the acks of ``sent``; send what the broker did not take again (the same
        messages, the same ids) until it has taken everything."""
        pending = [m for refused in sent for m, _ in await refused]

        async def attempt() -> None:
            nonlocal pending
            failed = _refused(pending, await (await self.send_all(pending)))
            pending = [m for m, _ in failed]
            if failed:
                raise failed[0][1]

        if pending:
            await self.broker.until_done("publishing", attempt)
