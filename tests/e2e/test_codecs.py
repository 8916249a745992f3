"""Every producer a deployment has: each codec Kafka defines, and a batch no one can read.

Upstream producers here are librdkafka (``confluent-kafka``), what most non-Python
producers run underneath; the downstream reader is a ``confluent-kafka`` consumer group.
"""

from __future__ import annotations

import asyncio
import json
import struct

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, Producer

from streams import topics
from streams.edge.codec import encode_event
from tests.builders import UserScript
from tests.conftest import wait_until

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
GZIP = 1  # the codec id of gzip in a record batch's attributes


def _produce(bootstrap: str, codec: str, script: UserScript, partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "linger.ms": 20, "enable.idempotence": False})
    for e in script.events:
        producer.produce(topics.INPUT, key=e.user_id.encode(), value=encode_event(e),
                         partition=partition)
    assert producer.flush(30) == 0, f"{codec}: not every record was delivered"


def _corrupt_batch(key: bytes) -> bytes:
    """A gzip record batch of three records whose compressed bytes were flipped after its CRC
    was computed: the broker stores it as sent, and no reader can check or inflate it."""
    builder = DefaultRecordBatchBuilder(2, GZIP, 0, -1, -1, -1,
                                        1 << 20)
    for i in range(3):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=b'{"x": 1}' * 20,
                       headers=[])
    data = builder.build()
    data[-4] ^= 0xFF
    assert struct.unpack_from(">b", data, 16)[0] == 2  # record batch format v2
    return bytes(data)


async def _produce_raw(bootstrap: str, partition: int, batch: bytes) -> None:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        node = client.cluster.leader_for_partition(TopicPartition(topics.INPUT, partition))
        response = await client.send(node, ProduceRequest(
            required_acks=-1, timeout=10_000, topics=[(topics.INPUT, [(partition, batch)])],
            transactional_id=None))
        (_, parts), = response.topics
        assert parts[0][1] == 0, f"the broker refused the hand-built batch: {parts}"
    finally:
        await client.close()


def _read_group(bootstrap: str, wanted: set[str]) -> list[dict[str, object]]:
    """The outputs a downstream ``confluent-kafka`` consumer group reads, until it has seen a
    score of every user in ``wanted``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "downstream-team",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topics.SCORES, topics.RESPONSES])
    got: list[dict[str, object]] = []
    try:
        def scored_all() -> bool:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                value = json.loads(msg.value())
                assert value["schema"] == "drift/1"
                assert msg.key().decode() == value["user_id"]
                got.append(value)
            return wanted <= {str(m["user_id"]) for m in got if m.get("score_kind")}

        wait_until(scored_all, 120, "a downstream group reading a score of every user")
    finally:
        consumer.close()
    return got


def test_every_codec_is_read_and_an_unreadable_batch_is_a_dead_letter(broker, start_worker):
    worker = start_worker()
    users = {codec: UserScript(f"codec-{codec}", seed=i) for i, codec in enumerate(CODECS)}
    for codec, script in users.items():
        for s in range(2):
            script.session(f"{codec}-s{s}")
    partition = 1  # all on one partition: the unreadable batch sits between them
    first, rest = CODECS[:2], CODECS[2:]
    for codec in first:
        _produce(broker.bootstrap, codec, users[codec], partition)
    asyncio.run(_produce_raw(broker.bootstrap, partition, _corrupt_batch(b"codec-corrupt")))
    for codec in rest:
        _produce(broker.bootstrap, codec, users[codec], partition)

    outputs = _read_group(broker.bootstrap, {s.user_id for s in users.values()})
    assert {m["user_id"] for m in outputs} == {s.user_id for s in users.values()}

    letters = broker.read(topics.DEADLETTER)
    assert [m["reason"] for m in letters] == ["batch_crc_mismatch"]
    source = letters[0]["source"]
    before = sum(len(users[c].events) for c in first)
    assert source == {"topic": topics.INPUT, "partition": partition, "offset": before,
                      "last_offset": before + 2}
    assert letters[0]["event_id"] is None and letters[0]["fields"] == []
    assert "x" not in json.dumps(letters[0]["source"])  # no value of the batch in the letter
    text = worker.metrics_text()
    assert 'continuity_unreadable_batches_total{reason="batch_crc_mismatch"} 1.0' in text
    assert 'continuity_rejections_total{reason="batch_crc_mismatch"} 1.0' in text
    assert worker.proc is not None and worker.proc.poll() is None

    # A restart replays from its checkpoint: the batch is passed again, under the same id.
    worker.kill()
    worker.start()
    late = UserScript("codec-after-restart", seed=9)
    late.session("late-s0")
    late.session("late-s1")  # a first session has no baseline to score against
    _produce(broker.bootstrap, "zstd", late, partition)
    wait_until(lambda: broker.drift_scores(late.user_id), 90, "the late user's score")
    assert {m["id"] for m in broker.read(topics.DEADLETTER)} == {letters[0]["id"]}
