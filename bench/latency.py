"""Latency of a worker at an offered rate (``bench/throughput.py``, phase 3), and the broker's
own floor just before it: from an input record's Kafka timestamp to its first output."""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from bench.harness import fmt, fmt_ms, log, pass_fail, percentiles
from bench.kafka_io import commit_group_offsets, produce_async, read_all
from bench.procs import proc_cpu_s, proc_rss_mb
from bench.worker_run import Histogram, WorkerRun, WorkerSpec, commit_histograms
from streams import topics

#: SPEC section 11: p99 from an input record's Kafka timestamp to its output, by offered rate
LATENCY_GOALS_S = {5000.0: 0.100, 10000.0: 0.250}  # SPEC section 11


#: The latency floor's topic: the same records as a latency phase, read by a plain consumer
#: just before, kept out of the worker's input so that no worker counts them.
FLOOR_TOPIC = "bench.floor"


async def _paced_offer(bootstrap: str, records: Sequence[tuple[bytes, bytes, str]],
                       partitions: int, rate: float, acks: list[float]) -> tuple[int, float]:
    return await produce_async(bootstrap, records, partitions, rate, acks)


class _Ids(msgspec.Struct):
    event_id: str = ""


class _Out(msgspec.Struct):
    source_event_id: str | None = None
    cause_event_id: str | None = None
    event_id: str | None = None


def _share_le(values: Sequence[float], bound: float) -> float:
    return sum(1 for x in values if x <= bound) / len(values) if values else math.nan


SLOW_S = 0.1
"""What the slow records' spells are counted against: the goal at 5,000/s."""


def slow_spells(timed: Sequence[tuple[float, float]], bound: float = SLOW_S) -> dict[str, Any]:
    """The records slower than ``bound`` (``timed``: each record's source time and latency,
    in seconds), by the second of the offer they came in: how many, how many seconds hold
    them, the share of them in the worst second, which second of the offer that is (from 0)
    and when it began (the source records' clock, to be matched with the worker's log). A
    stall of the worker or the broker puts most of them in one or two seconds; a worker too
    slow for the offer spreads them.

    >>> spells = slow_spells([(0.2, 0.3), (0.7, 0.2), (5.1, 0.15), (6.0, 0.01)])
    >>> spells["n"], spells["seconds"], spells["worst_second"], spells["worst_second_at"]
    (3, 2, 0, 0.2)
    >>> spells["worst_second_share"], spells["offer_seconds"]
    (0.6666666666666666, 6)
    """
    if not timed:
        return {"n": 0, "seconds": 0, "worst_second_share": math.nan, "worst_second": -1,
                "worst_second_at": math.nan, "offer_seconds": 0}
    start = min(t for t, _ in timed)
    slow: dict[int, int] = defaultdict(int)
    for t, latency in timed:
        if latency > bound:
            slow[int(t - start)] += 1
    n = sum(slow.values())
    return {"n": n, "seconds": len(slow),
            "worst_second_share": max(slow.values()) / n if n else math.nan,
            "worst_second": (worst := max(slow, key=lambda k: slow[k]) if n else -1),
            "worst_second_at": start + worst if n else math.nan,
            "offer_seconds": int(max(t for t, _ in timed) - start) + 1}


def _spells(spells: dict[str, Any] | None) -> str:
    """A line's words for :func:`slow_spells`."""
    if not spells or not spells["n"]:
        return f"no record over {1e3 * SLOW_S:.0f} ms"
    records = "1 record" if spells["n"] == 1 else f"{spells['n']} records"
    return (f"{records} over {1e3 * SLOW_S:.0f} ms, in {spells['seconds']} of the "
            f"offer's {spells['offer_seconds']} seconds, "
            f"{100 * spells['worst_second_share']:.0f}% of them in the worst one "
            f"(second {spells['worst_second']} of the offer)")


