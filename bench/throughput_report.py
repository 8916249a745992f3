"""What ``bench/throughput.py`` prints: its figures as text, each against its goal (SPEC
section 11), and the py-spy profile of the throughput worker summed by function."""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import fmt, fmt_ms, pass_fail
from bench.latency import report_latency, report_latency_ab
from bench.memory import report_memory
from bench.state_size import report_state

THROUGHPUT_GOAL = 0.20  # c/a: worker rate over the plain aiokafka consumer's

SCALING_GOAL = 1.8  # run --workers 2 over one worker, on the same records



def report_ab(rows: Sequence[dict[str, Any]], against: str) -> list[str]:
    """The rounds of :func:`phase_ab` as a table, with the medians and this tree's rate over
    the other's in each round."""
    if not rows:
        return []
    ks = sorted({int(key.split("_")[1]) for key in rows[0]
                 if key.startswith("this_") and not key.endswith("_cpu_us")})
    head = ["round", "(a) bare read"]
    for k in ks:
        label = "one worker" if k == 1 else f"--workers {k}"
        head += [f"this, {label}", f"other, {label}"]
    head.append("this / other (one worker)")
    lines = ["", f"A/B against: {against}", "| " + " | ".join(head) + " |",
             "|" + "---:|" * len(head)]

    def cells(get: Any) -> list[str]:
        out = [fmt(get("aiokafka"))]
        for k in ks:
            out += [f"{fmt(get(f'this_{k}'))} ({fmt(get(f'this_{k}_cpu_us'))} us)",
                    f"{fmt(get(f'other_{k}'))} ({fmt(get(f'other_{k}_cpu_us'))} us)"]
        return out

    for row in rows:
        lines.append(f"| {row['round']} | " + " | ".join(cells(row.get)) + " | "
                     f"{row['this_1'] / row['other_1']:.3f} |")
    median = {key: statistics.median([row[key] for row in rows])
              for key in rows[0] if key != "round"}
    ratio = statistics.median([row["this_1"] / row["other_1"] for row in rows])
    lines.append("| median | " + " | ".join(cells(median.get)) + f" | {ratio:.3f} |")
    lines.append("(records/s, and the workers' CPU us per record in brackets)")
    return lines



