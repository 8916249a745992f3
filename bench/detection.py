"""Detection quality of the drift scoring, measured on labelled simulated streams.

Every simulated user goes through the real per-user fold (``drift.replay.MemoryReplay``,
no broker, no store): three 12-turn baseline sessions, then one test session that
either comes from the same process (the null rows) or changes it in a labelled way.
The figures are per test session and read from the ``drift.scores`` payloads
(``score_kind == "continuity_drift"``):

* ``own`` tier: the highest ``tier`` any score of the session had, i.e. what the
  scorer said about this session's own evidence;
* ``effective`` tier: the highest ``effective_tier``, which also includes a HOLD
  carried over from a baseline session that itself went high (SPEC section 4,
  tighten-only). On null rows the difference is the holds raised in the two
  scored baseline sessions, not new false alarms of the test session.

Beside ours, River's drift detectors run on the same streams (trust and
resonance_depth standardised by the user's baseline sessions, per checkpoint
window, exactly the inputs our test uses), warmed up on the baseline sessions,
with their thresholds tuned on stable users of a different seed to our own
per-session false-alarm rate.

Run ``python bench/detection.py`` (several minutes on two cores), ``--quick`` for a
smoke run, ``--json PATH`` to keep the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

# Run as a script (python bench/detection.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.detection_ours import CHUNK, RowFigures, log_since, mean_text, pool_map, rows, run_users
from bench.detection_river import RiverFigures, Stream, eval_task, tune_river
from bench.rates import Check, Rate
from drift.model import DriftConfig

DEFAULT_SEED = 20261130
DEFAULT_SESSIONS = 2000
QUICK_SESSIONS = 200


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = DriftConfig()
    started = time.monotonic()
    table_rows = rows()
    tasks = []
    for i, row in enumerate(table_rows):
        n = max(1, round(args.sessions * row.users_factor))
        for start in range(0, n, CHUNK):
            tasks.append((row, i, args.seed, start, min(CHUNK, n - start), config))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.workers) as pool:
        chunks = pool_map(pool, run_users, tasks, "our scorer", started)
        figures = [RowFigures(r) for r in table_rows]
        streams: list[Stream] = []
        for chunk in chunks:
            for res in chunk:
                figures[res.row].add(res.outcome)
                if res.base_z is not None and res.test_z is not None:
                    streams.append((res.row, len(streams), res.base_z, res.test_z))

        river: list[RiverFigures] = []
        target = (args.river_fa if args.river_fa is not None
                  else figures[0].rate("own_medium").value)
        if not args.no_river:
            river = tune_river(pool, args, config, target, started)
            tuned = [(r.spec, r.variant, r.value) for r in river]
            eval_tasks = [(streams[s:s + CHUNK], tuned) for s in range(0, len(streams), CHUNK)]
            fired = pool_map(pool, eval_task, eval_tasks, "River on the benchmark streams", started)
            by_key = {f"{r.spec.key}/{r.variant}": r for r in river}
            counts: dict[tuple[str, int], list[int | None]] = {}
            for part in fired:
                for row_index, key, first in part:
                    counts.setdefault((key, row_index), []).append(first)
            for (key, row_index), firsts in counts.items():
                fig = by_key[key]
                n = len(firsts)
                fig.first[row_index] = Rate(sum(1 for f in firsts if f is not None and f <= 5), n)
                fig.by_end[row_index] = Rate(sum(1 for f in firsts if f is not None), n)
                fig.delays[row_index] = [f for f in firsts if f is not None]
    elapsed = time.monotonic() - started
    log_since("done", started)
    return {"figures": figures, "river": river, "target": target, "elapsed_s": elapsed,
            "config": config}


def command(args: argparse.Namespace) -> str:
    parts = ["python bench/detection.py", f"--sessions {args.sessions}", f"--seed {args.seed}"]
    if args.tune_seed != args.seed + 1:
        parts.append(f"--tune-seed {args.tune_seed}")
    if args.no_river:
        parts.append("--no-river")
    if args.river_fa is not None:
        parts.append(f"--river-fa {args.river_fa:g}")
    return " ".join(parts)


def our_table(figures: list[RowFigures]) -> list[str]:
    head = ("| scenario | sessions | medium+ at turn_5 | medium+ by end | high by end "
            "| effective medium+ | effective high | delay medium+ (turns) |")
    lines = [head, "|" + "---|" * 8]
    for f in figures:
        lines.append(
            f"| {f.row.label} | {f.n} | {f.rate('first_medium').text()} "
            f"| {f.rate('own_medium').text()} | {f.rate('own_high').text()} "
            f"| {f.rate('eff_medium').text()} | {f.rate('eff_high').text()} "
            f"| {mean_text(f.delays_medium)} |")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def river_table(result: dict[str, Any]) -> list[str]:
    figures: list[RowFigures] = result["figures"]
    river: list[RiverFigures] = result["river"]
    shift_rows = [i for i, f in enumerate(figures) if f.row.river and not f.row.null]
    stable = 0
    at15 = next(i for i, f in enumerate(figures) if f.row.key == "attunement_full_1.5")
    lines = [
        ("| detector | input | tuned value | false alarms, tuning seed (next step) "
         "| false alarms, stable | 1.5 SD by turn 5 | 1.5 SD by end | delay (turns) |"),
        "|" + "---|" * 8,
    ]
    ours = figures[at15]
    lines.append(
        f"| ours (continuity_drift, medium+) | all six features | alpha_medium="
        f"{result['config'].alpha_medium:g} | - | {figures[stable].rate('own_medium').text()} "
        f"| {ours.rate('first_medium').text()} | {ours.rate('own_medium').text()} "
        f"| {mean_text(ours.delays_medium)} |")
    for r in river:
        lines.append(
            f"| {r.spec.label} | {r.variant} | {r.spec.param}={r.value:.4g} "
            f"| {100 * r.tune_rate:.1f}% ({_pct(r.next_rate)}) | {r.by_end[stable].text()} "
            f"| {r.first[at15].text()} | {r.by_end[at15].text()} "
            f"| {mean_text(r.delays[at15])} |")
    lines.append("")
    sizes = [figures[i].row.shift_sd for i in shift_rows]
    lines.append("| detector | input | " + " | ".join(f"{s:g} SD turn 5 / end" for s in sizes)
                 + " |")
    lines.append("|" + "---|" * (2 + len(sizes)))
    cells = [f"{100 * figures[i].rate('first_medium').value:.1f} / "
             f"{100 * figures[i].rate('own_medium').value:.1f}" for i in shift_rows]
    lines.append("| ours | all six features | " + " | ".join(cells) + " |")
    for r in river:
        cells = [f"{100 * r.first[i].value:.1f} / {100 * r.by_end[i].value:.1f}"
                 for i in shift_rows]
        lines.append(f"| {r.spec.key} | {r.variant} | " + " | ".join(cells) + " |")
    return lines


def checks(figures: list[RowFigures]) -> list[Check]:
    by_key = {f.row.key: f for f in figures}
    out = []
    stable = by_key["stable"]
    for label, group in (("stable", [stable]),
                         ("all null rows pooled", [f for f in figures if f.row.null])):
        med = Rate(sum(f.own_medium for f in group), sum(f.n for f in group))
        high = Rate(sum(f.own_high for f in group), sum(f.n for f in group))
        out.append(Check(
            f"{label}: medium+ <= 5% and high <= 1% (95% CI upper bounds)",
            med.ci[1] <= 0.05 and high.ci[1] <= 0.01,
            f"medium+ {med.text()}, high {high.text()}, n={med.n}"))
    shifted = by_key["attunement_full_1.5"]
    first = shifted.rate("first_medium")
    out.append(Check("1.5 SD trust+resonance shift: medium+ at first checkpoint >= 88% "
                     "(95% CI lower bound)", first.ci[0] >= 0.88, first.text()))
    for share in (0.5, 0.75, 1.0):
        r = by_key[f"semantic_{share:g}"].rate("own_medium")
        out.append(Check(f"{share:g} of commitments contradicted: medium+ in every session",
                         r.k == r.n, r.text()))
    comb = by_key["combined"].rate("own_high")
    out.append(Check("combined 1.5 SD + 0.5 contradicted: high >= 90% (95% CI lower bound)",
                     comb.ci[0] >= 0.90, comb.text()))
    saf = by_key["safety"].rate("own_high")
    out.append(Check("safety mismatch: high in every session", saf.k == saf.n, saf.text()))
    return out


NOTE = (
    "Rates with Wilson 95% intervals. On null rows (stable, shift 0) 'by end' is the "
    "per-session false-alarm rate; elsewhere it is detection power. 'medium+ at turn_5' is "
    "the tier of the first checkpoint's score; 'by end' the highest tier of any score of the "
    "session (turn_5, turn_10). 'effective' adds a HOLD carried over from a baseline session "
    "that itself went high (tighten-only); the session's own evidence is the 'by end' column. "
    "Delay: turn of the first medium+ score (0 = session_start)."
)


def report(result: dict[str, Any], args: argparse.Namespace) -> list[str]:
    figures: list[RowFigures] = result["figures"]
    title = (f"Detection quality (seed {args.seed}; each row: one test session per user "
             "after three 12-turn baseline sessions)")
    lines = [title, ""]
    lines += our_table(figures)
    lines += ["", NOTE, ""]
    if result["river"]:
        what = ("our stable medium+ rate" if args.river_fa is None
                else "the rate given by --river-fa")
        head = (f"River {_river_version()} on the same streams, thresholds tuned on "
                f"{result['river'][0].tune_n} stable users of seed {args.tune_seed} to {what} "
                f"({100 * result['target']:.2f}%); 'next step' is the false-alarm rate of the "
                "next more sensitive grid value:")
        lines += [head, ""]
        lines += river_table(result)
        lines.append("")
    for c in checks(figures):
        lines.append(f"{'PASS' if c.passed else 'FAIL'}  {c.name}: {c.detail}")
    took = f"{result['elapsed_s']:.0f} s, {args.workers} workers"
    lines += ["", f"Reproduce: {command(args)}   ({took})"]
    return lines


def _river_version() -> str:
    import river

    return str(getattr(river, "__version__", "?"))


def to_json(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    figures: list[RowFigures] = result["figures"]
    config: DriftConfig = result["config"]
    out: dict[str, Any] = {
        "command": command(args), "seed": args.seed, "tune_seed": args.tune_seed,
        "elapsed_s": result["elapsed_s"],
        "config": {k: v for k, v in asdict(config).items() if k != "extra"},
        "rows": [f.as_dict() for f in figures],
        "checks": [asdict(c) for c in checks(figures)],
        "river": [],
    }
    for r in result["river"]:
        out["river"].append({
            "detector": r.spec.key, "label": r.spec.label, "input": r.variant,
            "param": r.spec.param, "value": r.value, "tuning_false_alarm_rate": r.tune_rate,
            "tuning_sessions": r.tune_n, "next_step_false_alarm_rate": r.next_rate,
            "river_version": _river_version(), "target_false_alarm_rate": result["target"],
            "rows": {figures[i].row.key: {
                "by_turn_5": r.first[i].as_dict(), "by_end": r.by_end[i].as_dict(),
                "mean_delay_turns": (sum(r.delays[i]) / len(r.delays[i])
                                     if r.delays[i] else None)} for i in r.first},
        })
    return out


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sessions", type=int, default=None,
                   help=f"test sessions per row before the row's factor (default "
                        f"{DEFAULT_SESSIONS}; stable gets 3x)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--tune-seed", type=int, default=None,
                   help="seed of the stable users River is tuned on (default: seed + 1)")
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run ({QUICK_SESSIONS} sessions per row)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--no-river", action="store_true", help="skip the River comparison")
    p.add_argument("--river-fa", type=float, default=None,
                   help="tune River to this per-session false-alarm rate instead of ours")
    p.add_argument("--json", type=Path, default=None, help="write the figures to this file")
    args = p.parse_args(argv)
    if args.sessions is None:
        args.sessions = QUICK_SESSIONS if args.quick else DEFAULT_SESSIONS
    if args.tune_seed is None:
        args.tune_seed = args.seed + 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    result = run(args)
    print("\n".join(report(result, args)))
    if args.json is not None:
        args.json.write_text(json.dumps(to_json(result, args), indent=2) + "\n")
    return 0 if all(c.passed for c in checks(result["figures"])) else 1


if __name__ == "__main__":
    raise SystemExit(main())
