"""The broker's own latency floor: a plain aiokafka consumer that decodes each value and does
nothing else, reading a paced offer on the embedded broker, timed like the worker's latency.

``bench/throughput.py`` measures the worker from an input record's Kafka timestamp to its
first output; this measures, on the same kind of broker, records and offer, the time from
that timestamp to the moment ``getmany`` hands the record to a consumer that does no work:
what no worker can go below. It prints p50/p99/max per offered rate and per ``--step`` seconds of
the offer (the floor grows while the offer lasts), the fetch cycles per second, and the producer's
offer-to-ack time, so a reader can see which side of the broker the time is spent on.

The consumer runs in its own process (as the worker does), with the worker's fetch settings
(``fetch_wait_s``, ``batch_max``, ``batch_within_s``); the paced producer is the one
``bench/throughput.py`` uses.

    python bench/broker_latency.py
    python bench/broker_latency.py --rate 5000,10000 --duration 15
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

# Run as a script (python bench/broker_latency.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import harness
from bench.kafka_io import offsets_after, produce_async
from bench.procs import stop_process
from streams import topics
from streams.broker import EmbeddedBroker
from streams.settings import Settings

CONSUMER_SCRIPT = """
import asyncio, json, sys, time
from aiokafka import AIOKafkaConsumer, TopicPartition
from streams.edge.codec import decode_event

bootstrap, n, out, ready, fetch_wait_ms, batch_max, within_ms, timeout_s = (
    sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]),
    int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]))
start = {int(p): int(o) for p, o in (kv.split(":") for kv in sys.argv[9].split(","))}
topic = sys.argv[10]

async def main():
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                fetch_max_wait_ms=fetch_wait_ms, max_poll_records=batch_max)
    await consumer.start()
    parts = [TopicPartition(topic, p) for p in sorted(start)]
    consumer.assign(parts)
    for tp in parts:
        consumer.seek(tp, start[tp.partition])
    stamps, lags, cycles = [], [], []
    fetched_once = False
    deadline = time.monotonic() + timeout_s
    try:
        while len(stamps) < n and time.monotonic() < deadline:
            got = await consumer.getmany(timeout_ms=within_ms, max_records=batch_max)
            now_ms = 1000.0 * time.time()
            k = 0
            for msgs in got.values():
                for m in msgs:
                    decode_event(m.key, m.value)
                    stamps.append(m.timestamp)
                    lags.append(now_ms - m.timestamp)
                k += len(msgs)
            if k:
                cycles.append(now_ms)
            if not fetched_once:  # a fetch has come back: the offer may begin
                fetched_once = True
                open(ready, "w").close()
    finally:
        await consumer.stop()
    json.dump({"stamps": stamps, "latency_ms": lags, "cycles_ms": cycles}, open(out, "w"))

