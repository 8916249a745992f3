"""How long the governance report takes for a million events' worth of outputs.

1. synthesise: simulated users of every scenario (``drift.simulation.simulate_user``), each
   starting at a random time in the first days of a week, until ``--events`` FHR events;
   each user's events go through the real per-user fold (``drift.replay.replay``, what a
   worker computes) and its outputs are encoded as a worker publishes them
   (``streams.edge.wire.encode``). The fold makes no erasure receipts (the store does) and no
   dead letters (the decoder does), so ``--receipts`` of the users get an erasure receipt
   and ``--dead-letters`` of the events a dead letter, both in the same week;
2. produce: every output onto its topic of a fresh embedded broker (Tansu, memory storage,
   loopback only), keyed by user id, in per-partition batches;
3. report, measured twice on the same topics: in process (``streams.report.build.build``:
   read every output topic up to its high watermark, aggregate, render the HTML page and
   its JSON twin, with the time of each step), and as a person runs it
   (``continuity-drift report --broker ... --html ... --json ...`` in a subprocess, wall
   clock from spawn to exit, Python start-up and imports included); then one user's
   drill-down, which reads the same topics.

Run ``python bench/report.py`` (1M events: about three minutes on two cores, most of it
step 1), ``--quick`` (100k events), ``--json PATH`` to keep the figures, ``--keep DIR`` to
keep the page, its twin and the drill-down.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

# Run as a script (python bench/report.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.kafka_io import partition_of
from drift.model import BaselineKind, DriftConfig
from drift.outputs import ErasureOutcome, ErasureReceipt, ErasureTarget
from drift.replay import replay
from drift.simulation import Scenario, SimParams, simulate_user
from streams import topics
from streams.broker import EmbeddedBroker
from streams.edge.rejection import REJECTION_REASONS
from streams.edge.wire import DeadLetter, encode
from streams.report.build import ReportRequest, build

DEFAULT_EVENTS = 1_000_000
QUICK_EVENTS = 100_000
DEFAULT_SEED = 20261213

EXAMPLES = """\
examples:
  python bench/report.py                          # 1M events' worth of outputs
  python bench/report.py --quick                  # 100k events
  python bench/report.py --events 2000000 --json /tmp/report-bench.json --keep /tmp/report
