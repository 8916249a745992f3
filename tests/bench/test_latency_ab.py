"""The latency A/B report: each round of both trees, the medians and the verdicts."""

from __future__ import annotations

from typing import Any

from bench.latency import report_latency_ab


def _run(p50_ms: float, p99_ms: float) -> dict[str, Any]:
    return {"rate": 10000.0, "exact_per_record": {"p50": p50_ms / 1e3, "p99": p99_ms / 1e3}}


def test_the_rounds_their_medians_and_the_goal_of_each_tree() -> None:
    rows = [{"rate": 10000.0, "round": 1, "this": _run(20, 80), "other": _run(25, 200)},
            {"rate": 10000.0, "round": 2, "this": _run(22, 100), "other": _run(30, 400)},
            {"rate": 10000.0, "round": 3, "this": _run(24, 300), "other": _run(35, 300)}]
    floors = [{"rate": 10000.0, "latency_ms": {"p99": 27.0}}]
    text = "\n".join(report_latency_ab(rows, "env PYTHONPATH=../before python -m streams.cli",
                                        floors))
    assert "latency A/B against: env PYTHONPATH=../before python -m streams.cli" in text
    assert "| 10000 | 1 | 20 | 80 | 25 | 200 | 0.40 |" in text
    assert "| 10000 | median | 22 | 100 | 30 | 300 | 0.33 |" in text
    assert ("10000/s: median p99 this 100 ms, other 300 ms; goal p99 < 250 ms: this met, "
            "other NOT met (the broker's floor: p99 27 ms)") in text


def test_a_failed_run_is_shown_and_the_others_still_count() -> None:
    rows = [{"rate": 5000.0, "round": 1, "this": {"rate": 5000.0, "error": "worker died"},
             "other": _run(20, 50)}]
    lines = report_latency_ab(rows, "cmd")
    assert any(line.startswith("| 5000 | 1 |") and "nan" in line.lower() for line in lines)
    assert report_latency_ab([], "cmd") == []