def summarize_profile(path: Path, top: int = 25) -> dict[str, Any]:
    """Inclusive and self share of samples per function from py-spy's raw output."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1]
                  if " (" in f else f for f in stack.split(";")]
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    return {"samples": total,
            "inclusive": [(f, n / total) for f, n in inclusive.most_common(top)] if total else [],
            "self": [(f, n / total) for f, n in own.most_common(top)] if total else []}



def _report_throughput(res: dict[str, Any]) -> list[str]:
    a, b, w = res.get("aiokafka"), res.get("faust_bare"), res.get("worker")
    if not (a or b or w):
        return []
    lines = ["", "| throughput (same broker, same events) | records/s | seconds | CPU us/record |",
             "|---|---:|---:|---:|"]

    def cpu_per(run: dict[str, Any], key: str = "cpu_s") -> str:
        done = run.get("cpu_records", run["records"] - run.get("first_batch", 0))
        return fmt(1e6 * run[key] / done, ".0f") if run.get(key) is not None and done else "-"

    if a:
        lines.append(f"| (a) aiokafka consumer + msgspec decode | {fmt(a['rate'])} | "
                     f"{fmt(a['seconds'], '.1f')} | {cpu_per(a)} |")
    if b:
        lines.append(f"| (b) bare faust agent, take_events + msgspec decode | {fmt(b['rate'])} | "
                     f"{fmt(b['seconds'], '.1f')} | {cpu_per(b)} |")
    if w:
        lines.append(f"| (c) worker (continuity-drift run) | {fmt(w['rate'])} | "
                     f"{fmt(w['seconds'], '.1f')} | {cpu_per(w, 'worker_cpu_s')} |")
    lines.append("")
    if a and w:
        ratio = w["rate"] / a["rate"]
        lines.append(f"c/a = {100 * ratio:.0f}% (worker / aiokafka consumer); SPEC goal c/a >= "
                     f"{100 * THROUGHPUT_GOAL:.0f}%: {pass_fail(ratio >= THROUGHPUT_GOAL)}")
    if b and w:
        lines.append(f"c/b = {100 * w['rate'] / b['rate']:.0f}% (worker / bare faust agent; b is "
                     "the rate a first version on faust reaches, no goal)")
    if w:
        lines.append(f"worker CPU {w['worker_cpu_s']:.1f}s + broker CPU {w['broker_cpu_s']:.1f}s "
                     f"while it read {w['cpu_records']:.0f} records in {w['seconds']:.1f}s; "
                     f"{w['outputs']:.0f} outputs published")
        interval = res.get("settings", {}).get("checkpoint_interval_s", 0.0)
        if w["seconds"] < 3 * interval:
            lines.append(f"note: the run lasted {w['seconds']:.1f}s, under three checkpoint "
                         f"intervals ({interval:g}s): its rate leaves out most of what "
                         f"checkpoints cost; about {3 * interval * w['rate']:.0f} records or "
                         "more (--events) checkpoint at least three times")
    for run in res.get("scaling") or []:
        k = run["workers"]
        lines.append(f"(c{k}) run --workers {k}: {fmt(run['rate'])} records/s in "
                     f"{run['seconds']:.1f}s, CPU {cpu_per(run, 'worker_cpu_s')} us/record "
                     f"(every worker) + broker {cpu_per(run, 'broker_cpu_s')} us/record, "
                     f"ready in {run['ready_s']:.1f}s")
        if w:
            ratio = run["rate"] / w["rate"]
            goal = f"; SPEC goal >= {SCALING_GOAL}x: {pass_fail(ratio >= SCALING_GOAL)}" \
                if k == 2 else ""
            lines.append(f"c{k}/c = {ratio:.2f}x one worker{goal}")
            lines += _all_busy(w, run) + _ceiling(w, run)
    return lines



def _all_busy(one: dict[str, Any], many: dict[str, Any]) -> list[str]:
    """The workers' rate while every one still had records: the run's rate also counts its
    end, when the workers whose partitions held fewer records have finished and the others
    go on alone (the keys do not split the records evenly between partitions)."""
    busy = many.get("busy") or {}
    if not busy or math.isnan(busy["rate"]):  # none, or too short a window
        return []
    shares = "/".join(f"{100 * x:.0f}" for x in busy["shares"])
    ratio = busy["rate"] / one["rate"]
    goal = f" (goal {SCALING_GOAL}x: {pass_fail(ratio >= SCALING_GOAL)})" \
        if many["workers"] == 2 else ""
    return [(f"    while all {many['workers']} had records ({busy['seconds']:.1f}s): "
             f"{fmt(busy['rate'])} records/s = {ratio:.2f}x one worker{goal}; "
             f"the workers' shares of the records were {shares}%, so the rest of the run "
             "went at the pace of the ones left")]



def _ceiling(one: dict[str, Any], many: dict[str, Any]) -> list[str]:
    """How far ``many`` workers could go on this machine: its CPUs less what the broker and
    everything else took during their run, over the cores one worker used, at one worker's
    CPU per record. With the broker on the same machine and a worker using more than a
    core (its checkpoint thread), this is the scaling's upper bound."""
    total = many.get("machine_busy_s", 0.0) + many.get("machine_idle_s", 0.0)
    if not total or not one.get("worker_cpu_s") or not many.get("worker_cpu_s"):
        return []
    cpus = os.cpu_count() or 1
    wall = total / cpus  # the window's seconds, as the machine counted them
    share = {k: many[k] / wall for k in ("worker_cpu_s", "broker_cpu_s", "machine_busy_s")}
    rest = share["machine_busy_s"] - share["worker_cpu_s"] - share["broker_cpu_s"]
    one_cores = one["worker_cpu_s"] * one["rate"] / one["cpu_records"]
    bound = (cpus - share["broker_cpu_s"] - max(rest, 0.0)) / one_cores
    return [(f"    the machine was {100 * share['machine_busy_s'] / cpus:.0f}% busy: workers "
             f"{share['worker_cpu_s']:.2f} cores, broker {share['broker_cpu_s']:.2f}, the rest "
             f"{rest:.2f}; one worker alone used {one_cores:.2f} cores, so at its CPU per "
             f"record {many['workers']} workers reach at most {bound:.2f}x here")]



