"""What publishing an output costs, per message, on the embedded broker.

The worker publishes about one output every five records of the simulated stream (scores,
responses, violations), through aiokafka's producer. This hands the worker's own output
messages (a simulated stream through the engine, in process: the same topics, keys,
values and input partitions) to a producer as the worker does, the messages of each batch
of 500 records at once and their acks awaited per batch, and measures the CPU time per
message: of the process, and of the thread that calls the producer (the worker's loop).

- ``aiokafka send``: one ``send`` per message, as the worker publishes, and a batch's acks
  awaited as the worker awaits them (``streams.kafka.producers.settled``: one wait a record
  batch); and the same with the acks gathered (``asyncio.gather``: a callback a message);
- ``aiokafka batch``: aiokafka's batch interface (``create_batch``/``send_batch``), a future
  per record batch instead of per message;
- ``librdkafka``: confluent-kafka's producer (librdkafka, in C threads of its own), when that
  library is installed. It is not a dependency of the project; ``pip install
  confluent-kafka`` to include it.

Each producer runs with the worker's settings (acks from all replicas, a 2 ms linger, the
codec, and for aiokafka's the worker's record batches of ``PRODUCER_BATCH_BYTES``), in turn
on one broker.

    python bench/producer_cost.py
    python bench/producer_cost.py --records 40000 --codec lz4
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Run as a script: the tree's root goes on sys.path before the project's imports.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from streams.processing.records import OutMessage

PARTITIONS = 4


def _cpu_s() -> tuple[float, float]:
    """CPU seconds of the process and of the calling thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, time.thread_time()


def worker_messages(records: int, users: int, seed: int) -> tuple[list[list[OutMessage]], int]:
    """The messages the engine publishes for a simulated stream, per batch of 500 records,
    and the number of records."""
    from prometheus_client import CollectorRegistry

    from baselines.store import BaselineStore
    from bench.harness import build_stream
    from bench.instructions import input_records
    from drift.model import DriftConfig
    from streams.metrics import build_metrics
    from streams.processing.engine import Engine

    stream = build_stream(records, users, seed, start=1.8e9)
    recs = input_records([(key, value) for key, value, _ in stream.records], PARTITIONS)
    batches: list[list[OutMessage]] = []
    with tempfile.TemporaryDirectory(prefix="continuity-producer-") as tmp:
        store = BaselineStore(Path(tmp) / "continuity.duckdb")
        engine = Engine(store, DriftConfig(), build_metrics(CollectorRegistry()),
                        clock=lambda: 1.8e9 + 86400.0)
        engine.assign(range(PARTITIONS))
        for i in range(0, len(recs), 500):
            messages = engine.process(recs[i:i + 500]).messages
            if messages:
                batches.append(messages)
            if i % 5000 == 4500:
                store.apply_rows(store.rows_of(engine.take_checkpoint()))
        store.close()
    return batches, len(recs)


async def _aiokafka(bootstrap: str, codec: str, batches: Sequence[Sequence[OutMessage]],
                    batched: bool, gather: bool = False) -> tuple[float, float, float]:
    from aiokafka import AIOKafkaProducer

    from streams.kafka.producers import settled
    from streams.worker import PRODUCER_BATCH_BYTES

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2,
                                max_batch_size=PRODUCER_BATCH_BYTES, enable_idempotence=False,
                                compression_type=None if codec == "none" else codec)
    await producer.start()
    try:
        for topic in {m.topic for batch in batches for m in batch}:
            await producer.partitions_for(topic)
        (cpu0, thread0), wall0 = _cpu_s(), time.perf_counter()
        pending = []
        for batch in batches:
            if batched:
                acks = await _send_batches(producer, batch)
            else:
                acks = [await producer.send(m.topic, m.value, key=m.key,
                                            partition=m.partition) for m in batch]
            pending.append(asyncio.gather(*acks) if gather
                           else asyncio.ensure_future(settled(acks)))
            await asyncio.sleep(0)  # the worker's loop goes back to the consumer here
        for done in pending:
            await done
        (cpu1, thread1), wall1 = _cpu_s(), time.perf_counter()
    finally:
        await producer.stop()
    return cpu1 - cpu0, thread1 - thread0, wall1 - wall0


async def _send_batches(producer: Any, messages: Sequence[OutMessage]) -> list[Any]:
    by_partition: dict[tuple[str, int], list[OutMessage]] = {}
    for m in messages:
        by_partition.setdefault((m.topic, m.partition), []).append(m)
    acks = []
    for (topic, partition), ms in by_partition.items():
        builder = producer.create_batch()
        for m in ms:
            if builder.append(timestamp=None, key=m.key, value=m.value) is None:
                acks.append(await producer.send_batch(builder, topic, partition=partition))
                builder = producer.create_batch()
                builder.append(timestamp=None, key=m.key, value=m.value)
        acks.append(await producer.send_batch(builder, topic, partition=partition))
    return acks


