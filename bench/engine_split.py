"""Where the engine's time goes, in process: wall time per record of each part of
``Engine.process`` and of the checkpoint write, on a simulated stream, without a broker.

``bench/throughput.py`` measures the worker end to end and ``bench/instructions.py`` counts
the engine's instructions for an A/B; this splits the engine's cost by concern, so that what
limits the worker can be read as a table instead of a flame graph:

- decode (``Engine.decode``: msgspec, validation, domain values), and the domain events
  alone (``streams.edge.codec.to_domain``);
- the fold (``drift.kernel.fold_batch``): the batch's event columns, the compiled kernel
  (``apply_turns``), the turns it took that reach a checkpoint (scored by its caller on
  the slot's state object: their checkpoint, and at the re-attunement turn its
  re-attunement), the session starts and ends it took (opened or closed on the state
  object, the result written into the slot), the events it hands to the reference
  (``drift.fold.step``): re-attunement, the baseline fold at session end, the session
  start; and the hand-offs' conversions, a user's state built from the columns before
  the reference's step and loaded back into them after it;
- scoring at checkpoints wherever the fold calls it (``checkpoint``: the attunement test,
  the composite, the response ladder), and the attunement test alone (the reference's, or
  the kernel's of the rows its turn row holds);
- the shell (``Engine.process`` less decode and fold: metrics, output encoding, staging);
- the checkpoint write (every 5,000 records as in ``bench/instructions.py``): the staged
  states built from the columns (``Memory.take``), their rows as Arrow tables
  (``rows_of``: each state's snapshot, each new baseline version's values) and the DuckDB
  transaction (``apply_rows``).

Each part is timed by wrapping the function where the engine or the fold calls it; a
wrapper costs well under a microsecond per call, so the parts called once per record or
less are timed faithfully. The figures are wall time, so they move with the machine
(compare within one run); the shares are steadier than the microseconds.

    python bench/engine_split.py
    python bench/engine_split.py --records 40000 --users 400
"""

from __future__ import annotations

import argparse
import functools
import inspect
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Run as a script (python bench/engine_split.py): the tree's root goes on sys.path before any
# import of the tree. Every script needs these lines before its imports, so each keeps them.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import build_stream
from bench.kafka_io import partition_of

CHECKPOINT = "checkpoint write"

#: (label, module, function, parent label): a part, where it is called from, and the part
#: it is inside of (the rows are printed in this order, indented under their parent).
PARTS = (
    ("engine (Engine.process)", "streams.processing.engine", "Engine.process", None),
    ("decode", "streams.processing.engine", "Engine.decode", "engine (Engine.process)"),
    ("the domain events (to_domain)", "streams.edge.codec", "to_domain", "decode"),
    ("fold (fold_batch)", "streams.processing.engine", "fold_batch", "engine (Engine.process)"),
    ("event columns (EventColumns.of)", "drift.kernel.events", "EventColumns.of",
     "fold (fold_batch)"),
    ("kernel (apply_turns)", "drift.kernel.batch", "apply_turns", "fold (fold_batch)"),
    ("turns the kernel scored", "drift.kernel.batch", "_score", "fold (fold_batch)"),
    ("their state from the slot (scored_at)", "drift.kernel.columns", "UserColumns.scored_at",
     "turns the kernel scored"),
    ("their checkpoint (checkpoint)", "drift.model_change", "checkpoint",
     "turns the kernel scored"),
    ("the re-attunement turn's re-attunement (reattune)", "drift.model_change", "reattune",
     "turns the kernel scored"),
    ("session starts the kernel took (_start)", "drift.kernel.batch", "_start",
     "fold (fold_batch)"),
    ("their session written into the slot (open_session)", "drift.kernel.columns",
     "UserColumns.open_session", "session starts the kernel took (_start)"),
    ("session ends the kernel took (_end)", "drift.kernel.batch", "_end",
     "fold (fold_batch)"),
    ("their baseline fold", "drift.fold", "fold_session",
     "session ends the kernel took (_end)"),
    ("their state from the slot (closing_state)", "drift.kernel.batch", "closing_state",
     "session ends the kernel took (_end)"),
    ("their state loaded into the columns (put_at)", "drift.kernel.columns",
     "UserColumns.put_at", "session ends the kernel took (_end)"),
    ("state built from the columns (state_at)", "drift.kernel.columns", "UserColumns.state_at",
     "fold (fold_batch)"),
    ("state loaded into the columns (put_at)", "drift.kernel.columns", "UserColumns.put_at",
     "fold (fold_batch)"),
    ("hand-offs (drift.fold.step)", "drift.kernel.batch", "step", "fold (fold_batch)"),
    ("re-attunement", "drift.fold", "reattune", "hand-offs (drift.fold.step)"),
    ("baseline fold at session end", "drift.fold", "fold_session",
     "hand-offs (drift.fold.step)"),
    ("session start", "drift.fold", "_session_start", "hand-offs (drift.fold.step)"),
    # Scoring runs in both of the fold's paths (a turn the kernel scored, and a session's
    # last checkpoint at its end in a hand-off): its own row, wrapped where each calls it.
    ("scoring at checkpoints", "drift.model_change", "checkpoint", None),
    ("scoring at checkpoints", "drift.fold", "checkpoint", None),
    ("attunement test", "drift.checkpoint", "attunement_test", "scoring at checkpoints"),
    ("attunement test", "drift.kernel.batch", "attunement_of_rows", "scoring at checkpoints"),
    ("the staged states built (Memory.take)", "streams.processing.memory", "Memory.take", CHECKPOINT),
    ("their rows (rows_of)", "baselines.store", "BaselineStore.rows_of", CHECKPOINT),
    ("the states' snapshots (state_table)", "baselines.store", "state_table",
     "their rows (rows_of)"),
    ("the new baseline versions (baseline_table)", "baselines.store", "baseline_table",
     "their rows (rows_of)"),
    ("the DuckDB transaction (apply_rows)", "baselines.store", "BaselineStore.apply_rows",
     CHECKPOINT),
)


