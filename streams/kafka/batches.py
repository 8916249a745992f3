"""Record batches read by hand: finding the batch the consumer could not read, and its offsets.

aiokafka reads a partition's record batches lazily inside ``getmany``. When one of them
cannot be read (its CRC does not match, its codec is unknown or its bytes do not
decompress or parse), ``getmany`` raises without naming the batch, and the records of
the same call that came before it are not returned either; the partition would stop
there for good, since every fetch from the same position meets the same batch. The
worker then fetches each of its partitions itself from the offset it has processed
to (:func:`fetch_raw`) and walks the batches with aiokafka's own parser
(:func:`read_batches`): the readable records before the first unreadable batch are
processed as usual, the batch becomes one dead letter with its offset range, and the
partition goes on after it.

A batch is readable only in full: every record of it must parse before any is
handed on, so the records processed and the dead letter's range depend on the
bytes alone, never on where a fetch or a ``getmany`` call happened to end.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import (
    KafkaError,
    LeaderNotAvailableError,
    NoError,
    UnsupportedCodecError,
    for_code,
)
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

from streams.edge.rejection import BatchFault
from streams.processing.records import Record

#: The most a fetch of one partition returns, the consumer's and :func:`fetch_raw`'s alike,
#: so that a fetch by hand sees the batches the consumer's fetch held.
FETCH_BYTES = 1 << 20
FETCH_WAIT_MS = 100


async def fetch_raw(client: AIOKafkaClient, topic: str, partition: int, offset: int,
                    max_bytes: int = FETCH_BYTES) -> bytes:
    """The record set a fetch of ``topic``/``partition`` from ``offset`` returns, as bytes
    (whole batches, compressed as they are stored; empty at the end of the log)."""
    tp = TopicPartition(topic, partition)
    node = client.cluster.leader_for_partition(tp)
    if node is None or node < 0:
        await client.force_metadata_update()
        node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            raise LeaderNotAvailableError(f"no leader for {topic}/{partition}")
    # A fetch that may not wait at all is answered with no partitions by some brokers.
    request = FetchRequest(FETCH_WAIT_MS, 1, max_bytes, 0,
                           [(topic, [(partition, offset, max_bytes)])])
    response = await client.send(node, request)
    for name, partitions in response.topics:
        for number, error_code, _high, *data in partitions:
            if name == topic and number == partition:
                error = for_code(error_code)
                if error is not NoError:
                    raise error()
                return bytes(data[-1] or b"")
    raise KafkaError(f"the fetch response has no {topic}/{partition}")


@dataclass(frozen=True, slots=True)
class UnreadableBatch:
    """One record batch of ``partition`` that could not be read, offsets inclusive."""

    partition: int
    first_offset: int
    last_offset: int
    fault: BatchFault


@dataclass(frozen=True, slots=True)
class Walked:
    """What :func:`read_batches` found from an offset on: the records it could read, in
    order, up to the first unreadable batch (``unreadable``, None if every batch was read)."""

    records: list[Record]
    unreadable: UnreadableBatch | None


def read_batches(raw: bytes, partition: int, start: int) -> Walked:
    """Walk the record batches of a fetch response's record set from offset ``start`` on.

    >>> from aiokafka.record.default_records import DefaultRecordBatchBuilder
    >>> def batch(base: int, n: int, codec: int = 0) -> bytearray:
    ...     b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    ...     for i in range(n):
    ...         b.append(i, timestamp=1000 + i, key=b"u", value=b"v%d" % (base + i), headers=[])
    ...     out = b.build()
    ...     out[0:8] = base.to_bytes(8, "big")
    ...     return out
    >>> good, bad = batch(0, 3), batch(3, 2, codec=1)
    >>> bad[-3] ^= 0xFF  # a flipped byte: the CRC no longer matches
    >>> walked = read_batches(bytes(good + bad + batch(5, 1)), partition=2, start=1)
    >>> [(r.partition, r.offset, r.value) for r in walked.records]
    [(2, 1, b'v1'), (2, 2, b'v2')]
    >>> walked.unreadable
    UnreadableBatch(partition=2, first_offset=3, last_offset=4, fault=<BatchFault.CRC_MISMATCH: 'batch_crc_mismatch'>)
    """
    records: list[Record] = []
    try:
        batches = MemoryRecords(raw)
    except Exception:  # noqa: BLE001 - bytes the parser cannot even split into batches
        return Walked(records, UnreadableBatch(partition, start, start, BatchFault.CORRUPT))
    while True:
        try:
            if not batches.has_next():
                return Walked(records, None)
            batch = batches.next_batch()
        except Exception:  # noqa: BLE001 - a batch header that does not parse
            return Walked(records, UnreadableBatch(partition, start, start, BatchFault.CORRUPT))
        if batch is None:  # a partial batch at the end of the fetch: not fetched in full
            return Walked(records, None)
        first = batch.base_offset
        last = batch.next_offset - 1
        if last < start:
            continue
        if not batch.validate_crc():
            return Walked(records, UnreadableBatch(partition, first, last,
                                                   BatchFault.CRC_MISMATCH))
        if getattr(batch, "is_control_batch", False):
            continue
        try:
            read = [Record(partition, r.offset, r.key, r.value, r.timestamp)
                    for r in batch if r.offset >= start]
        except UnsupportedCodecError:
            return Walked(records, UnreadableBatch(partition, first, last,
                                                   BatchFault.CODEC_UNSUPPORTED))
        except Exception:  # noqa: BLE001 - bytes that do not decompress or parse
            return Walked(records, UnreadableBatch(partition, first, last, BatchFault.CORRUPT))
        records.extend(read)
        start = max(start, last + 1)