def _librdkafka(bootstrap: str, codec: str, batches: Sequence[Sequence[OutMessage]]
                ) -> tuple[float, float, float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "enable.idempotence": False, "compression.type": codec})
    failed: list[str] = []

    def delivered(err: Any, _: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer.list_topics(timeout=10)
    (cpu0, thread0), wall0 = _cpu_s(), time.perf_counter()
    for batch in batches:
        for m in batch:
            producer.produce(m.topic, m.value, key=m.key, partition=m.partition,
                             on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(60)
    (cpu1, thread1), wall1 = _cpu_s(), time.perf_counter()
    if left or failed:
        raise RuntimeError(f"librdkafka: {left} messages not delivered, {len(failed)} failed "
                           f"({failed[:1]})")
    return cpu1 - cpu0, thread1 - thread0, wall1 - wall0


def measure(bootstrap: str, codec: str, batches: Sequence[Sequence[OutMessage]]
            ) -> list[tuple[str, tuple[float, float, float] | None]]:
    """(variant, (process CPU s, calling thread CPU s, wall s)) per producer; None where the
    library is not installed."""
    runs: list[tuple[str, Callable[[], tuple[float, float, float]] | None]] = [
        ("aiokafka send (the worker's)",
         lambda: asyncio.run(_aiokafka(bootstrap, codec, batches, batched=False))),
        ("aiokafka send, acks gathered",
         lambda: asyncio.run(_aiokafka(bootstrap, codec, batches, batched=False, gather=True))),
        ("aiokafka batch interface",
         lambda: asyncio.run(_aiokafka(bootstrap, codec, batches, batched=True))),
    ]
    try:
        import confluent_kafka  # noqa: F401 - only whether it is there
        runs.append(("librdkafka (confluent-kafka)",
                     lambda: _librdkafka(bootstrap, codec, batches)))
    except ImportError:
        runs.append(("librdkafka (confluent-kafka)", None))
    return [(label, None if run is None else run()) for label, run in runs]


def table(results: Sequence[tuple[str, tuple[float, float, float] | None]], messages: int,
          records: int) -> list[str]:
    """The figures as Markdown rows, per message and per record of the stream."""
    per_record = messages / records
    lines = [("| producer | CPU us/message (process) | CPU us/message (calling thread) "
              "| us/record of the stream (calling thread) | messages/s |"),
             "|---|---:|---:|---:|---:|"]
    for label, figures in results:
        if figures is None:
            lines.append(f"| {label} | not installed | | | |")
            continue
        cpu, thread, wall = figures
        lines.append(f"| {label} | {1e6 * cpu / messages:.1f} | {1e6 * thread / messages:.1f} "
                     f"| {1e6 * thread / messages * per_record:.2f} | {messages / wall:,.0f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="CPU time per output message of the worker's producer and of others.",
        epilog="example: python bench/producer_cost.py --records 40000 --codec lz4")
    parser.add_argument("--records", type=int, default=60_000,
                        help="simulated records whose outputs are published (default 60000)")
    parser.add_argument("--users", type=int, default=600, help="simulated users (default 600)")
    parser.add_argument("--codec", default="zstd", choices=("zstd", "lz4", "snappy", "gzip",
                                                            "none"),
                        help="compression, as the worker's [worker] compression (default zstd)")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args(argv)
    if args.records < 500 or args.users < 1:
        parser.error("--records must be at least 500 and --users at least 1")
    from streams.broker import EmbeddedBroker
    from streams.topics import create_topics

    print(f"the outputs of {args.records:,} simulated records through the engine ...",
          file=sys.stderr, flush=True)
    batches, records = worker_messages(args.records, args.users, args.seed)
    messages = sum(len(b) for b in batches)
    size = sum(len(m.value) for b in batches for m in b) / max(messages, 1)
    with EmbeddedBroker() as broker:
        create_topics(broker.bootstrap, PARTITIONS)
        print(f"publishing {messages:,} messages four ways ...", file=sys.stderr, flush=True)
        results = measure(broker.bootstrap, args.codec, batches)
    print(f"{messages:,} output messages of {records:,} records ({messages / records:.2f} a "
          f"record, {size:,.0f} B each on average), codec {args.codec}, {PARTITIONS} partitions, "
          f"the embedded broker\n")
    print("\n".join(table(results, messages, records)))
    print("\nreproduce: python bench/producer_cost.py "
          + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
