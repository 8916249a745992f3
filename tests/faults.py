"""Broker faults for tests: a TCP proxy to take the broker away and give it back, and a
loopback S3 (moto's server) for a durable embedded broker that can be restarted."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from streams.broker import free_loopback_port, wait_for_port


@dataclass
class TcpProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target``; :meth:`cut` drops every connection
    and stops listening (clients see the broker vanish), :meth:`restore` listens again."""

    port: int
    target: int
    _listener: socket.socket | None = None
    _conns: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def restore(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        for s in [*([listener] if listener else []), *conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def loopback_s3(bucket: str) -> Iterator[dict[str, str]]:
    """An S3 endpoint on loopback with ``bucket`` created; yields the broker's environment."""
    import boto3

    port = free_loopback_port()
    server = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_for_port("127.0.0.1", port, 30):
            raise RuntimeError("moto_server did not start")
        env = {"AWS_ENDPOINT": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_DEFAULT_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT"], aws_access_key_id="test",
                     aws_secret_access_key="test", region_name="us-east-1"
                     ).create_bucket(Bucket=bucket)
        yield env
    finally:
        proc.terminate()
        proc.wait(timeout=10)
