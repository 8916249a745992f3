"""The producer benchmark publishes the engine's own outputs each way and accounts for them."""

from __future__ import annotations

import re

from tests.bench import run_bench


def test_producer_cost_publishes_the_engines_outputs_each_way() -> None:
    out = run_bench("producer_cost.py", "--records", "3000", "--users", "30")
    head = re.search(r"^(?P<messages>[\d,]+) output messages of (?P<records>[\d,]+) records",
                     out, re.MULTILINE)
    assert head is not None, out
    assert int(head["records"].replace(",", "")) == 3000
    assert int(head["messages"].replace(",", "")) > 0  # checkpoints, re-attunement, responses
    rows = {m["label"]: m for m in re.finditer(
        r"^\| (?P<label>[^|]+?) \| (?P<cpu>[\d.]+) \| (?P<thread>[\d.]+) \| (?P<per_record>[\d.]+) "
        r"\| (?P<rate>[\d,]+) \|", out, re.MULTILINE)}
    # confluent-kafka is a development dependency, so all four ran and were timed.
    assert set(rows) == {"aiokafka send (the worker's)", "aiokafka send, acks gathered",
                         "aiokafka batch interface", "librdkafka (confluent-kafka)"}, out
    # The thread's CPU is part of the process's; getrusage counts the process in the
    # kernel's ticks, so the two may differ by a few milliseconds over the run's messages.
    slack = 0.05 + 1e6 * 0.01 / int(head["messages"].replace(",", ""))
    for row in rows.values():
        assert float(row["thread"]) > 0 and float(row["thread"]) <= float(row["cpu"]) + slack
    assert "reproduce: python bench/producer_cost.py --records 3000 --users 30" in out
