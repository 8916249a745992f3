"""The broker-latency benchmark reads every paced record with a plain consumer and reports it."""

from __future__ import annotations

import re

from tests.bench import run_bench


def test_broker_latency_reads_every_offered_record_and_times_it() -> None:
    out = run_bench("broker_latency.py", "--rate", "500", "--duration", "3", "--step", "1")
    row = re.search(r"^\| 500/s offered \(achieved \d+/s\) \| (?P<n>\d+) \| (?P<p50>\d+) \| "
                    r"(?P<p99>\d+) \| (?P<max>\d+) \|", out, re.MULTILINE)
    assert row is not None, out
    # Every offered record reached the consumer, each with a latency the clock can measure.
    assert int(row["n"]) == 1500
    assert 0 <= int(row["p50"]) <= int(row["p99"]) <= int(row["max"])
    timeline = re.findall(r"^ +\d+\.\d s  n= *(\d+)", out, re.MULTILINE)
    assert sum(int(n) for n in timeline) == 1500
    assert "reproduce: python bench/broker_latency.py --rate 500 --duration 3" in out