def _report_commits(res: dict[str, Any]) -> list[str]:
    runs: list[tuple[str, dict[str, Any]]] = []
    if res.get("worker"):
        runs.append(("throughput worker", res["worker"]))
    runs += [(f"latency worker, {lat['rate']:.0f}/s", lat) for lat in res.get("latency", [])
             if "error" not in lat]
    if res.get("memory"):
        runs.append(("memory worker", res["memory"]))
    lines: list[str] = []
    for label, run in runs:
        cs, cr, bs = run["checkpoint_seconds"], run["checkpoint_records"], run["batch_size"]
        lines.append("")
        if cr["count"]:
            lines.append(f"checkpoints ({label}): {cr['count']:.0f} checkpoints for "
                         f"{cr['sum']:.0f} records, mean {fmt(cr['mean'])} records per "
                         f"checkpoint ({run['checkpoints_le_1_record']:.0f} of them with at "
                         f"most 1 record); p50 {fmt_ms(cs['p50'], cs)} ms, p95 "
                         f"{fmt_ms(cs['p95'], cs)} ms, mean {fmt_ms(cs['mean'])} ms per "
                         "checkpoint (DuckDB transaction + group commit)")
        else:
            lines.append(f"checkpoints ({label}): no continuity_checkpoint_records samples")
        lines.append(f"consumer batches ({label}): {bs['count']:.0f} batches for "
                     f"{bs['sum']:.0f} records, mean {fmt(bs['mean'], '.1f')} records per "
                     f"batch, p50 {fmt(bs['p50'], '.0f')}, p95 {fmt(bs['p95'], '.0f')}")
    if runs:
        lines.append("(checkpoint and batch quantiles interpolated in the histograms' buckets)")
    return lines



def _report_extras(res: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    split = res.get("engine_split")
    if split:
        lines.append("")
        lines.append("| in-process split (no Kafka), batch size | records "
                     "| Engine.process us/record | commit_batch us/record | commit ms/batch |")
        lines.append("|---|---:|---:|---:|---:|")
        for r in split:
            lines.append(f"| {r['batch']} | {r['records']} | {r['process_us']:.0f} | "
                         f"{r['commit_us']:.0f} | {r['commit_ms_per_batch']:.1f} |")
    prof = res.get("profile")
    if prof and prof.get("samples"):
        lines.append("")
        lines.append(f"py-spy, throughput worker ({prof['samples']} samples), inclusive share:")
        for f, share in prof["inclusive"][:20]:
            lines.append(f"  {100 * share:5.1f}%  {f}")
        lines.append("self share:")
        for f, share in prof["self"][:15]:
            lines.append(f"  {100 * share:5.1f}%  {f}")
    return lines



def report(res: dict[str, Any]) -> str:
    m = res["machine"]
    s = res["stream"]
    lines = [(f"machine: {m['nproc']} CPUs, {m['cpu_model']}, {m['mem_gb']} GB; "
              f"Python {m['python']}, faust {m['faust']}, aiokafka {m['aiokafka']}, "
              f"duckdb {m['duckdb']}"),
             (f"events: {s['records']} pre-produced records of {s['users']} simulated users "
              f"(all scenarios, ~{s['sessions_per_user']} sessions each), "
              f"{s['partitions']} partitions, produced at {s['produce_rate']:.0f}/s")]
    lines += _report_throughput(res)
    lines += report_ab(res.get("ab") or [], res.get("against", ""))
    lines += report_latency(res.get("latency") or [], res.get("latency_floor") or [])
    lines += report_latency_ab(res.get("latency_ab") or [], res.get("against", ""),
                               res.get("latency_floor") or [])
    if res.get("memory"):
        lines += report_memory(res["memory"])
    lines += _report_commits(res)
    lines += report_state(res.get("state_per_user"), res.get("state_size"))
    lines += _report_extras(res)
    lines.append("")
    lines.append(f"reproduce: {res['command']}")
    return "\n".join(lines)

