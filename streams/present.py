"""Baselines as the review API and ``continuity-drift baselines`` show them (no Kafka here)."""

from __future__ import annotations

from typing import Any

from drift.baseline import AttunementBaseline, Baseline, SemanticBaseline
from streams.wire import model_dict


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
        "created_at": meta.created_at_s, "source_session": meta.source_session,
        "model": model_dict(meta.model),
        "drift_policy_id": meta.drift_policy_id, "mode": meta.mode.value,
        "expires_at": meta.expires_at_s,
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
