"""The worker's HTTP endpoints on aiohttp: metrics, health, readiness and the review API."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from baselines.store import BaselineStore
from drift.baseline import derive_id
from drift.outputs import ErasureReceipt, SessionSummary
from streams.edge.wire import payload
from streams.present import baselines_view, history_view, session_view, users_view

NOT_FOUND = {"error": "not_found",
             "detail": "no such user or session, or not visible with this token"}
DISABLED = {"error": "review_api_disabled",
            "detail": "no review token is configured (set CONTINUITY_REVIEW_TOKEN)"}
MOVING = {"error": "partition_moving",
          "detail": "this user's partition is moving between workers; retry in a few seconds"}
UNREACHABLE = {"error": "owner_unreachable",
               "detail": "the worker that owns this user's partition did not answer; retry"}

#: Set on a request one worker forwards to another: the receiver answers it itself.
FORWARDED = "X-Continuity-Forwarded"
#: What a forwarded request carries over and what its answer brings back.
_PASSED_ON = ("Authorization", "Idempotency-Key")
FORWARD_TIMEOUT_S = 10.0


class ReviewHost(Protocol):
    """What the endpoints need from a worker."""

    registry: CollectorRegistry
    store: BaselineStore
    review_token: str | None

    def readiness(self) -> tuple[bool, dict[str, Any]]: ...

    def health(self) -> dict[str, Any]: ...

    def owner_of(self, user_id: str) -> str | None: ...

    def open_session(self, user_id: str, session_id: str) -> SessionSummary | None: ...

    async def erase_user(self, user_id: str, request_id: str) -> ErasureReceipt: ...


def authorize(token: str | None, request: web.Request) -> web.Response | None:
    """None when the bearer token matches; else the refusal (an unknown token looks like
    an unknown user)."""
    if not token:
        return web.json_response(DISABLED, status=403)
    header = request.headers.get("Authorization", "")
    given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        return web.json_response(NOT_FOUND, status=404)
    return None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(host: ReviewHost) -> web.Application:
    """The aiohttp application of one worker."""

    def guarded(handler: Handler) -> Handler:
        """The token first; then the user's owner answers: this worker, or the one it
        forwards to (a forwarded request is never forwarded again)."""
        async def run(request: web.Request) -> web.StreamResponse:
            denied = authorize(host.review_token, request)
            if denied is not None:
                return denied
            owner = host.owner_of(request.match_info["user_id"])
            if owner is None:
                return await handler(request)
            if owner == "" or FORWARDED in request.headers:
                return web.json_response(MOVING, status=503, headers={"Retry-After": "2"})
            return await forward(request, owner)
        return run

    async def forward(request: web.Request, owner: str) -> web.StreamResponse:
        headers = {k: request.headers[k] for k in _PASSED_ON if k in request.headers}
        headers[FORWARDED] = "1"
        timeout = ClientTimeout(total=FORWARD_TIMEOUT_S)
        try:
            async with ClientSession(timeout=timeout) as client, client.request(
                    request.method, owner + request.path_qs, headers=headers,
                    data=await request.read()) as answer:
                body = await answer.read()
                return web.Response(body=body, status=answer.status,
                                    content_type=answer.content_type)
        except (ClientError, TimeoutError):
            return web.json_response(UNREACHABLE, status=503, headers={"Retry-After": "2"})

    async def metrics(_: web.Request) -> web.StreamResponse:
        return web.Response(body=generate_latest(host.registry),
                            content_type=CONTENT_TYPE_LATEST.split(";")[0])

    async def healthz(_: web.Request) -> web.StreamResponse:
        return web.json_response(host.health())  # 200 also when degraded: the process is fine

    async def readyz(_: web.Request) -> web.StreamResponse:
        ok, detail = host.readiness()
        return web.json_response({"ready": ok, **detail}, status=200 if ok else 503)

    async def baselines(request: web.Request) -> web.StreamResponse:
        user_id = request.match_info["user_id"]
        view = baselines_view(user_id, host.store.user_baselines(user_id))
        return web.json_response(view) if view else web.json_response(NOT_FOUND, status=404)

    async def history(request: web.Request) -> web.StreamResponse:
        user_id = request.match_info["user_id"]
        view = history_view(user_id, *host.store.history(user_id))
        return web.json_response(view) if view else web.json_response(NOT_FOUND, status=404)

    async def session(request: web.Request) -> web.StreamResponse:
        user_id, session_id = request.match_info["user_id"], request.match_info["session_id"]
        summary = host.open_session(user_id, session_id) or host.store.session(user_id,
                                                                              session_id)
        if summary is None:
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response(session_view(summary))

    async def users(request: web.Request) -> web.StreamResponse:
        denied = authorize(host.review_token, request)
        if denied is not None:
            return denied
        try:
            limit = int(request.query.get("limit", "100"))
        except ValueError:
            limit = 0
        if limit < 1:
            return web.json_response({"error": "bad_request",
                                      "detail": "limit must be a whole number of at least 1"},
                                     status=400)
        entries, total = host.store.list_users(limit)
        _, detail = host.readiness()
        scope = f"this worker's partitions {detail.get('partitions', [])}"
        return web.json_response(users_view(entries, total, limit, scope))

    async def erase(request: web.Request) -> web.StreamResponse:
        user_id = request.match_info["user_id"]
        request_id = (request.headers.get("Idempotency-Key") or request.query.get("request_id")
                      or derive_id("api-erase", user_id))
        if len(request_id) > 128:
            return web.json_response({"error": "bad_request",
                                      "detail": "request id longer than 128 characters"},
                                     status=400)
        return web.json_response(payload(await host.erase_user(user_id, request_id)))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/users", users)
    app.router.add_get("/v1/users/{user_id}/baselines", guarded(baselines))
    app.router.add_get("/v1/users/{user_id}/baselines/history", guarded(history))
    app.router.add_get("/v1/users/{user_id}/sessions/{session_id}", guarded(session))
    app.router.add_post("/v1/users/{user_id}/erase", guarded(erase))
    return app
