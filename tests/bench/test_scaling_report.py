"""The scaling report: the rate while every worker had records, and the machine's ceiling."""

from __future__ import annotations

import os
from typing import Any

from bench.throughput_report import _report_throughput


def _one() -> dict[str, Any]:
    return {"records": 1000, "rate": 20000.0, "seconds": 0.05, "worker_cpu_s": 0.05,
            "broker_cpu_s": 0.004, "cpu_records": 1000, "outputs": 10.0}


def test_the_run_while_both_workers_had_records_and_what_the_machine_left_them() -> None:
    cpus = os.cpu_count() or 1
    two = {"workers": 2, "rate": 32000.0, "seconds": 6.0, "records": 1000, "ready_s": 5.0,
           "worker_cpu_s": 1.7 * 6.0, "broker_cpu_s": 0.1 * 6.0, "cpu_records": 1000,
           "machine_busy_s": 1.9 * 6.0, "machine_idle_s": (cpus - 1.9) * 6.0,
           "busy": {"rate": 36000.0, "seconds": 5.0, "shares": [0.48, 0.52]}}
    text = "\n".join(_report_throughput({"worker": _one(), "scaling": [two]}))
    assert "c2/c = 1.60x one worker; SPEC goal >= 1.8x: NOT met" in text
    assert ("while all 2 had records (5.0s): 36000 records/s = 1.80x one worker (goal 1.8x: "
            "met); the workers' shares of the records were 48/52%") in text
    # one worker used 0.05 s x 20,000/s / 1,000 records = 1.00 core; the broker 0.10 and the
    # rest 0.10 leave cpus - 0.2 cores
    assert (f"workers 1.70 cores, broker 0.10, the rest 0.10; one worker alone used 1.00 "
            f"cores, so at its CPU per record 2 workers reach at most {cpus - 0.2:.2f}x here"
            ) in text


def test_no_busy_window_and_no_machine_figures_add_no_lines() -> None:
    two = {"workers": 2, "rate": 30000.0, "seconds": 1.0, "records": 1000, "ready_s": 5.0,
           "worker_cpu_s": 1.0, "broker_cpu_s": 0.1, "cpu_records": 1000,
           "busy": {"rate": float("nan"), "seconds": float("nan"), "shares": []}}
    text = "\n".join(_report_throughput({"worker": _one(), "scaling": [two]}))
    assert "c2/c = 1.50x" in text
    assert "had records" not in text and "busy:" not in text


def test_a_run_shorter_than_three_checkpoint_intervals_says_its_rate_leaves_them_out() -> None:
    short = "\n".join(_report_throughput({"worker": _one(),
                                          "settings": {"checkpoint_interval_s": 5.0}}))
    assert ("note: the run lasted 0.1s, under three checkpoint intervals (5s): its rate leaves "
            "out most of what checkpoints cost; about 300000 records or more") in short
    one = _one() | {"seconds": 15.0}
    long = "\n".join(_report_throughput({"worker": one, "settings": {"checkpoint_interval_s": 5.0}}))
    assert "under three checkpoint intervals" not in long
