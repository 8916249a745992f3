"""The changelog's bytes by codec: the deltas of the golden log, raw and compressed.

Runs the golden log (``tests/streams/golden.py``) through the engine on a real DuckDB file
in batches of 200, one checkpoint each, encodes every partition's delta as the changelog
writes it (its tables already compressed by Arrow), and compresses each with the codec
libraries the Kafka clients use, as the producer does on top.

    python bench/changelog_bytes.py
"""

from __future__ import annotations

import gzip
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script: the tree's root goes on sys.path before the project's imports.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import cramjam
from prometheus_client import CollectorRegistry

from baselines.store import BaselineStore
from drift.model import DriftConfig
from streams.metrics import build_metrics
from streams.processing.engine import Engine
from streams.processing.records import Record
from tests.streams.golden import (
    PARTITIONS,
    START_S,
    FixedClock,
    golden_records,
    partition_of,
)

CODECS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "snappy": lambda b: bytes(cramjam.snappy.compress_raw(b)),
    "lz4": lambda b: bytes(cramjam.lz4.compress(b)),
    "zstd": lambda b: bytes(cramjam.zstd.compress(b)),
}


def deltas(batch: int = 200) -> tuple[int, list[bytes]]:
    """The golden records' count and the encoded delta of every partition at each checkpoint."""
    with tempfile.TemporaryDirectory() as d:
        store = BaselineStore(Path(d) / "continuity.duckdb")
        engine = Engine(store, DriftConfig(), build_metrics(CollectorRegistry()),
                        clock=FixedClock(START_S))
        engine.assign(range(PARTITIONS))
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        records = []
        for key, value in golden_records():
            p = partition_of(key)
            records.append(Record(p, offsets[p], key, value, 0))
            offsets[p] += 1
        out: list[bytes] = []
        for i in range(0, len(records), batch):
            engine.process(records[i:i + batch])
            write = engine.take_checkpoint()
            rows = store.rows_of(write)
            out += [r.encode() for r in rows.by_partition(write.dropped_states).values()]
            store.apply_rows(rows)
        store.close()
    return len(records), out


def main() -> int:
    n, data = deltas()
    raw = sum(map(len, data))
    print(f"{n} golden records, {len(data)} changelog deltas, {raw:,} bytes as encoded "
          "(Arrow compresses the tables; the codecs below are the producer's, on top)")
    for name, compress in CODECS.items():
        started = time.perf_counter()
        size = sum(len(compress(b)) for b in data)
        per = (time.perf_counter() - started) / len(data) * 1e6
        print(f"{name:7s} {size:10,} bytes ({size / raw:.0%}), {per:.0f} us per delta")
    print("reproduce: python bench/changelog_bytes.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
