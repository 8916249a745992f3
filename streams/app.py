"""The faust worker: the agent on ``fhr.events``, the timer, and the HTTP endpoints."""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import os
import time
from collections.abc import Awaitable
from typing import Any

import faust
from faust.types import TP
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from baselines.store import BaselineStore
from drift.baseline import derive_id
from streams import topics
from streams.engine import Engine, PendingBatch, Record
from streams.metrics import Metrics, build_metrics
from streams.present import describe_baseline
from streams.settings import Settings
from streams.wire import payload

log = logging.getLogger("continuity_drift.worker")

NOT_FOUND = {"error": "not_found",
             "detail": "no such user or session, or not visible with this token"}


class Worker:
    """Owns the faust app, the engine and the store for one worker process."""

    def __init__(self, settings: Settings, broker: str) -> None:
        self.settings = settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.registry = CollectorRegistry()
        self.metrics: Metrics = build_metrics(self.registry)
        self.store = BaselineStore(settings.data_dir / "continuity.duckdb")
        self.engine = Engine(self.store, settings.drift, self.metrics)
        self.lock = asyncio.Lock()
        self.ready = False
        self.processing = False
        self.app = faust.App(
            settings.app_id,
            broker=f"kafka://{broker}",
            store="memory://",
            datadir=str(settings.data_dir / "faust"),
            web_port=settings.web_port,
            web_bind=settings.web_host,
            web_host=settings.web_host,
            topic_allow_declare=False,
            topic_disable_leader=True,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=settings.session_timeout_s,
            broker_heartbeat_interval=settings.heartbeat_interval_s,
            broker_rebalance_timeout=settings.rebalance_timeout_s,
            broker_commit_every=settings.batch_max,
            broker_commit_interval=1.0,
            stream_wait_empty=False,
            web_in_thread=False,
            producer_acks=-1,
        )
        self.source = self.app.topic(topics.INPUT, key_serializer="raw", value_serializer="raw")
        self._wire()

    # ------------------------------------------------------------------ Kafka

    def _wire(self) -> None:
        app = self.app
        settings = self.settings

        @app.agent(self.source, name="fhr-events")
        async def process(stream: Any) -> None:
            self.processing = True
            async for events in stream.take_events(settings.batch_max,
                                                   within=settings.batch_within_s):
                records = [Record(e.message.partition, e.message.offset, e.message.key,
                                  e.message.value, e.message.timestamp or time.time())
                           for e in events]
                await self._run(functools.partial(self.engine.process, records))

        @app.timer(interval=settings.timer_interval_s)  # type: ignore[untyped-decorator]
        async def sweep() -> None:
            if self.ready:
                await self._run(self.engine.tick)
            self._update_lag()

        app.on_partitions_assigned.connect(self._on_assigned)  # type: ignore[arg-type]
        app.on_partitions_revoked.connect(self._on_revoked)  # type: ignore[arg-type]
        self._routes()

    async def _on_assigned(self, sender: Any, assigned: set[TP], **_: Any) -> None:
        parts = {tp.partition for tp in assigned if tp.topic == topics.INPUT}
        async with self.lock:
            self.engine.assign(parts)
        self.ready = bool(self.engine.partitions)
        self.metrics.worker_ready.set(1 if self.ready else 0)
        log.info("partitions assigned", extra={"partitions": sorted(parts)})

    async def _on_revoked(self, sender: Any, revoked: set[TP], **_: Any) -> None:
        parts = {tp.partition for tp in revoked if tp.topic == topics.INPUT}
        async with self.lock:
            self.engine.revoke(parts)
        log.info("partitions revoked", extra={"partitions": sorted(parts)})

    async def _run(self, work: Any) -> Any:
        """Process under the lock, publish, then commit; a failure stops the process.

        Faust acknowledges a batch's records once this returns, so on any failure
        the process exits at once: the stored offsets then decide what is replayed.
        """
        async with self.lock:
            try:
                result = work()
                batch: PendingBatch = result[0] if isinstance(result, tuple) else result
                await self._publish(batch)
                self.store.commit_batch(batch.write)
                if batch.erased:
                    self.store.compact()
                return result
            except Exception:
                log.exception("batch failed; exiting so the batch is replayed on restart")
                logging.shutdown()
                os._exit(70)

    async def _publish(self, batch: PendingBatch) -> None:
        producer = self.app.producer
        futures: list[Awaitable[Any]] = []
        for msg in batch.messages:
            futures.append(await producer.send(msg.topic, msg.key, msg.value, None, None, None))
        if futures:
            await asyncio.gather(*futures)
            now = time.time()
            for ts in batch.source_timestamps:
                self.metrics.end_to_end_latency.observe(max(0.0, now - ts))

    def _update_lag(self) -> None:
        consumer = self.app.consumer
        for p in self.engine.partitions:
            tp = TP(topics.INPUT, p)
            try:
                high = consumer.highwater(tp)
            except (KeyError, AttributeError):
                continue
            if high is None:
                continue
            behind = max(0, int(high) - self.engine.next_offsets.get(p, 0))
            self.metrics.consumer_lag.labels(partition=str(p)).set(behind)

    # ------------------------------------------------------------------ HTTP

    def _routes(self) -> None:
        app = self.app
        worker = self

        @app.page("/metrics")
        class MetricsView(View):
            async def get(self, request: Request) -> Response:
                return self.bytes(generate_latest(worker.registry),
                                  content_type=CONTENT_TYPE_LATEST.split(";")[0])

        @app.page("/healthz")
        class Health(View):
            async def get(self, request: Request) -> Response:
                return self.json({"status": "ok"})

        @app.page("/readyz")
        class Ready(View):
            async def get(self, request: Request) -> Response:
                ok = worker.ready and worker.processing
                return self.json({"ready": ok, "partitions": sorted(worker.engine.partitions)},
                                 status=200 if ok else 503)

        @app.page("/v1/users/{user_id}/baselines")
        class Baselines(View):
            async def get(self, request: Request, user_id: str) -> Response:
                denied = worker.authorize(request)
                if denied is not None:
                    return self.json(denied[0], status=denied[1])
                current = worker.store.user_baselines(user_id)
                metas = current.metas()
                if not metas:
                    return self.json(NOT_FOUND, status=404)
                return self.json({"user_id": user_id,
                                  "baselines": [describe_baseline(b) for b in
                                                (current.attunement, current.semantic,
                                                 current.safety) if b is not None]})

        @app.page("/v1/users/{user_id}/baselines/history")
        class History(View):
            async def get(self, request: Request, user_id: str) -> Response:
                denied = worker.authorize(request)
                if denied is not None:
                    return self.json(denied[0], status=denied[1])
                versions, tombstones = worker.store.history(user_id)
                if not versions and not tombstones:
                    return self.json(NOT_FOUND, status=404)
                return self.json({"user_id": user_id,
                                  "versions": [describe_baseline(b, values=False) for b in versions],
                                  "tombstones": tombstones})

        @app.page("/v1/users/{user_id}/sessions/{session_id}")
        class Session(View):
            async def get(self, request: Request, user_id: str, session_id: str) -> Response:
                denied = worker.authorize(request)
                if denied is not None:
                    return self.json(denied[0], status=denied[1])
                summary = (worker.engine.open_session(user_id, session_id)
                           or worker.store.session(user_id, session_id))
                if summary is None:
                    return self.json(NOT_FOUND, status=404)
                return self.json({
                    "user_id": summary.user_id, "session_id": summary.session_id,
                    "mode": summary.mode.value, "started_at": summary.started_s,
                    "ended_at": summary.ended_s, "turns": summary.turns,
                    "max_effective_tier": summary.max_tier.label, "scores": summary.scores,
                    "model_change": summary.model_change,
                    "reattune_quality_score": summary.reattune_quality})

        @app.page("/v1/users/{user_id}/erase")
        class Erase(View):
            async def post(self, request: Request, user_id: str) -> Response:
                denied = worker.authorize(request)
                if denied is not None:
                    return self.json(denied[0], status=denied[1])
                request_id = request.headers.get("Idempotency-Key") or request.query.get(
                    "request_id") or derive_id("api-erase", user_id)
                if len(request_id) > 128:
                    return self.json({"error": "bad_request",
                                      "detail": "request id longer than 128 characters"},
                                     status=400)
                _, receipt = await worker._run(
                    lambda: worker.engine.erase_user(user_id, request_id))
                return self.json(payload(receipt), status=200)

    def authorize(self, request: Request) -> tuple[dict[str, str], int] | None:
        """None when the bearer token matches; else the refusal body and status."""
        token = self.settings.review_token
        if not token:
            return ({"error": "review_api_disabled",
                     "detail": "no review token is configured (set CONTINUITY_REVIEW_TOKEN)"},
                    403)
        header = request.headers.get("Authorization", "")
        given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if not given or not hmac.compare_digest(given.encode(), token.encode()):
            return NOT_FOUND, 404
        return None

    def close(self) -> None:
        self.store.close()
