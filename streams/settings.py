"""Worker settings: command-line flags, environment variables and a TOML config file."""

from __future__ import annotations

import os
import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from drift.model import DriftConfig

ENV_PREFIX = "CONTINUITY_"


class SettingsError(ValueError):
    """A setting is missing or malformed; the message says which and how to fix it."""


@dataclass(frozen=True)
class Settings:
    broker: str | None = None
    data_dir: Path = Path("./data")
    web_port: int = 6066
    web_host: str = "127.0.0.1"
    advertised_url: str | None = None
    app_id: str = "continuity-drift"
    partitions: int = 4
    review_token: str | None = None
    batch_max: int = 500
    batch_within_s: float = 0.05
    fetch_wait_s: float = 0.02
    checkpoint_interval_s: float = 5.0
    """How often a checkpoint commits what changed (also on revoke, after an erasure and on
    shutdown). A user active throughout is written once per checkpoint: once a second cost
    one worker 8% of its rate against every 5 s; a crash replays at most this much of the
    log (docs/design.md)."""
    timer_interval_s: float = 5.0
    quiet_after_s: float = 30.0
    """A partition with no record for this long (wall clock) gets a tick record when a
    user on it has something due by its event time moved on by the wall clock."""
    tick_lateness_s: float = 3600.0
    """A busy partition gets a tick record at its newest event time less this much when a
    user on it has something due by then: how far (event time) a user's events may lag the
    partition's before an idle session of theirs is closed."""
    session_timeout_s: float = 6.0
    heartbeat_interval_s: float = 1.0
    rebalance_timeout_s: float = 10.0
    log_level: str = "warning"
    history_versions: int = 8
    history_sessions: int = 64
    compression: str = "zstd"
    """The codec of every batch the worker produces (outputs and changelog): one of
    :data:`CODECS`."""
    producer: str = "aiokafka"
    """The client that publishes the outputs and the changelog: ``aiokafka`` or
    ``librdkafka`` (confluent-kafka), which costs the worker's loop about a third of the CPU
    per message (docs/performance.md)."""
    drift: DriftConfig = field(default_factory=DriftConfig)

    @property
    def url(self) -> str:
        """Where other workers reach this one's HTTP endpoints (review API forwarding)."""
        if self.advertised_url:
            return self.advertised_url.rstrip("/")
        host = self.web_host
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        return f"http://{host}:{self.web_port}"


_SIMPLE = {"broker": str, "data_dir": Path, "web_port": int, "web_host": str,
           "advertised_url": str, "app_id": str,
           "partitions": int, "review_token": str, "batch_max": int, "batch_within_s": float,
           "fetch_wait_s": float, "checkpoint_interval_s": float, "timer_interval_s": float,
           "quiet_after_s": float, "tick_lateness_s": float, "session_timeout_s": float,
           "heartbeat_interval_s": float, "rebalance_timeout_s": float, "log_level": str,
           "history_versions": int, "history_sessions": int, "compression": str,
           "producer": str}

#: The codecs Kafka defines, as the worker's ``compression`` setting names them.
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: The clients the worker's ``producer`` setting names.
PRODUCERS = ("aiokafka", "librdkafka")
#: The settings that take one of a few values: their values, and what one is.
_CHOICES = {"compression": (CODECS, "a codec"), "producer": (PRODUCERS, "a client the worker has")}


def _coerce(name: str, kind: type, raw: Any) -> Any:
    try:
        return kind(raw)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"setting {name!r}: cannot read {raw!r} as {kind.__name__}") from exc


def drift_config(values: dict[str, Any]) -> DriftConfig:
    """A :class:`DriftConfig` with ``values`` over the defaults; unknown keys are an error."""
    known = {f.name: f for f in fields(DriftConfig)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise SettingsError(f"unknown [drift] setting(s) {unknown}; known: {sorted(known)}")
    base = DriftConfig()
    typed = {k: _coerce(k, type(getattr(base, k)), v) for k, v in values.items()}
    return replace(base, **typed)


def load_settings(config_file: Path | None, overrides: dict[str, Any]) -> Settings:
    """Defaults, then the TOML file, then ``CONTINUITY_*`` environment, then flags."""
    values: dict[str, Any] = {}
    drift_values: dict[str, Any] = {}
    if config_file is not None:
        try:
            data = tomllib.loads(Path(config_file).read_text())
        except FileNotFoundError as exc:
            raise SettingsError(f"config file {config_file} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"config file {config_file} is not valid TOML: {exc}") from exc
        drift_values = dict(data.pop("drift", {}))
        worker = dict(data.pop("worker", {}))
        if data:
            raise SettingsError(f"config file: unknown section(s) {sorted(data)}; "
                                "use [worker] and [drift]")
        unknown = sorted(set(worker) - set(_SIMPLE))
        if unknown:
            raise SettingsError(f"unknown [worker] setting(s) {unknown}; known: {sorted(_SIMPLE)}")
        values.update(worker)
    for name in _SIMPLE:
        env = os.environ.get(ENV_PREFIX + name.upper())
        if env:
            values[name] = env
    values.update({k: v for k, v in overrides.items() if v is not None})
    typed = {k: _coerce(k, _SIMPLE[k], v) for k, v in values.items()}
    for name, (choices, noun) in _CHOICES.items():
        if name in typed and typed[name] not in choices:
            raise SettingsError(f"setting {name!r}: {typed[name]!r} is not {noun}; "
                                f"use one of {', '.join(choices)}")
    return Settings(**typed, drift=drift_config(drift_values))
