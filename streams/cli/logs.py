"""The JSON log lines every command writes on stderr, and the Kafka clients' held to one a
message per 30 s."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per line; never includes user or session ids."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
        for key in ("partitions", "bootstrap", "port", "topics", "offset", "error_type",
                    "generation", "records", "bytes", "deltas", "seconds", "worker",
                    "exit_code", "repeated", "last_offset", "reason", "states", "steps_ms"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(out)


class OncePer(logging.Filter):
    """Lets a message (by logger and template) through once per ``seconds``; the next one
    that passes says how many were held back. A client retrying an unreachable broker
    every 100 ms then writes a line every 30 s, not thousands."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        last = self._last.get(key)
        if last is not None and record.created - last < self.seconds:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = record.created
        held = self._held.pop(key, 0)
        if held:
            record.repeated = held
        return True


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("continuity_drift")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    quiet = logging.StreamHandler(sys.stderr)
    quiet.setFormatter(JsonFormatter())
    quiet.addFilter(OncePer(30.0))
    for name in ("aiokafka", "kafka"):  # the Kafka clients: structured, and once per 30 s
        client = logging.getLogger(name)
        client.handlers[:] = [quiet]
        client.setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))
        client.propagate = False
