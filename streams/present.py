"""What the review API and ``continuity-drift baselines`` show, in one shape whichever source
they read (a worker's API or a stopped worker's DuckDB file); times are ISO 8601 UTC. No Kafka
and no web library here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drift.baseline import AttunementBaseline, Baseline, SemanticBaseline, UserBaselines
from drift.outputs import SessionSummary
from streams.edge.wire import iso, model_dict


def describe_baseline(b: Baseline, values: bool = True) -> dict[str, Any]:
    """One baseline version as a JSON-ready dict; ``values=False`` leaves out its contents.

    >>> from drift.baseline import SafetyBaseline, next_meta
    >>> from drift.model import BaselineKind, DriftConfig, Mode, ModelTriple
    >>> meta = next_meta(None, "u1", BaselineKind.SAFETY, 100.0, "s1",
    ...                  ModelTriple("m1", "t1", "bf16"), Mode.FULL, DriftConfig())
    >>> shown = describe_baseline(SafetyBaseline(meta, "gate-1", "policy-1", "consent-1"))
    >>> shown["kind"], shown["version"], shown["model"]["model_version"], shown["mode"]
    ('safety', 1, 'm1', 'continuity_full')
    >>> shown["fields"]["gate_config_id"]
    'gate-1'
    >>> "fields" in describe_baseline(SafetyBaseline(meta, "g", "p", "c"), values=False)
    False
    """
    meta = b.meta
    out: dict[str, Any] = {
        "kind": meta.kind.value, "baseline_id": meta.baseline_id, "version": meta.version,
        "created_at": iso(meta.created_at_s), "source_session": meta.source_session,
        "model": model_dict(meta.model),
        "drift_policy_id": meta.drift_policy_id, "mode": meta.mode.value,
        "expires_at": iso(meta.expires_at_s),
    }
    if values:
        if isinstance(b, AttunementBaseline):
            out["features"] = list(b.features)
            out["sessions"] = len(b.sessions)
        elif isinstance(b, SemanticBaseline):
            out["items"] = [{"commitment_id": c, "kind": k} for c, k in b.items]
        else:
            out["fields"] = {"gate_config_id": b.gate_config_id,
                             "drift_policy_id": b.drift_policy_id,
                             "consent_state_id": b.consent_state_id}
    return out


def baselines_view(user_id: str, current: UserBaselines) -> dict[str, Any] | None:
    """A user's current version of each kind, with values; None if the user has none."""
    shown = [describe_baseline(b) for b in (current.attunement, current.semantic, current.safety)
             if b is not None]
    return {"user_id": user_id, "baselines": shown} if shown else None


def history_view(user_id: str, versions: Sequence[Baseline],
                 tombstones: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Every stored version's metadata (no values) and the tombstones; None if neither."""
    if not versions and not tombstones:
        return None
    return {"user_id": user_id, "versions": [describe_baseline(b, values=False) for b in versions],
            "tombstones": [dict(t, erased_at=iso(t["erased_at"])) for t in tombstones]}


def session_view(s: SessionSummary) -> dict[str, Any]:
    return {"user_id": s.user_id, "session_id": s.session_id, "mode": s.mode.value,
            "started_at": iso(s.started_s),
            "ended_at": iso(s.ended_s) if s.ended_s is not None else None,
            "turns": s.turns, "max_effective_tier": s.max_tier.label, "scores": s.scores,
            "model_change": s.model_change, "reattune_quality_score": s.reattune_quality}


def users_view(entries: Sequence[dict[str, Any]], total: int, limit: int,
               scope: str) -> dict[str, Any]:
    """Users with baselines (latest version per kind), at most ``limit`` of ``total``.

    >>> view = users_view([{"user_id": "u1", "versions": {"safety": 1},
    ...                     "last_created_at": 0.0}], 3, 1, "data directory ./data")
    >>> view["users"][0]["last_created_at"], view["shown"], view["total"], view["truncated"]
    ('1970-01-01T00:00:00.000000Z', 1, 3, True)
    """
    users = [dict(e, last_created_at=iso(e["last_created_at"])) for e in entries[:limit]]
    return {"scope": scope, "users": users, "shown": len(users), "total": total,
            "limit": limit, "truncated": total > len(users)}
