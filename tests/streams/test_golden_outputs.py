"""The bytes on every output topic for a fixed event log stay what they were.

``tests/streams/golden_outputs.jsonl`` holds the messages (topic, key, value) the
engine published for the golden log when the file was written. Regenerate it only
for an intended change of the output format:
``CONTINUITY_GOLDEN_WRITE=1 python -m pytest tests/streams/test_golden_outputs.py``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from tests.streams.golden import GOLDEN, run_engine


def _lines(messages: list[tuple[str, bytes, bytes]]) -> list[str]:
    return [json.dumps({"topic": t, "key": k.decode(), "value": v.decode()}) for t, k, v in
            messages]


def test_outputs_of_the_golden_log_are_byte_identical(tmp_path: Path) -> None:
    messages = list(run_engine(tmp_path))
    lines = _lines(messages)
    if os.environ.get("CONTINUITY_GOLDEN_WRITE") == "1":
        GOLDEN.write_text("\n".join(lines) + "\n")
    want = GOLDEN.read_text().splitlines()
    topics = Counter(json.loads(line)["topic"] for line in want)
    assert set(topics) == {"drift.scores", "drift.responses", "continuity.escalations",
                           "governance.violations", "continuity.erasure_receipts",
                           "fhr.deadletter"}, topics
    for i, (got, expected) in enumerate(zip(lines, want)):
        assert got == expected, f"message {i} differs"
    assert len(lines) == len(want)
