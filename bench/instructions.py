"""Instructions per record through the engine, counted by callgrind: an A/B that machine noise
does not move.

Wall-clock rates on this kind of machine drift by 20-30% between runs minutes apart (the same
tree measured 9,569 and 14,349 records/s), so an engine change of a few percent cannot be
seen in ``bench/throughput.py``. Callgrind counts executed instructions instead, which
depend only on the code, the inputs and the hash seed (fixed here), not on what else the
machine does.

The simulated stream (``--records`` records of ``--users`` users, every scenario) is built
once, by this tree, and handed to every run. For each tree (default: this one), two
processes run under ``valgrind --tool=callgrind`` on it: one loads it and processes none of
it, one loads it and processes every record through a real
:class:`streams.processing.engine.Engine` on a DuckDB file in a temporary directory, in batches of 500
with a checkpoint (``rows_of`` + ``apply_rows``) every 5,000 records, as the worker does. The
difference divided by ``--records`` is the engine's instructions per record: decode, fold,
metrics, output encoding, staging and the checkpoint; no Kafka client. The collector runs with
the tree's own worker thresholds (``streams.worker.GC_THRESHOLDS`` where the tree has them).

    python bench/instructions.py                          # this tree
    python bench/instructions.py --tree /path/to/other/checkout --tree .
    python bench/instructions.py --records 40000 --users 400
    python bench/instructions.py --fold kernel --tree ../before --tree .   # the fold alone

Needs valgrind (Debian: ``apt-get install valgrind``). The two runs of a tree go in parallel;
about a minute per tree.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SEED = 20261130
_COLLECTED = re.compile(r"Collected : (\d+)")


def child(stream_path: Path, process: bool, fold: str | None = None) -> None:
    """The measured process: load the stream, then put it through an engine if ``process``
    (the project's modules come from the tree under test, on ``PYTHONPATH``). With
    ``fold``, the stream is decoded whatever ``process`` says, and only the fold is put to
    the test: the reference's loop of ``step`` or the kernel's ``fold_batch``."""
    with stream_path.open("rb") as f:
        stream: list[tuple[bytes, bytes]] = pickle.load(f)
    records = len(stream) if process else 0
    if fold is not None:
        through_fold(stream, records, fold)
        return
    recs = input_records(stream)
    through_engine(recs[:records])


def through_fold(stream: Sequence[tuple[bytes, bytes]], records: int, fold: str) -> None:
    """Decode ``stream``, then fold its first ``records`` events by ``fold``: ``reference``
    (a loop of ``drift.fold.step``) or ``kernel`` (``drift.kernel.fold_batch`` over batches
    of 500, as the worker's ``batch_max``)."""
    from drift.baseline import UserBaselines
    from drift.fold import initial, step
    from drift.kernel import UserColumns, fold_batch
    from drift.model import DriftConfig, FhrEvent
    try:
        from streams.edge.codec import decode_event
    except ImportError:  # a tree from before streams/edge/ (b4e1618 and older)
        from streams.codec import decode_event  # type: ignore[no-redef]

    events = [e for e in (decode_event(k, v) for k, v in stream) if isinstance(e, FhrEvent)]
    events = events[:records]
    config = DriftConfig()
    if fold == "kernel":
        cols = UserColumns(config, capacity=1024)
        for i in range(0, len(events), 500):
            fold_batch(cols, events[i:i + 500], config)
        return
    states: dict[str, Any] = {}
    baselines: dict[str, UserBaselines] = {}
    for e in events:
        u = e.user_id
        result = step(states.get(u) or initial(u), baselines.get(u, UserBaselines()), e, config)
        states[u], baselines[u] = result.state, result.baselines


def through_engine(recs: Sequence[Any],
                   run_write: Callable[[Callable[[], None]], None] | None = None) -> float:
    """Put ``recs`` through a real :class:`streams.processing.engine.Engine` on a DuckDB file in a
    temporary directory, as the worker does: the collector's thresholds set, the loaded state
    frozen, batches of 500, a checkpoint write (``rows_of`` + ``apply_rows``) every 5,000
    records, handed to ``run_write`` if given (to time it). Returns the loop's seconds."""
    import gc
    import time

    from prometheus_client import CollectorRegistry

    from baselines.store import BaselineStore
    from drift.model import DriftConfig
    from streams import worker
    from streams.metrics import build_metrics

    try:
        from streams.processing.engine import Engine
    except ImportError:  # a tree from before streams/processing/ (b4e1618 and older)
        from streams.engine import Engine  # type: ignore[no-redef]

    thresholds = getattr(worker, "GC_THRESHOLDS", None)
    if thresholds:
        gc.set_threshold(*thresholds)
    with tempfile.TemporaryDirectory(prefix="continuity-engine-") as tmp:
        store = BaselineStore(Path(tmp) / "continuity.duckdb")
        engine = Engine(store, DriftConfig(), build_metrics(CollectorRegistry()),
                        clock=lambda: 1.8e9 + 86400.0)
        engine.assign(range(4))
        gc.collect()
        gc.freeze()

        def write() -> None:
            store.apply_rows(store.rows_of(engine.take_checkpoint()))

        started = time.perf_counter()
        for i in range(0, len(recs), 500):
            engine.process(recs[i:i + 500])
            if i % 5000 == 4500:
                if run_write is None:
                    write()
                else:
                    run_write(write)
        loop_s = time.perf_counter() - started
        store.close()
    return loop_s


def input_records(stream: Sequence[tuple[bytes, bytes]], partitions: int = 4) -> list[Any]:
    """The stream as the engine's input records, on ``partitions`` partitions by key (as the
    producer's partitioner places a key: one partition per user), offsets from 0."""
    import zlib

    try:
        from streams.processing.records import Record
    except ImportError:  # a tree from before streams/processing/: records at the top, or
        try:  # before that (e93bebf) the engine's own
            from streams.records import Record  # type: ignore[no-redef]
        except ImportError:
            from streams.engine import Record  # type: ignore[no-redef]

    offsets = dict.fromkeys(range(partitions), 0)
    out = []
    for key, value in stream:
        p = zlib.crc32(key) % partitions
        out.append(Record(p, offsets[p], key, value, 1_800_000_000_000))
        offsets[p] += 1
    return out


def build(path: Path, records: int, users: int, seed: int) -> None:
    """The simulated stream, as (key, value) pairs, pickled to ``path``."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.harness import build_stream

    stream = build_stream(records, users, seed, start=1.8e9)
    with path.open("wb") as f:
        pickle.dump([(key, value) for key, value, _ in stream.records], f)


def count(tree: Path, stream: Path, process: bool, fold: str | None = None) -> int:
    """Instructions callgrind counts for one child run in ``tree``."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory(prefix="continuity-callgrind-") as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
               sys.executable, str(ROOT / "bench" / "instructions.py"), "--child", str(stream)]
        if process:
            cmd.append("--process")
        if fold is not None:
            cmd += ["--fold", fold]
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                              check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed in {tree} (exit {done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Instructions per record through the engine, counted by callgrind.",
        epilog="example: python bench/instructions.py --tree ../before --tree .")
    parser.add_argument("--tree", action="append", type=Path, default=[],
                        help="a checkout of this project to measure (repeatable; default: "
                             "this one)")
    parser.add_argument("--records", type=int, default=20_000,
                        help="records put through the engine (default 20000)")
    parser.add_argument("--users", type=int, default=200,
                        help="simulated users (default 200: ~100 events, ~7 sessions each, so "
                             "that most sessions are scored against baselines)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--fold", choices=("reference", "kernel"), default=None,
                        help="count the fold alone (decode excluded): the reference's loop "
                             "of step, or the compiled kernel's fold_batch")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.process, args.fold)
        return 0
    if args.records < 1 or args.users < 1:
        parser.error("--records and --users must be at least 1")
    trees = [t.resolve() for t in args.tree] or [ROOT]
    for tree in trees:
        if not any((tree / "streams" / f).is_file() for f in ("engine.py", "processing/engine.py")):
            parser.error(f"--tree {tree}: not a checkout of this project (no streams' engine)")
    what = f"the fold ({args.fold})" if args.fold else "the engine"
    print(f"| tree | commit | instructions per record through {what} ({args.records:,} "
          f"records, {args.users:,} users) |")
    print("|---|---|---:|")
    with tempfile.TemporaryDirectory(prefix="continuity-instructions-") as tmp:
        stream = Path(tmp) / "stream.pickle"
        build(stream, args.records, args.users, args.seed)
        for tree in trees:
            # numba's cache for the CPU callgrind shows, first: its kernels are compiled at
            # import, and the two measured runs, in parallel, would race to compile or load
            # them (a difference of 17,000-37,000 instructions a record either way).
            count(tree, stream, False, args.fold)
            with ThreadPoolExecutor(2) as pool:
                empty, full = pool.map(lambda p, t=tree: count(t, stream, p, args.fold),
                                       (False, True))
            print(_row(tree, (full - empty) / args.records), flush=True)
    print("\nreproduce: python bench/instructions.py "
          + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])))
    return 0


def _row(tree: Path, per_record: float) -> str:
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip() or "?"
    return f"| {tree} | `{commit}` | {per_record:,.0f} |"


if __name__ == "__main__":
    raise SystemExit(main())
