"""librdkafka's producer on a real broker: every message acked and on its partition, a
refusal returned as a broker fault, and a key placed where aiokafka places it; the acks of
aiokafka's awaited a record batch at a time, as ``asyncio.gather`` would return them."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer
from hypothesis import given
from hypothesis import strategies as st
from kafka import KafkaConsumer, TopicPartition

from streams import topics
from streams.kafka.broker_watch import BROKER_FAULTS
from streams.kafka.producers import DeliveryFailed, LibrdkafkaSends, log, settled


def _read(bootstrap: str, topic: str, partitions: int) -> dict[bytes, int]:
    """Each message's value and the partition it is on."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=2000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        return {m.value: m.partition for m in consumer}
    finally:
        consumer.close()


def test_librdkafka_messages_are_acked_in_order_and_placed_as_aiokafka_places_a_key(broker):
    keys = [f"user-{i}".encode() for i in range(40)]

    async def publish() -> tuple[list[object], list[object], dict[bytes, int]]:
        outputs = LibrdkafkaSends(broker.bootstrap, "test-outputs", "zstd")
        try:
            placed = await outputs.send_all(
                [(topics.SCORES, k, b"placed-" + k, None) for k in keys])
            pinned = await outputs.send_all(
                [(topics.RESPONSES, k, b"pinned-" + k, 3) for k in keys])
            results = await asyncio.wait_for(placed, 30), await asyncio.wait_for(pinned, 30)
            empty = await outputs.send_all([])
            assert await empty == []
        finally:
            await outputs.close()
        aio = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await aio.start()
        try:  # where aiokafka's partitioner puts each key (the worker's other producer)
            where = {k: aio._partition(topics.SCORES, None, None, None, k, b"")
                     for k in keys}
        finally:
            await aio.stop()
        return *results, where

    placed, pinned, where = asyncio.run(publish())
    assert placed == [None] * len(keys) and pinned == [None] * len(keys)
    on_scores = _read(broker.bootstrap, topics.SCORES, 4)
    assert {v: p for v, p in on_scores.items()} == {b"placed-" + k: where[k] for k in keys}
    assert len(set(where.values())) > 1  # the keys do spread: the check above means something
    on_responses = _read(broker.bootstrap, topics.RESPONSES, 4)
    assert on_responses == {b"pinned-" + k: 3 for k in keys}


def test_a_message_librdkafka_refuses_settles_as_a_broker_fault_and_the_rest_are_acked(broker):
    async def publish() -> list[object]:
        outputs = LibrdkafkaSends(broker.bootstrap, "test-outputs", "none")
        try:
            done = await outputs.send_all([(topics.SCORES, b"k", b"fine", 0),
                                           (topics.SCORES, b"k", b"nowhere", 99),
                                           (topics.SCORES, b"k", b"fine too", 1)])
            return await asyncio.wait_for(done, 30)
        finally:
            await outputs.close()

    results = asyncio.run(publish())
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], DeliveryFailed) and isinstance(results[1], BROKER_FAULTS)
    assert _read(broker.bootstrap, topics.SCORES, 4) == {b"fine": 0, b"fine too": 1}


def test_a_full_librdkafka_queue_holds_the_sender_back_until_there_is_room(broker):
    values = [f"m{i}".encode() for i in range(60)]

    async def publish() -> list[object]:
        outputs = LibrdkafkaSends(broker.bootstrap, "test-outputs", "none", queue_messages=4)
        try:  # at most four unacknowledged: the rest wait for room, none is dropped
            done = await outputs.send_all([(topics.SCORES, b"k", v, 2) for v in values])
            return await asyncio.wait_for(done, 30)
        finally:
            await outputs.close()

    assert asyncio.run(publish()) == [None] * len(values)
    assert _read(broker.bootstrap, topics.SCORES, 4) == {v: 2 for v in values}


def test_librdkafka_s_failed_reconnects_are_left_to_the_broker_watch_and_the_rest_logged(
        caplog):
    caplog.set_level(logging.INFO, logger=log.name)
    fail = ("FAIL [continuity-drift-producer#producer-1] [thrd:127.0.0.1:9/bootstrap]: "
            "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused")
    other = "ERROR [continuity-drift-producer#producer-1] [thrd:app]: message too large"
    log.error("%s", fail)
    log.error("%s", other)
    assert [r.getMessage() for r in caplog.records if r.name == log.name] == [other]


@given(st.lists(st.tuples(st.sampled_from(["ok", "fault", "cancelled"]), st.integers(0, 3)),
                min_size=1, max_size=12))
def test_acks_awaited_a_record_batch_at_a_time_give_what_gather_gives(acks):
    """Acks settled in groups (a record batch's together, in any order of groups), each a
    result, a broker fault or a cancellation: ``settled`` returns, in order, what
    ``asyncio.gather(..., return_exceptions=True)`` returns for them."""
    async def both() -> tuple[list[object], list[object]]:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in acks]
        ours = asyncio.ensure_future(settled(futures))
        theirs = asyncio.gather(*futures, return_exceptions=True)
        for group in sorted({g for _, g in acks}, reverse=True):
            await asyncio.sleep(0)
            for f, (how, g) in zip(futures, acks, strict=True):
                if g == group:
                    if how == "ok":
                        f.set_result(f"acked {g}")
                    elif how == "fault":
                        f.set_exception(DeliveryFailed(f"refused {g}"))
                    else:
                        f.cancel()
        return await ours, await theirs

    ours, theirs = asyncio.run(both())
    assert [type(r) for r in ours] == [type(r) for r in theirs]
    assert [str(r) for r in ours] == [str(r) for r in theirs]