def phase_latency(bootstrap: str, base: Path, records: Sequence[tuple[bytes, bytes, str]],
                  input_start: dict[int, int], rate: float, partitions: int,
                  broker_pid: int, spec: WorkerSpec, name: str = "") -> dict[str, Any]:
    """A fresh worker whose group starts at ``input_start`` gets ``records`` at ``rate``/s.

    Each call gets its own data dir and group (named after the rate, and ``name`` where
    one rate runs more than once), so that phases on one broker do not share state.
    """
    label = f"{name}{rate:.0f}"
    app_id = f"bench-latency-{label}-{os.getpid()}-{int(time.time())}"
    commit_group_offsets(bootstrap, app_id, input_start)
    out_topics = (topics.SCORES, topics.RESPONSES, topics.VIOLATIONS)
    worker = WorkerRun(bootstrap, base, f"worker-latency-{label}", app_id, spec).start()
    acks: list[float] = []
    try:
        ready_s = worker.wait_ready(120)
        time.sleep(2.0)
        backlog = worker.processed()
        if backlog > 0:  # the committed offsets were not used: let it catch up first
            log(f"latency worker is reading a backlog ({backlog:.0f} so far); waiting")
            worker.wait_processed(sum(input_start.values()), 120 + backlog / 200)
            time.sleep(2.0)
            backlog = worker.processed()
        first = worker.samples()
        before = Histogram.of(first, "continuity_end_to_end_latency_seconds")
        result: dict[str, Any] = {}

        def offer() -> None:
            try:
                sent, secs = asyncio.run(_paced_offer(bootstrap, records, partitions, rate,
                                                      acks))
                result.update(sent=sent, seconds=secs)
            except Exception as exc:  # noqa: BLE001 (reported below)
                result["error"] = repr(exc)

        cpu0, bcpu0 = proc_cpu_s(worker.pid), proc_cpu_s(broker_pid)
        thread = threading.Thread(target=offer, name="paced-producer", daemon=True)
        started = time.monotonic()
        thread.start()
        duration = len(records) / rate
        lag: list[tuple[float, float]] = []
        rss: list[float] = []

        def sample(now: float, count: float) -> None:
            lag.append((now - started, count - backlog))
            rss.append(proc_rss_mb(worker.pid))

        # a worker slower than the offer drains the rest after it: allow 2,000/s for that
        worker.wait_processed(backlog + len(records), duration + 120 + len(records) / 2000,
                              on_sample=sample, interval_s=1.0)
        thread.join(timeout=60)
        cpu1, bcpu1 = proc_cpu_s(worker.pid), proc_cpu_s(broker_pid)
        if "error" in result:
            raise RuntimeError(f"paced producer failed: {result['error']}")
        elapsed = time.monotonic() - started
        last = worker.samples()
        hist = Histogram.of(last, "continuity_end_to_end_latency_seconds").minus(before)
        commits = commit_histograms(last, first)
        time.sleep(1.0)
    finally:
        worker.stop()
    # exact: output record timestamp minus source record timestamp, by source event id
    # (earlier runs' outputs name source records outside this set and are left out)
    paced_ids = {event_id for _, _, event_id in records}
    sources: dict[str, int] = {}
    decode_ids = msgspec.json.Decoder(_Ids)
    for ts, value in read_all(bootstrap, topics.INPUT):
        event_id = decode_ids.decode(value).event_id
        if event_id in paced_ids:
            sources[event_id] = ts
    decode_out = msgspec.json.Decoder(_Out)
    first_out: dict[str, int] = {}
    per_topic: dict[str, list[float]] = defaultdict(list)
    for topic in out_topics:
        for ts, value in read_all(bootstrap, topic):
            o = decode_out.decode(value)
            src = o.source_event_id or o.cause_event_id or o.event_id
            if src is None or src not in sources:
                continue
            per_topic[topic].append((ts - sources[src]) / 1000.0)
            if src not in first_out or ts < first_out[src]:
                first_out[src] = ts
    timed = [(sources[s] / 1000.0, (ts - sources[s]) / 1000.0) for s, ts in first_out.items()]
    per_record = [latency for _, latency in timed]
    per_output = [x for xs in per_topic.values() for x in xs]
    return {
        "rate": rate, "offered": result.get("sent", 0), "offer_seconds": result.get("seconds"),
        "achieved_offer_rate": result.get("sent", 0) / max(result.get("seconds") or 1e-9, 1e-9),
        "drain_seconds": elapsed, "ready_s": ready_s, "backlog_skipped": backlog == 0,
        "command": worker.command,
        "histogram": {**hist.summary(), "share_le_100ms": hist.share_le(0.1),
                      "share_le_250ms": hist.share_le(0.25)},
        "exact_per_record": {"n": len(per_record), **percentiles(per_record),
                             "max": max(per_record, default=math.nan),
                             "share_le_100ms": _share_le(per_record, 0.1),
                             "share_le_250ms": _share_le(per_record, 0.25),
                             "slow": slow_spells(timed)},
        "exact_per_output": {"n": len(per_output), **percentiles(per_output),
                             "by_topic": {t: {"n": len(v), **percentiles(v)}
                                          for t, v in per_topic.items()}},
        "sources_found": len(sources),
        **commits,
        "producer_ack": {"n": len(acks), **percentiles(acks)},
        "worker_cpu_share": (cpu1 - cpu0) / max(elapsed, 1e-9),
        "broker_cpu_share": (bcpu1 - bcpu0) / max(elapsed, 1e-9),
        "max_behind": max((rate * min(t, duration) - c for t, c in lag), default=0.0),
        "rss_mb": max(rss, default=math.nan),
    }


