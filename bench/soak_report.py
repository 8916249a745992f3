"""What a ``bench/soak.py`` run gathered (:class:`Run`) and what it prints: every figure
(what arrived against the fold of the log, the latency, the kills and the workers' logs)
and its verdict."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.soak_expected import Expected, scenario_of, timer_outputs
from bench.soak_kafka import Collector, PacedProducer
from bench.soak_workers import Kill


@dataclass
class Run:
    command: str
    commit: str
    events: int
    users: int
    rate: float
    kill_every: float
    workers: int
    partitions: int
    expected: Expected | None = None
    producer: PacedProducer | None = None
    collector: Collector | None = None
    kills: list[Kill] = field(default_factory=list)
    assignments: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    input_ts: dict[str, int] = field(default_factory=dict)
    input_read: dict[int, int] = field(default_factory=dict)
    log_expected: dict[str, tuple[str, str | None, str, bytes | None]] | None = None
    """The fold of ``fhr.events`` as read back after the run (ticks included): what the
    outputs are compared with; None if the read did not happen."""
    drain_s: float = math.nan
    drained: bool = False
    wall_s: float = math.nan
    supervisor_exit: int | None = None
    log: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    work_dir: str = ""


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, float), q)) if values else math.nan


def report(run: Run) -> str:
    exp = run.expected
    col = run.collector
    prod = run.producer
    assert exp is not None
    lines = ["## Soak", "",
             (f"{run.workers} workers (`run --workers {run.workers}`), {run.partitions} "
              "partitions, "
             f"{run.users:,} simulated users of every scenario, offered at {run.rate:,.0f}/s, a "
             f"SIGKILL every {run.kill_every:g}s while the offer ran."), ""]
    if col is None or prod is None:
        lines += ["THE RUN DID NOT GET TO THE OFFER: " + "; ".join(run.errors), "",
                  f"reproduce: {run.command}", f"commit: {run.commit}"]
        return "\n".join(lines)
    seen = col.seen
    # The fold of the log as read back (ticks and hostile records included) when there is
    # one; else the replay of what was offered, with what a timer may add counted apart.
    expected = run.log_expected if run.log_expected is not None else exp.outputs
    lost = [i for i in expected if i not in seen]
    extra = [i for i in seen if i not in expected]
    timer = timer_outputs(exp, run.wall_s + 60.0) if extra and run.log_expected is None \
        else {}
    extra_timer = [i for i in extra if i in timer]
    extra_other = [i for i in extra if i not in timer]
    dup_msgs = sum(s.copies - 1 for s in seen.values())
    duplicated = [i for i, s in seen.items() if s.copies > 1]
    dup_ids = len(duplicated)
    differing_copies = sum(s.differing_copies for s in seen.values())
    content = [i for i, s in seen.items() if i in expected and expected[i][3] is not None
               and s.digest != expected[i][3]]
    wrong_topic = [i for i, s in seen.items() if i in expected and s.topic != expected[i][0]]
    offer_s = prod.finished_at - prod.started_at
    input_total = sum(run.input_read.values())

    delays: list[tuple[float, str, str, float]] = []  # (delay s, id, topic, input offered t)
    no_cause = 0
    cause_unknown = 0
    for i, s in seen.items():
        if not s.cause:
            no_cause += 1
            continue
        ts_in = run.input_ts.get(s.cause)
        if ts_in is None:
            cause_unknown += 1
            continue
        delays.append(((s.ts_ms - ts_in) / 1000.0, i, s.topic,
                       ts_in / 1000.0 - prod.started_wall))
    d = [x[0] for x in delays]

    def row(label: str, value: str) -> str:
        return f"| {label} | {value} |"

    def by_topic(ids: Sequence[str]) -> str:
        counts = Counter(seen[i].topic if i in seen else expected[i][0] for i in ids)
        return ", ".join(f"{t} {n:,}" for t, n in counts.most_common()) or "-"

    def by_scen(ids: Sequence[str]) -> str:
        counts = Counter(scenario_of(seen[i].user if i in seen else expected[i][2])
                         for i in ids)
        return ", ".join(f"{t} {n:,}" for t, n in counts.most_common(6)) or "-"

    restarts = run.log.get("restarts_by_exit_code", {})
    n_restarts = sum(restarts.values())
    killed_restarts = restarts.get("-9", 0)
    restart_text = ", ".join(f"exit {c}: {n}" for c, n in restarts.items()) or "-"
    lines += ["| figure | value |", "|---|---|",
              row("events offered / acknowledged by the broker",
                  f"{prod.sent:,} / {prod.acked:,} of {run.events:,} "
                  f"({prod.failed:,} failed) in {offer_s:.1f}s = "
                  f"{prod.acked / max(offer_s, 1e-9):,.0f}/s"),
              row("input records read back from fhr.events", f"{input_total:,}"),
              row("expected outputs (the fold of fhr.events as read back)"
                  if run.log_expected is not None else
                  "expected outputs (pure replay of the offer, in process)",
                  f"{len(expected):,}: " + ", ".join(f"{t} {n:,}" for t, n in Counter(
                      v[0] for v in expected.values()).most_common())),
              row("distinct output ids received", f"{len(seen):,} (messages "
                  f"{sum(col.messages.values()):,})"),
              row("**LOST** (expected, never received)",
                  f"**{len(lost):,}**" + (f" ({by_topic(lost)}; scenarios {by_scen(lost)})"
                                          if lost else "")),
              row("**EXTRA** ids (received, not in the fold of the log)",
                  f"**{len(extra_other):,}**" + (f" ({by_topic(extra_other)}; scenarios "
                                                 f"{by_scen(extra_other)})" if extra_other
                                                 else "")
                  + ("" if run.log_expected is not None else
                     f"; plus {len(extra_timer):,} a timer may add after a user's last event "
                     "(idle closes, expiries; not in the pure replay by construction)")),
              row("**DUPLICATES** (messages beyond the first per id)",
                  f"**{dup_msgs:,}** on {dup_ids:,} ids"
                  + (f" ({by_topic(duplicated)})" if dup_ids else "")),
              row("copies whose bytes differ from the first copy of their id",
                  f"{differing_copies:,}"),
              row("outputs whose bytes differ from the replay's",
                  f"{len(content):,}" + (f" ({by_topic(content)})" if content else "")),
              row("outputs on another topic than the replay's", f"{len(wrong_topic):,}"),
              row("dead letters", (", ".join(f"{r} {n:,}" for r, n in col.deadletters.items())
                                   or "0") + f"; undecodable output messages {col.undecodable}"),
              row("kills done (SIGKILL)", f"{len(run.kills)}"),
              row("restarts the supervisor logged",
                  f"{n_restarts} ({restart_text})"
                  + (f"; **{n_restarts - killed_restarts} not caused by our kills**"
                     if n_restarts != killed_restarts else "")),
              row("longest delay, input record timestamp -> its output (first copy)",
                  (f"**{max(d):.2f} s**" if d else "n/a")),
              row("delay p50 / p99 / p99.9",
                  " / ".join(f"{_pct(d, q):.3f} s" for q in (50, 99, 99.9)) if d else "n/a"),
              row("outputs without an input cause / cause not found in fhr.events",
                  f"{no_cause:,} / {cause_unknown:,}"),
              row("all expected outputs arrived",
                  (f"yes, {run.drain_s:.1f}s after the offer ended" if run.drained else
                   f"NO, gave up {run.drain_s:.0f}s after the offer ended")),
              row("supervisor exit after SIGTERM", str(run.supervisor_exit)),
              ""]
    verdict = []
    verdict.append(f"LOST {len(lost):,}" if lost else "nothing lost")
    verdict.append(f"{len(extra_other):,} unexplained extra ids" if extra_other
                   else "no unexplained extra ids")
    verdict.append(f"{dup_msgs:,} duplicate messages (at-least-once re-publish)" if dup_msgs
                   else "no duplicates")
    if content:
        verdict.append(f"{len(content):,} outputs differ from the replay")
    if n_restarts != killed_restarts:
        verdict.append(f"{n_restarts - killed_restarts} worker restarts not caused by a kill")
    lines += ["VERDICT: " + "; ".join(verdict) + ".", ""]

    if delays:
        worst = sorted(delays, reverse=True)[:3]
        kill_ts = [k.t for k in run.kills]
        lines.append("longest delays:")
        for dl, i, t, offered in worst:
            before = [k for k in kill_ts if k <= offered]
            after = [k for k in kill_ts if k > offered]
            where = (f"{offered - before[-1]:.1f}s after kill #{kill_ts.index(before[-1]) + 1}"
                     if before else "before the first kill")
            if after:
                where += f", {after[0] - offered:.1f}s before kill #{kill_ts.index(after[0]) + 1}"
            lines.append(f"  {dl:7.2f} s  {t} id {i}: input offered at t={offered:.1f}s "
                         f"({where})")
        lines.append("")
        bounds = [0.0, *[k.t for k in run.kills], math.inf]
        lines += ["| inputs offered between | outputs | p50 s | p99 s | max s |",
                  "|---|---:|---:|---:|---:|"]
        for a, b in itertools.pairwise(bounds):
            part = [x[0] for x in delays if a <= x[3] < b]
            label = f"t={a:.0f}s and " + (f"kill at t={b:.0f}s" if math.isfinite(b)
                                          else "the end")
            if part:
                lines.append(f"| {label} | {len(part):,} | {_pct(part, 50):.3f} | "
                             f"{_pct(part, 99):.3f} | {max(part):.3f} |")
        lines.append("")
    if run.kills:
        restores = run.log.get("restore_list", [])
        lines += [("| kill | t (s) | worker | pid | ready before | restarted after (s) "
                  "| ready again after (s) | partitions it owned | partitions whose owner "
                  "process changed | partition restores logged until the next kill |"),
                  "|---:|---:|---|---:|---|---:|---:|---|---|---:|"]
        for n, k in enumerate(run.kills, 1):
            end = run.kills[n].t if n < len(run.kills) else math.inf
            settled = next((own for t, own in run.assignments if k.t < t < end), None)
            prior = k.owners_before
            had = sorted(p for p, pid in (prior or {}).items() if pid == k.pid)
            moved = (sorted(p for p in range(run.partitions) if prior.get(p) != settled.get(p))
                     if prior is not None and settled is not None else None)
            moved_text = (str(moved) if moved is not None else "n/a" if prior is None
                          else "n/a (not settled before the next kill)")
            w0, w1 = prod.started_wall + k.t, prod.started_wall + end
            n_rest = sum(1 for ts, _, _ in restores if w0 <= ts < w1)
            lines.append(f"| {n} | {k.t:.1f} | worker-{k.index} | {k.pid} | "
                         f"{'yes' if k.was_ready else 'no'} | {k.restarted_after:.1f} | "
                         f"{k.ready_after:.1f} | {had if prior is not None else 'n/a'} | "
                         f"{moved_text} | {n_rest} |")
        lines += ["",
                  ("partitions whose owner process changed: between the last assignment seen "
                  "before the kill and the first one after it (every worker ready, every "
                  "partition owned once; from /readyz). A restore of more partitions than "
                  "moved means owners restored partitions they kept."), ""]
    if lost:
        lines.append("first lost outputs (id, topic, cause, user):")
        for i in lost[:8]:
            t, c, u, _ = expected[i]
            lines.append(f"  {i} {t} cause={c} user={u}")
        lines.append("")
    if extra_other:
        lines.append("first unexplained extra ids (id, topic, cause, user):")
        for i in extra_other[:8]:
            s = seen[i]
            lines.append(f"  {i} {s.topic} cause={s.cause} user={s.user}")
        lines.append("")
    lg = run.log
    lines.append(f"worker log: {lg.get('levels', {})}, {lg.get('restores', 0)} partition "
                 f"restores (longest {lg.get('restore_max_s', math.nan):.3f}s), "
                 f"{lg.get('tracebacks', 0)} tracebacks")
    for msg, n in lg.get("problems", []):
        lines.append(f"  {n:5d} x {msg}")
    for msg, n in lg.get("other_lines", []):
        lines.append(f"  {n:5d} x (not JSON) {msg}")
    if prod.errors:
        lines.append(f"producer errors: {prod.errors[:3]}")
    if prod.max_behind > run.rate:
        lines.append(f"NOTE: the offer fell up to {prod.max_behind:,} records behind its "
                     "schedule (the load generator shares the machine)")
    for e in run.errors:
        lines.append(f"HARNESS ERROR: {e}")
    lines += ["", (f"replay: {exp.events:,} events ({exp.rejected} rejected by the decoder) in "
              f"{exp.seconds:.0f}s in process"), f"reproduce: {run.command}",
              f"commit: {run.commit}"]
    if run.work_dir:
        lines.append(f"logs: {run.work_dir}")
    return "\n".join(lines)
