"""The broker-latency benchmark reads every paced record with a plain consumer and reports it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_broker_latency_reads_every_offered_record_and_times_it() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "broker_latency.py"), "--rate", "500",
         "--duration", "3", "--step", "1"], cwd=ROOT, capture_output=True, text=True,
        check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    row = re.search(r"^\| 500/s offered \(achieved \d+/s\) \| (?P<n>\d+) \| (?P<p50>\d+) \| "
                    r"(?P<p99>\d+) \| (?P<max>\d+) \|", done.stdout, re.MULTILINE)
    assert row is not None, done.stdout
    # Every offered record reached the consumer, each with a latency the clock can measure.
    assert int(row["n"]) == 1500
    assert 0 <= int(row["p50"]) <= int(row["p99"]) <= int(row["max"])
    timeline = re.findall(r"^ +\d+\.\d s  n= *(\d+)", done.stdout, re.MULTILINE)
    assert sum(int(n) for n in timeline) == 1500
    assert "reproduce: python bench/broker_latency.py --rate 500 --duration 3" in done.stdout