def phase_floor(bootstrap: str, base: Path, records: Sequence[tuple[bytes, bytes, str]],
                input_start: dict[int, int], rate: float, partitions: int, settings: Any
                ) -> dict[str, Any]:
    """The broker's latency floor just before a worker latency phase at ``rate``: the phase's
    records offered the same way to :data:`FLOOR_TOPIC` (``input_start``: its offsets before
    them), read by a plain aiokafka consumer that decodes each value and does nothing else,
    in its own process with the worker's fetch settings, timed from each record's Kafka
    timestamp to ``getmany`` handing it over (``bench/broker_latency.py``, which measures the
    floor alone). No worker can go below it on this broker; a failure is reported, and the
    phases go on."""
    from bench import broker_latency

    try:
        return broker_latency.measure(bootstrap, base, list(records), input_start, rate,
                                      partitions, settings,
                                      step_s=max(1.0, len(records) / rate / 5),
                                      topic=FLOOR_TOPIC)
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
        log(f"    floor run at {rate:.0f}/s failed: {exc}")
        return {"rate": rate, "offered": len(records), "error": str(exc)}


def latency_goal(rate: float) -> float | None:
    return LATENCY_GOALS_S.get(float(rate))


def report_latency(runs: Sequence[dict[str, Any]], floors: Sequence[dict[str, Any]] = ()
                    ) -> list[str]:
    lines: list[str] = []
    floor_at = {f["rate"]: f for f in floors if "error" not in f}
    for lat in runs:
        if "error" in lat:
            continue
        floor = floor_at.get(lat["rate"])
        h, e, pa_ = lat["histogram"], lat["exact_per_record"], lat["producer_ack"]
        lines.append("")
        lines.append(f"| latency at {lat['rate']:.0f} events/s offered "
                     f"({lat['offered']} records, achieved {lat['achieved_offer_rate']:.0f}/s) "
                     "| n | p50 ms | p95 ms | p99 ms | max ms | <= 100 ms | <= 250 ms |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        lines.append(f"| worker histogram (interpolated in buckets) | {h['count']:.0f} | "
                     f"{fmt_ms(h['p50'], h)} | {fmt_ms(h['p95'], h)} | {fmt_ms(h['p99'], h)} | "
                     f"| {fmt(100 * h['share_le_100ms'], '.1f')}% | "
                     f"{fmt(100 * h['share_le_250ms'], '.1f')}% |")
        lines.append(f"| exact: first output ts - source record ts | {e['n']} | "
                     f"{fmt(1e3 * e['p50'])} | {fmt(1e3 * e['p95'])} | {fmt(1e3 * e['p99'])} | "
                     f"{fmt(1e3 * e['max'])} | {fmt(100 * e['share_le_100ms'], '.1f')}% | "
                     f"{fmt(100 * e['share_le_250ms'], '.1f')}% |")
        lines.append(f"| (offer to broker ack of the input batch) | {pa_['n']} | "
                     f"{fmt(1e3 * pa_['p50'])} | {fmt(1e3 * pa_['p95'])} | "
                     f"{fmt(1e3 * pa_['p99'])} | | | |")
        if floor is not None:
            q = floor["latency_ms"]
            lines.append(f"| floor: plain consumer + decode, same offer just before "
                         f"(record ts to getmany) | {floor['received']} | {fmt(q['p50'])} | "
                         f"| {fmt(q['p99'])} | {fmt(q['max'])} | | |")
        lines.append("")
        lines.append(f"worker CPU {100 * lat['worker_cpu_share']:.0f}% and broker CPU "
                     f"{100 * lat['broker_cpu_share']:.0f}% of one core; at most "
                     f"{lat['max_behind']:.0f} records behind the offer; "
                     f"{lat['exact_per_output']['n']} outputs matched to their source record")
    if runs:
        lines.append("")
        lines.append("latency, input record's Kafka timestamp to its first output's publish "
                     "(exact, records with an output):")
    for lat in runs:
        if "error" in lat:
            lines.append(f"  {lat['rate']:>6.0f}/s: failed: {lat['error']}")
            continue
        e = lat["exact_per_record"]
        goal = latency_goal(lat["rate"])
        verdict = ("no SPEC goal at this rate" if goal is None else
                   f"goal p99 < {1e3 * goal:.0f} ms: {pass_fail(e['p99'] < goal)}")
        floor = floor_at.get(lat["rate"])
        beside = ("" if floor is None else
                  f" (the broker's floor in this run: p99 {fmt(floor['latency_ms']['p99'])} ms, "
                  f"max {fmt(floor['latency_ms']['max'])} ms)")
        lines.append(f"  {lat['rate']:>6.0f}/s: p50 {fmt(1e3 * e['p50'])} ms, p99 "
                     f"{fmt(1e3 * e['p99'])} ms, max {fmt(1e3 * e['max'])} ms; {verdict}{beside}")
        lines.append(f"          {_spells(e.get('slow'))}")
    for floor in floors:
        if "error" in floor:
            lines.append(f"  floor at {floor['rate']:.0f}/s: failed: {floor['error']}")
    return lines


