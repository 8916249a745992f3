"""The worker's producers behind one call: hand messages over, and get a future of each
one's ack (or the fault that refused it), in their order, once all are settled.

:class:`AiokafkaSends` is aiokafka's producer, the default. :class:`LibrdkafkaSends` is
librdkafka's (confluent-kafka), as ``[worker] producer = "librdkafka"`` asks: it takes the
outputs and the changelog, and costs the worker's loop about a third of aiokafka's CPU per
message (``bench/producer_cost.py``, docs/performance.md). Ticks and ownership claims, a few
messages a minute, stay on aiokafka's producer either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from streams.kafka.broker_watch import BROKER_FAULTS

log = logging.getLogger("continuity_drift.producer")


class _ReconnectNoise(logging.Filter):
    """librdkafka logs each failed attempt to reach a broker (``FAIL``, twice a second at
    first); the broker watch already says, once, when the broker is out of reach, so those
    lines go and every other line of librdkafka's stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("FAIL ")


log.addFilter(_ReconnectNoise())

#: (topic, key, value, partition; None: the partitioner's choice by key)
Message = tuple[str, bytes | None, bytes, int | None]


class DeliveryFailed(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """librdkafka did not deliver a message (its error, as it states it): a broker fault,
    sent again as any other."""


class Sends(Protocol):
    async def send_all(self, messages: Sequence[Message]) -> asyncio.Future[list[Any]]:
        """Hand ``messages`` over, in order; a future of each one's ack or the broker fault
        that refused it (any other failure is raised), once all are settled."""

    async def close(self) -> None:
        """Let go of what this producer holds of its own."""


async def _failed(exc: BaseException) -> None:
    raise exc


async def settled(acks: Sequence[asyncio.Future[Any]]) -> list[Any]:
    """Each ack's result, or the exception that settled it, in order, once all are settled
    (as ``asyncio.gather(*acks, return_exceptions=True)``). aiokafka settles a record batch's
    acks together, so waiting for the first one not yet settled and then reading on waits
    once a record batch, where ``gather`` runs a callback for every message: aiokafka's
    producer costs 9 us of CPU a message this way, 20 gathered (``bench/producer_cost.py``)."""
    for ack in acks:
        if not ack.done():
            await asyncio.wait((ack,))
    return [asyncio.CancelledError() if a.cancelled() else a.exception() or a.result()
            for a in acks]


class AiokafkaSends:
    """aiokafka's producer (which the worker starts and stops)."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def send_all(self, messages: Sequence[Message]) -> asyncio.Future[list[Any]]:
        return asyncio.ensure_future(settled([await self._send(m) for m in messages]))

    async def _send(self, m: Message) -> asyncio.Future[Any]:
        topic, key, value, partition = m
        try:
            ack: asyncio.Future[Any] = await self.producer.send(topic, value, key=key,
                                                                partition=partition)
            return ack
        except BROKER_FAULTS as exc:
            return asyncio.ensure_future(_failed(exc))

    async def close(self) -> None:
        return None


class LibrdkafkaSends:
    """librdkafka's producer (confluent-kafka): ``produce`` hands a message to its queue, and
    its own threads batch, compress and send it. Its delivery reports are served on the loop's
    thread (``poll``, every :attr:`POLL_S` while any is due), so the futures they settle
    are only ever touched there; a full queue waits for room (back-pressure, as aiokafka's
    full batch does)."""

    POLL_S = 0.001
    #: Messages librdkafka may hold unacknowledged (its default is 100,000): when the broker
    #: is out of reach the loop stops here, as aiokafka's does at a full record batch, a
    #: second or two of outputs after it, instead of holding outputs and state for minutes.
    QUEUE_MESSAGES = 10_000
    #: ... and bytes (its default is 1 GB); a checkpoint's changelog delta is a few MB.
    QUEUE_KB = 64 * 1024

    def __init__(self, bootstrap: str, client_id: str, compression: str,
                 queue_messages: int = QUEUE_MESSAGES) -> None:
        # Imported here: only a worker configured for it needs the library.
        from confluent_kafka import KafkaException, Producer

        self._refusal = KafkaException
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "client.id": client_id, "acks": "all",
            "linger.ms": 2, "enable.idempotence": False, "compression.type": compression,
            # A key's partition as the Java client and aiokafka place it (murmur2).
            "partitioner": "murmur2_random", "logger": log,
            "queue.buffering.max.messages": queue_messages,
            "queue.buffering.max.kbytes": self.QUEUE_KB})
        self._due = 0
        self._serving: asyncio.Task[None] | None = None

    async def send_all(self, messages: Sequence[Message]) -> asyncio.Future[list[Any]]:
        """Hand ``messages`` to librdkafka, in order; a future of each one's ack (None) or
        the fault that refused it, in their order, once all are settled."""
        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        results: list[Any] = [None] * len(messages)
        left = [len(messages)]

        def settle(i: int, fault: Exception | None) -> None:
            results[i] = fault
            left[0] -= 1
            if not left[0] and not done.done():
                done.set_result(results)

        if not messages:
            done.set_result(results)
        for i, (topic, key, value, partition) in enumerate(messages):
            refused = await self._produce(topic, key, value, partition, self._report(settle, i))
            if refused is not None:
                settle(i, refused)
        self._serve()
        # aiokafka's producer waits on the loop whenever a record batch fills; librdkafka's
        # never does, and getmany returns buffered records without waiting either: without
        # this turn, the checkpoint in flight, these reports and the HTTP endpoints would
        # wait until the consumer's buffer runs dry (docs/design.md).
        await asyncio.sleep(0)
        return done

    def _report(self, settle: Callable[[int, Exception | None], None], i: int
                ) -> Callable[[Any, Any], None]:
        """librdkafka's delivery report for message ``i``: its error, if any, as the fault."""
        def report(err: Any, _: Any) -> None:
            self._due -= 1
            settle(i, None if err is None else DeliveryFailed(str(err)))
        return report

    async def _produce(self, topic: str, key: bytes | None, value: bytes, partition: int | None,
                       report: Callable[[Any, Any], None]) -> DeliveryFailed | None:
        """Hand one message over (waiting while librdkafka's queue is full); the fault if
        librdkafka refused it at once."""
        while True:
            try:
                self._producer.produce(topic, value, key=key,
                                       partition=-1 if partition is None else partition,
                                       on_delivery=report)
            except BufferError:  # the queue is full: serve reports, and try again
                self._producer.poll(0)
                await asyncio.sleep(self.POLL_S)
                continue
            except self._refusal as exc:
                return DeliveryFailed(str(exc))
            self._due += 1
            return None

    def _serve(self) -> None:
        if self._due > 0 and (self._serving is None or self._serving.done()):
            self._serving = asyncio.create_task(self._serve_reports())

    async def _serve_reports(self) -> None:
        while self._due > 0:
            self._producer.poll(0)
            await asyncio.sleep(self.POLL_S)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Serve the reports still due (for at most ``timeout_s``), then let go."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._serve_reports(), timeout_s)
        if self._serving is not None:
            self._serving.cancel()