asyncio.run(main())
"""


def _quantiles(values: list[float]) -> dict[str, float]:
    got = harness.percentiles(values, (50, 99))
    return {"p50": got["p50"], "p99": got["p99"], "max": max(values, default=float("nan"))}


def _timeline(stamps: list[int], values: list[float], step_s: float
                ) -> list[dict[str, float]]:
    if not stamps:
        return []
    t0 = min(stamps)
    buckets: dict[int, list[float]] = {}
    for ts, v in zip(stamps, values, strict=True):
        buckets.setdefault(int((ts - t0) / 1000.0 / step_s), []).append(v)
    return [{"from_s": k * step_s, "n": len(v), **_quantiles(v)} for k, v in sorted(buckets.items())]


def measure(bootstrap: str, tmp: Path, records: list[tuple[bytes, bytes, str]],
            start: dict[int, int], rate: float, partitions: int, settings: Settings,
            step_s: float, topic: str = topics.INPUT) -> dict[str, Any]:
    """Offer ``records`` to ``topic`` at ``rate``/s while a plain consumer in its own process
    reads them from ``start`` (each partition's offset where the offer begins)."""
    script = tmp / "floor_consumer.py"
    script.write_text(textwrap.dedent(CONSUMER_SCRIPT))
    out, ready = tmp / f"floor-{rate:.0f}.json", tmp / f"floor-{rate:.0f}.ready"
    out.unlink(missing_ok=True)
    ready.unlink(missing_ok=True)
    duration = len(records) / rate
    proc = subprocess.Popen(
        [sys.executable, str(script), bootstrap, str(len(records)), str(out), str(ready),
         str(int(settings.fetch_wait_s * 1000)), str(settings.batch_max),
         str(int(settings.batch_within_s * 1000)), str(duration + 60),
         ",".join(f"{p}:{o}" for p, o in sorted(start.items())), topic],
        cwd=ROOT, env=harness.clean_env(), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the plain consumer did not start: {proc.stderr.read()!r}"
                                   if proc.stderr else "the plain consumer did not start")
            time.sleep(0.05)
        acks: list[float] = []
        sent, secs = asyncio.run(produce_async(bootstrap, records, partitions, rate, acks,
                                             topic))
        proc.wait(timeout=duration + 90)
    finally:
        stop_process(proc, timeout_s=10)
    if not out.exists():
        raise RuntimeError(f"the plain consumer exited with {proc.returncode} and no figures")
    got = json.loads(out.read_text())
    stamps, lat, cycles = got["stamps"], got["latency_ms"], got["cycles_ms"]
    cycles_per_s = (len(cycles) * 1000.0 / (max(cycles) - min(cycles)) if len(cycles) > 1
                    else float("nan"))
    return {"rate": rate, "offered": sent, "achieved_offer_rate": sent / max(secs, 1e-9),
            "received": len(lat), "latency_ms": _quantiles(lat),
            "per_interval": _timeline(stamps, lat, step_s),
            "fetch_cycles_per_s": cycles_per_s,
            "offer_to_ack_ms": _quantiles([1000.0 * a for a in acks])}


def report(runs: list[dict[str, Any]], command: str) -> str:
    lines = [("| plain consumer + decode, paced offer | received | p50 ms | p99 ms | max ms "
              "| fetch cycles/s | offer to ack p99 ms |"),
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        q, a = r["latency_ms"], r["offer_to_ack_ms"]
        lines.append(f"| {r['rate']:.0f}/s offered (achieved {r['achieved_offer_rate']:.0f}/s) "
                     f"| {r['received']} | {q['p50']:.0f} | {q['p99']:.0f} | {q['max']:.0f} "
                     f"| {r['fetch_cycles_per_s']:.0f} | {a['p99']:.0f} |")
    for r in runs:
        lines.append("")
        lines.append(f"{r['rate']:.0f}/s, by the record's offer time (the floor while the offer "
                     "lasts):")
        for b in r["per_interval"]:
            lines.append(f"    {b['from_s']:5.1f} s  n={b['n']:6d}  p50 {b['p50']:5.0f} ms  "
                         f"p99 {b['p99']:5.0f} ms  max {b['max']:5.0f} ms")
    lines += ["", f"reproduce: {command}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="1000,5000,10000",
                        help="comma-separated events/s, one paced offer each (default %(default)s)")
    parser.add_argument("--duration", type=float, default=15.0,
                        help="seconds of each offer (default %(default)s)")
    parser.add_argument("--users", type=int, default=240)
    parser.add_argument("--partitions", type=int, default=harness.PARTITIONS)
    parser.add_argument("--step", type=float, default=2.0,
                        help="seconds per row of the timeline (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rate.split(",") if r]
    command = "python bench/broker_latency.py"
    for flag, value, default in (
            ("--rate", args.rate, "1000,5000,10000"), ("--duration", args.duration, 15.0),
            ("--users", args.users, 240), ("--partitions", args.partitions, harness.PARTITIONS),
            ("--step", args.step, 2.0)):
        if value != default:
            command += f" {flag} {value:g}" if isinstance(value, float) \
                else f" {flag} {shlex.quote(str(value))}"
    settings = Settings()
    counts = [int(r * args.duration) for r in rates]
    harness.log(f"building {sum(counts)} simulated events for {args.users} users")
    stream = harness.build_stream(sum(counts), args.users, harness.DEFAULT_SEED)
    runs = []
    with tempfile.TemporaryDirectory(prefix="continuity-floor-") as name, \
            EmbeddedBroker() as broker:
        topics.create_topics(broker.bootstrap, args.partitions)
        begin = 0
        for rate, count in zip(rates, counts, strict=True):
            harness.log(f"{count} records offered at {rate:.0f}/s to a plain consumer")
            # the log holds exactly the earlier offers
            start = offsets_after(stream.records[:begin], args.partitions)
            runs.append(measure(broker.bootstrap, Path(name), stream.records[begin:begin + count],
                                start, rate, args.partitions, settings, args.step))
            harness.log(f"    p99 {runs[-1]['latency_ms']['p99']:.0f} ms")
            begin += count
    import aiokafka

    print(f"machine: {os.cpu_count()} CPUs; aiokafka {aiokafka.__version__}; "
          f"consumer settings as the worker's: fetch_wait_s {settings.fetch_wait_s}, "
          f"batch_max {settings.batch_max}, batch_within_s {settings.batch_within_s}")
    print(report(runs, command))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0 if all(r["received"] == r["offered"] for r in runs) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
