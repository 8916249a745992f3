"""Whether the broker is reachable, and work repeated until it lets it finish.

A worker whose broker is away stays up (degraded): every piece of work that needs the broker
is safe to repeat and is repeated with backoff (:meth:`BrokerWatch.until_done`), and a probe
asks for metadata every few seconds so that ``/healthz``, ``/readyz`` and
``continuity_broker_reachable`` follow (docs/design.md, "Broker faults are waited out").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import kafka.errors
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from streams.metrics import Metrics

log = logging.getLogger("continuity_drift.worker")

#: Faults of the broker or the network, not of a record or the store: the worker waits them
#: out (degraded) and tries again; anything else still ends the process.
BROKER_FAULTS = (KafkaError, kafka.errors.KafkaError, OSError, TimeoutError)
#: How often the worker asks the broker for metadata to tell whether it is reachable.
PROBE_INTERVAL_S = 2.0
RETRY_MAX_S = 5.0

T = TypeVar("T")


class BrokerWatch:
    """The broker's reachability as the worker last saw it."""

    def __init__(self, metrics: Metrics, bootstrap: str) -> None:
        self.metrics = metrics
        self.bootstrap = bootstrap
        self.ok = True
        """Whether the last metadata probe was answered."""
        self.waiting_on: str | None = None
        """The work waiting for the broker, if any."""

    async def until_done(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` until the broker lets it finish; each attempt must be safe to repeat."""
        delay = 0.5
        while True:
            try:
                result = await attempt()
            except BROKER_FAULTS as exc:
                self.wait_on(what, [exc])
                await asyncio.sleep(delay)
                delay = min(2 * delay, RETRY_MAX_S)
                continue
            self.waiting_on = None
            return result

    def wait_on(self, what: str, results: list[Any]) -> None:
        if self.waiting_on != what:
            kinds = sorted({type(r).__name__ for r in results if isinstance(r, BaseException)})
            log.warning("broker unavailable while %s; retrying", what,
                        extra={"error_type": ",".join(kinds)})
        self.waiting_on = what
        self.metrics.broker_reachable.set(0)

    async def watch(self, producer: AIOKafkaProducer | None) -> None:
        """Ask the broker for metadata every few seconds: /healthz and /readyz follow."""
        assert producer is not None
        while True:
            try:
                await asyncio.wait_for(producer.client.fetch_all_metadata(), PROBE_INTERVAL_S)
                ok = True
            except BROKER_FAULTS:
                ok = False
            if ok != self.ok:
                log.warning("broker reachable again" if ok else "broker unreachable",
                            extra={"bootstrap": self.bootstrap})
            self.ok = ok
            self.metrics.broker_reachable.set(1 if ok and self.waiting_on is None else 0)
            await asyncio.sleep(PROBE_INTERVAL_S)

    def health(self) -> dict[str, Any]:
        if self.ok and self.waiting_on is None:
            return {"status": "ok"}
        return {"status": "degraded",
                "detail": f"broker unavailable ({self.waiting_on or 'no answer to metadata'});"
                          " retrying, nothing is lost"}