def report_latency_ab(rows: Sequence[dict[str, Any]], against: str,
                      floors: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The interleaved latency rounds of ``--against``: per rate and round, each tree's exact
    p50 and p99 (input record's timestamp to its first output), the medians, this tree's
    p99 over the other's, and the broker's floor at the rate where it was measured."""
    if not rows:
        return []
    floor_at = {f["rate"]: f for f in floors if "error" not in f}
    lines = ["", f"latency A/B against: {against}",
             ("| rate /s | round | this p50 ms | this p99 ms | other p50 ms | other p99 ms "
              "| this / other (p99) |"), "|---:|---:|---:|---:|---:|---:|---:|"]

    def p(lat: dict[str, Any], q: str) -> float:
        return math.nan if "error" in lat else 1e3 * lat["exact_per_record"][q]

    verdicts: list[str] = []
    spells: list[str] = []
    for rate in dict.fromkeys(row["rate"] for row in rows):
        mine = [row for row in rows if row["rate"] == rate]
        for row in mine:
            this, other = row["this"], row["other"]
            lines.append(f"| {rate:.0f} | {row['round']} | {fmt(p(this, 'p50'))} | "
                         f"{fmt(p(this, 'p99'))} | {fmt(p(other, 'p50'))} | "
                         f"{fmt(p(other, 'p99'))} | {p(this, 'p99') / p(other, 'p99'):.2f} |")
            spells.append(f"  {rate:.0f}/s round {row['round']}: this tree "
                          f"{_spells(this.get('exact_per_record', {}).get('slow'))}; the other "
                          f"{_spells(other.get('exact_per_record', {}).get('slow'))}")
        med = {f"{t}_{q}": statistics.median([p(row[t], q) for row in mine])
               for t in ("this", "other") for q in ("p50", "p99")}
        lines.append(f"| {rate:.0f} | median | {fmt(med['this_p50'])} | {fmt(med['this_p99'])} "
                     f"| {fmt(med['other_p50'])} | {fmt(med['other_p99'])} | "
                     f"{med['this_p99'] / med['other_p99']:.2f} |")
        goal = latency_goal(rate)
        floor = floor_at.get(rate)
        beside = "" if floor is None else (
            f" (the broker's floor: p99 {fmt(floor['latency_ms']['p99'])} ms)")
        if goal is not None:
            verdicts.append(f"  {rate:>6.0f}/s: median p99 this {fmt(med['this_p99'])} ms, other "
                            f"{fmt(med['other_p99'])} ms; goal p99 < {1e3 * goal:.0f} ms: this "
                            f"{pass_fail(med['this_p99'] < 1e3 * goal)}, other "
                            f"{pass_fail(med['other_p99'] < 1e3 * goal)}{beside}")
    return [*lines, "", *spells, *(["", *verdicts] if verdicts else [])]