class Timers:
    """Calls and seconds per part, gathered by wrappers set on the modules. A part with a
    parent is timed only while its parent runs and none of its siblings does
    (``UserColumns.put_at`` is called by the fold's hand-offs and by the session ends the
    kernel took: each call is counted in one row only). So the
    parts under a parent never overlap, and the parent's rest is never negative."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.running: dict[str, int] = {}

    def wrap(self, label: str, fn: Callable[..., Any], parent: str | None = None,
             keep: bool = False, siblings: Sequence[str] = ()) -> Callable[..., Any]:
        """``fn`` timed as ``label``, except while one of ``siblings`` runs; ``keep`` adds to
        the label's figures so far (a part wrapped anew at each call) instead of starting
        them."""
        if not keep or label not in self.calls:
            self.calls[label], self.seconds[label] = 0, 0.0
        self.running.setdefault(label, 0)
        clock = time.perf_counter
        running = self.running
        others = tuple(s for s in siblings if s != label)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if parent is not None and (not running.get(parent)
                                       or any(running.get(s) for s in others)):
                return fn(*args, **kwargs)
            running[label] += 1
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += clock() - started
                self.calls[label] += 1
                running[label] -= 1

        return timed


def install(timers: Timers) -> None:
    """Set a timing wrapper on every part of :data:`PARTS`, where it is looked up when called
    (once per process: a second call would time each part twice)."""
    import importlib

    for label, module, name, parent in PARTS:
        owner: Any = importlib.import_module(module)
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        siblings = [p[0] for p in PARTS if p[3] == parent] if parent is not None else []
        timed = timers.wrap(label, getattr(owner, attr), parent, siblings=siblings)
        if isinstance(inspect.getattr_static(owner, attr), staticmethod):
            timed = staticmethod(timed)
        setattr(owner, attr, timed)


def run(records: int, users: int, seed: int) -> tuple[Timers, float, float, int]:
    """Put the stream through a real engine on a DuckDB file; returns the timers, the
    checkpoint writes' seconds, the whole loop's seconds and the number of records."""
    from bench.instructions import input_records, through_engine

    stream = build_stream(records, users, seed, start=1.8e9)
    recs = input_records([(key, value) for key, value, _ in stream.records])
    timers = Timers()
    install(timers)
    timers.calls[CHECKPOINT], timers.seconds[CHECKPOINT] = 0, 0.0  # a run may write none

    def timed_write(write: Callable[[], None]) -> None:
        timers.wrap(CHECKPOINT, write, keep=True)()

    total_s = through_engine(recs, timed_write)
    return timers, timers.seconds.get(CHECKPOINT, 0.0), total_s, len(recs)


def table(timers: Timers, write_s: float, total_s: float, n: int) -> list[str]:
    """The split as Markdown rows: us per record, share of the loop, calls, us per call."""
    def row(label: str, seconds: float, calls: int | None, depth: int) -> str:
        per_call = f"{1e6 * seconds / calls:,.1f}" if calls else ""
        return (f"| {'. ' * depth}{label} | {1e6 * seconds / n:,.1f} | "
                f"{100 * seconds / total_s:.1f}% | {calls if calls is not None else ''} | "
                f"{per_call} |")

    lines = ["| part | us/record | share | calls | us/call |", "|---|---:|---:|---:|---:|"]

    def walk(parent: str | None, depth: int) -> None:
        kids = list(dict.fromkeys(label for label, _, _, p in PARTS if p == parent))
        for label in kids:
            lines.append(row(label, timers.seconds[label], timers.calls[label], depth))
            walk(label, depth + 1)
        if parent is not None and kids:
            rest = timers.seconds[parent] - sum(timers.seconds[k] for k in kids)
            lines.append(row(f"the rest of {parent.split(' (')[0]}", rest, None, depth))

    walk(None, 0)
    lines.append(row(CHECKPOINT, write_s, timers.calls.get(CHECKPOINT), 0))
    walk(CHECKPOINT, 1)
    lines.append(row("the loop (engine + checkpoint writes)", total_s, None, 0))
    return lines


def by_batch_size(records: Sequence[tuple[bytes, bytes, str]], partitions: int,
                 batch_sizes: Sequence[int], warmup: int) -> list[dict[str, Any]]:
    """The worker's own work without Kafka: ``Engine.process`` and ``commit_batch`` per record.

    The records go through a real :class:`streams.processing.engine.Engine` and a DuckDB file in a
    temporary directory, in batches as the agent would hand them over; the first
    ``warmup`` records are not timed.
    """
    from prometheus_client import CollectorRegistry

    from baselines.store import BaselineStore
    from drift.model import DriftConfig
    from streams.metrics import build_metrics
    from streams.processing.engine import Engine
    from streams.processing.records import Record

    offsets = dict.fromkeys(range(partitions), 0)
    now = time.time()
    recs = []
    for key, value, _ in records:
        part = partition_of(key, partitions)
        recs.append(Record(part, offsets[part], key, value, int(now * 1000)))
        offsets[part] += 1
    rows = []
    for size in batch_sizes:
        with tempfile.TemporaryDirectory(prefix="continuity-split-") as tmp:
            store = BaselineStore(Path(tmp) / "continuity.duckdb")
            engine = Engine(store, DriftConfig(), build_metrics(CollectorRegistry()))
            engine.assign(range(partitions))
            spent = [0.0, 0.0]
            timed = 0
            try:
                for i in range(0, len(recs), size):
                    batch = recs[i:i + size]
                    t0 = time.perf_counter()
                    engine.process(batch)
                    t1 = time.perf_counter()
                    store.commit_batch(engine.take_checkpoint())
                    t2 = time.perf_counter()
                    if i >= warmup:
                        spent[0] += t1 - t0
                        spent[1] += t2 - t1
                        timed += len(batch)
            finally:
                store.close()
        rows.append({"batch": size, "records": timed,
                     "process_us": 1e6 * spent[0] / max(timed, 1),
                     "commit_us": 1e6 * spent[1] / max(timed, 1),
                     "commit_ms_per_batch": 1e3 * spent[1] / max(timed / size, 1)})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Wall time per record of each part of the engine, in process.",
        epilog="example: python bench/engine_split.py --records 40000 --users 400")
    parser.add_argument("--records", type=int, default=40_000,
                        help="records put through the engine (default 40000)")
    parser.add_argument("--users", type=int, default=400,
                        help="simulated users (default 400: ~100 events and ~7 sessions each, "
                             "so that most sessions are scored against baselines)")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args(argv)
    if args.records < 1 or args.users < 1:
        parser.error("--records and --users must be at least 1")
    print(f"building {args.records:,} simulated records of {args.users:,} users ...",
          file=sys.stderr, flush=True)
    timers, write_s, total_s, n = run(args.records, args.users, args.seed)
    print(f"{n:,} records through the engine in {total_s:.2f} s "
          f"({n / total_s:,.0f} records/s, one thread, no broker)\n")
    print("\n".join(table(timers, write_s, total_s, n)))
    print("\nreproduce: python bench/engine_split.py "
          + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
