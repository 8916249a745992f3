"""Record batches walked by hand: which records are read, and which batch is not."""

from __future__ import annotations

import struct

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from streams.edge.rejection import BatchFault
from streams.kafka.batches import read_batches

GZIP = 1


def _batch(base: int, n: int, codec: int = 0) -> bytearray:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        builder.append(i, timestamp=1000 + i, key=b"u", value=b"v%d" % (base + i), headers=[])
    out = builder.build()
    out[0:8] = base.to_bytes(8, "big")
    return out


def _resealed(batch: bytearray) -> bytes:
    """The batch with its CRC computed again over what it now holds (attributes on)."""
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_every_readable_batch_is_read_from_the_offset_on():
    walked = read_batches(bytes(_batch(0, 2) + _batch(2, 3, GZIP) + _batch(5, 1)), 3, 1)
    assert [r.offset for r in walked.records] == [1, 2, 3, 4, 5]
    assert [r.value for r in walked.records] == [b"v1", b"v2", b"v3", b"v4", b"v5"]
    assert walked.unreadable is None
    assert read_batches(b"", 3, 0).records == []


def test_a_codec_no_one_defines_is_one_unreadable_batch():
    unknown = _batch(4, 3, GZIP)
    attributes = struct.unpack_from(">h", unknown, 21)[0]
    struct.pack_into(">h", unknown, 21, (attributes & ~7) | 5)
    walked = read_batches(bytes(_batch(0, 4)) + _resealed(unknown) + bytes(_batch(7, 1)), 0, 0)
    assert [r.offset for r in walked.records] == [0, 1, 2, 3]
    bad = walked.unreadable
    assert bad is not None and (bad.first_offset, bad.last_offset) == (4, 6)
    assert bad.fault is BatchFault.CODEC_UNSUPPORTED


def test_bytes_that_do_not_inflate_are_corrupt_even_with_a_matching_crc():
    broken = _batch(0, 2, GZIP)
    broken[-6:] = b"\x00" * 6
    walked = read_batches(_resealed(broken), 0, 0)
    assert walked.records == []
    assert walked.unreadable is not None and walked.unreadable.fault is BatchFault.CORRUPT
    assert (walked.unreadable.first_offset, walked.unreadable.last_offset) == (0, 1)


def test_a_batch_already_passed_is_not_looked_at():
    bad = _batch(0, 2)
    bad[-1] ^= 0xFF
    walked = read_batches(bytes(bad + _batch(2, 1)), 0, 2)
    assert [r.offset for r in walked.records] == [2] and walked.unreadable is None


def test_a_batch_cut_short_by_the_fetch_size_is_left_for_the_next_fetch():
    whole = bytes(_batch(0, 2) + _batch(2, 2))
    walked = read_batches(whole[:-5], 0, 0)
    assert [r.offset for r in walked.records] == [0, 1] and walked.unreadable is None
