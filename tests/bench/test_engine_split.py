"""The engine split benchmark runs on this tree's engine and accounts for every part."""

from __future__ import annotations

import re

from tests.bench import run_bench


def test_engine_split_times_every_part_of_a_real_run() -> None:
    out = run_bench("engine_split.py", "--records", "6000", "--users", "40")
    rows = {m["label"].lstrip(". ").strip(): m
            for m in re.finditer(r"^\| (?P<label>[^|]+) \| (?P<us>[\d,.-]+) \| "
                                 r"(?P<share>[\d.-]+)% \| (?P<calls>\d*) \|",
                                 out, re.MULTILINE)}
    assert "6,000 records through the engine" in out
    # Every batch went through the decode and the kernel; some events were handed off.
    assert int(rows["decode"]["calls"]) == 12  # 6,000 records in batches of 500
    assert int(rows["fold (fold_batch)"]["calls"]) == 12
    assert 0 < int(rows["hand-offs (drift.fold.step)"]["calls"]) < 6000
    # The simulated users reach checkpoints, session ends and re-attunement.
    for part in ("scoring at checkpoints", "attunement test",
                 "the re-attunement turn's re-attunement (reattune)", "session start",
                 "turns the kernel scored", "event columns (EventColumns.of)",
                 "their state from the slot (scored_at)",
                 "session starts the kernel took (_start)",
                 "their session written into the slot (open_session)",
                 "session ends the kernel took (_end)", "their baseline fold",
                 "their state from the slot (closing_state)",
                 "their state loaded into the columns (put_at)",
                 "state built from the columns (state_at)",
                 "state loaded into the columns (put_at)"):
        assert int(rows[part]["calls"]) > 0, part
    # One checkpoint write (every 5,000 records), split into its parts.
    assert int(rows["checkpoint write"]["calls"]) == 1
    for part in ("the staged states built (Memory.take)", "their rows (rows_of)",
                 "the states' snapshots (state_table)",
                 "the new baseline versions (baseline_table)",
                 "the DuckDB transaction (apply_rows)"):
        assert int(rows[part]["calls"]) == 1, part
    # Nested parts are inside their parent and never overlap (a call is counted in one row
    # only: the session end's own conversions are not also the hand-offs'), so no "rest" is
    # negative, however the machine's clock runs.
    for label, row in rows.items():
        if label.startswith("the rest of"):
            assert float(row["us"].replace(",", "")) >= 0.0, label
    assert "reproduce: python bench/engine_split.py --records 6000 --users 40" in out