"""

Record = tuple[str, bytes, bytes, int | None]  # topic, key, value, timestamp ms


def synthesise(events: int, seed: int, week_start: float, receipt_share: float,
               dead_letter_share: float) -> tuple[list[Record], dict[str, int], str]:
    """Outputs of simulated users until ``events`` events; returns the records, counts by
    topic and one user id that has a drift score (for the drill-down)."""
    rng = np.random.default_rng(seed)
    scenarios = list(Scenario)
    config = DriftConfig()
    records: list[Record] = []
    counts: dict[str, int] = defaultdict(int)
    seen = 0
    n = 0
    sample_user = ""
    while seen < events:
        scenario = scenarios[n % len(scenarios)]
        user_id = f"{scenario.value}-{n:07d}"
        start = week_start + float(rng.uniform(0.0, 2.5 * 86400.0))
        user_events, _ = simulate_user(rng, scenario, user_id, start, SimParams())
        seen += len(user_events)
        n += 1
        key = user_id.encode()
        for out in replay(user_events, config):
            topic = topics.OUTPUT_TOPICS[out.kind]
            records.append((topic, key, encode(out), None))
            counts[topic] += 1
            if not sample_user and out.kind.value == "score":
                sample_user = user_id
        last = user_events[-1]
        if rng.random() < receipt_share:
            targets = tuple(ErasureTarget(k, f"b-{n}-{k.value}", int(rng.integers(1, 5)),
                                          ErasureOutcome.VERIFIED) for k in BaselineKind)
            receipt = ErasureReceipt(f"r-{n}", user_id, last.session_id, last.ts_s + 60.0,
                                     f"req-{n}", str(rng.choice(["user_request", "operator"])),
                                     f"e-{n}", ErasureOutcome.VERIFIED, targets, None, ())
            records.append((topics.RECEIPTS, key, encode(receipt), None))
            counts[topics.RECEIPTS] += 1
        for e in user_events:
            if rng.random() < dead_letter_share:
                letter = DeadLetter(f"d-{n}-{e.event_id}", str(rng.choice(REJECTION_REASONS)),
                                    topics.INPUT, 0, 0, None, ("user_id",))
                records.append((topics.DEADLETTER, key, encode(letter), int(e.ts_s * 1000)))
                counts[topics.DEADLETTER] += 1
    counts["events"] = seen
    counts["users"] = n
    return records, dict(counts), sample_user


async def _produce(bootstrap: str, records: list[Record], partitions: int) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0,
                                max_batch_size=1 << 20, max_request_size=8 << 20,
                                client_id="bench-report")
    await producer.start()
    started = time.monotonic()
    try:
        for i in range(0, len(records), 20000):
            batches: dict[tuple[str, int], Any] = {}
            futures = []
            for topic, key, value, ts in records[i:i + 20000]:
                where = (topic, partition_of(key, partitions))
                batch = batches.get(where)
                if batch is None:
                    batch = batches[where] = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=ts) is None:
                    futures.append(await producer.send_batch(batch, where[0], partition=where[1]))
                    batch = batches[where] = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=ts)
            for (topic, part), batch in batches.items():
                futures.append(await producer.send_batch(batch, topic, partition=part))
            await asyncio.wait_for(asyncio.gather(*futures), timeout=120)
    finally:
        await producer.stop()
    return time.monotonic() - started


def _cli(bootstrap: str, out: Path, *extra: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", "report", "--broker", bootstrap,
         "--html", str(out.with_suffix(".html")), "--json", str(out.with_suffix(".json")),
         *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"report exited {done.returncode}: {done.stderr[-2000:]}")
    return time.monotonic() - started, done.stderr.strip().splitlines()[0]


def run(args: argparse.Namespace) -> dict[str, Any]:
    events = args.events or (QUICK_EVENTS if args.quick else DEFAULT_EVENTS)
    week_start = (time.time() // 86400 - 7) * 86400 + 3600.0
    t0 = time.monotonic()
    records, counts, sample_user = synthesise(events, args.seed, week_start, args.receipts,
                                              args.dead_letters)
    synth_s = time.monotonic() - t0
    print(f"synthesised {len(records):,} outputs of {counts['events']:,} events "
          f"({counts['users']:,} users) in {synth_s:.1f}s", file=sys.stderr)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    with EmbeddedBroker() as broker:
        topics.create_topics(broker.bootstrap, args.partitions)
        produce_s = asyncio.run(_produce(broker.bootstrap, records, args.partitions))
        print(f"produced in {produce_s:.1f}s", file=sys.stderr)
        size = sum(len(r[2]) for r in records)
        del records
        built = build(ReportRequest(broker.bootstrap, work / "in-process.html",
                                    work / "in-process.json"))
        cli_s, cli_line = _cli(broker.bootstrap, work / "overview")
        user_s, _ = _cli(broker.bootstrap, work / "user", "--user", sample_user)
    return {
        "events": counts["events"], "users": counts["users"],
        "outputs": {k: v for k, v in counts.items() if k not in ("events", "users")},
        "output_bytes": size, "synthesise_s": round(synth_s, 2),
        "produce_s": round(produce_s, 2),
        "report": {"records": built.records, "read_s": round(built.read_s, 3),
                   "aggregate_s": round(built.aggregate_s, 3),
                   "render_s": round(built.render_s, 3),
                   "total_s": round(built.read_s + built.aggregate_s + built.render_s, 3),
                   "read_records_per_s": round(built.records / max(built.read_s, 1e-9)),
                   "html_bytes": built.html_bytes, "json_bytes": built.json_bytes,
                   "range": [built.window.since, built.window.until]},
        "cli_wall_s": round(cli_s, 2), "cli_summary": cli_line,
        "drill_down_wall_s": round(user_s, 2),
        "partitions": args.partitions, "seed": args.seed, "files": str(work),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                   f"{platform.python_version()}",
        "command": "python bench/report.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    }


def summary(res: dict[str, Any]) -> str:
    r = res["report"]
    outs = ", ".join(f"{k} {v:,}" for k, v in sorted(res["outputs"].items()))
    lines = [
        (f"governance report over {res['events']:,} events' worth of outputs "
         f"({res['users']:,} simulated users, {res['partitions']} partitions; "
         f"{res['machine']})"),
        f"  outputs: {outs} ({res['output_bytes'] / 1e6:.0f} MB)",
        (f"  in process: read {r['records']:,} records in {r['read_s']:.2f}s "
         f"({r['read_records_per_s']:,}/s), aggregate {r['aggregate_s']:.2f}s, render "
         f"{r['render_s']:.2f}s: {r['total_s']:.2f}s in all"),
        (f"  page {r['html_bytes'] / 1e3:.0f} kB, twin {r['json_bytes'] / 1e3:.0f} kB, range "
         f"{r['range'][0][:10]} .. {r['range'][1][:10]}"),
        (f"  continuity-drift report (subprocess, wall clock): {res['cli_wall_s']:.2f}s; "
         f"one user's drill-down: {res['drill_down_wall_s']:.2f}s"),
        (f"  (synthesised in {res['synthesise_s']:.0f}s, produced in {res['produce_s']:.0f}s; "
         f"files in {res['files']})"),
        f"reproduce: {res['command']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=0,
                        help=f"FHR events whose outputs are produced (default {DEFAULT_EVENTS:,}"
                             f"; --quick {QUICK_EVENTS:,})")
    parser.add_argument("--quick", action="store_true", help="a smoke run of 100k events")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="simulator seed")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of every topic")
    parser.add_argument("--receipts", type=float, default=0.01,
                        help="share of users with an erasure receipt (default 0.01)")
    parser.add_argument("--dead-letters", type=float, default=0.002,
                        help="share of events with a dead letter (default 0.002)")
    parser.add_argument("--json", help="write the figures as JSON here")
    parser.add_argument("--keep", help="keep the page, its twin and the drill-down here")
    args = parser.parse_args(argv)
    res = run(args)
    print(summary(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
