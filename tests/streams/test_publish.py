"""The publisher on a real broker: a batch's messages are let go once their acks are in (a
checkpoint holds only what the broker refused), and what is not a broker fault reaches the
checkpoint that awaits it."""

from __future__ import annotations

import asyncio
import weakref

import pytest
from aiokafka import AIOKafkaProducer
from kafka.errors import KafkaTimeoutError
from prometheus_client import CollectorRegistry

from streams import topics
from streams.kafka.broker_watch import BrokerWatch
from streams.kafka.producers import AiokafkaSends
from streams.kafka.publish import Publisher, _refusals
from streams.metrics import build_metrics
from streams.processing.records import OutMessage, PendingBatch


class _Held(list[OutMessage]):
    """A batch's message list that a weak reference can watch."""


def test_a_batch_s_messages_are_let_go_once_acked_and_the_checkpoint_gets_nothing_to_resend(
        broker):
    async def publish() -> tuple[list[object], bool, int]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            metrics = build_metrics(CollectorRegistry())
            publisher = Publisher(producer, AiokafkaSends(producer), metrics,
                                  BrokerWatch(metrics, broker.bootstrap))
            batch = PendingBatch()
            batch.messages = _Held(OutMessage(topics.SCORES, f"u{i}".encode(), b"v%d" % i, -1)
                                   for i in range(50))
            watched = weakref.ref(batch.messages)
            await publisher.publish(batch)
            del batch
            sent = publisher.take_unacked()
            refused = [await f for f in sent]
            let_go = watched() is None  # the acks are in: nothing holds the messages
            await publisher.acked(sent)  # nothing to send again
            return refused, let_go, len(publisher.take_unacked())
        finally:
            await producer.stop()

    refused, let_go, left = asyncio.run(publish())
    assert refused == [[]]
    assert let_go
    assert left == 0


def test_what_the_broker_refused_is_kept_and_any_other_failure_reaches_the_checkpoint():
    async def settle() -> tuple[list[tuple[OutMessage, BaseException]], BaseException | None,
                                bool]:
        loop = asyncio.get_running_loop()
        kept, gone = (OutMessage(topics.SCORES, b"u", b"v1", 0),
                      OutMessage(topics.SCORES, b"u", b"v2", 0))
        fault = KafkaTimeoutError()
        acks: asyncio.Future[list[object]] = loop.create_future()
        refused = _refusals([kept, gone], acks)
        acks.set_result([fault, None])
        resend = await refused

        broken: asyncio.Future[list[object]] = loop.create_future()
        raised = _refusals([kept], broken)
        broken.set_result([ValueError("not a broker fault")])
        with pytest.raises(ValueError, match="not a broker fault"):
            await raised

        stopped: asyncio.Future[list[object]] = loop.create_future()
        cancelled = _refusals([kept], stopped)
        stopped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return resend, raised.exception(), cancelled.cancelled()

    resend, exc, cancelled = asyncio.run(settle())
    assert [(m.value, type(e)) for m, e in resend] == [(b"v1", KafkaTimeoutError)]
    assert isinstance(exc, ValueError)
    assert cancelled
