"""The output topics' messages as ``msgspec.Struct`` types: SPEC section 7's shapes, with
their keys in order.

A struct's fields are encoded in the order they are declared, an inherited struct's first;
a field left ``UNSET`` is left out and one that is None is ``null``. ``streams.edge.wire``
builds these from the core's outputs and encodes them; the key order is part of the
format (a golden test holds the bytes).
"""

from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType

SCHEMA = "drift/1"


# One Struct per JSON object of SPEC section 7, alike in form: each holds its own keys, in
# the order they are encoded.
class Ref(Struct, frozen=True):
    baseline_id: str
    version: int


class Model(Struct, frozen=True):
    model_version: str
    tokenizer_id: str
    precision_tag: str
    adapter_id: str | None


class Envelope(Struct, frozen=True, kw_only=True):
    """What every output message starts with."""

    schema: str = SCHEMA
    id: str
    user_id: str
    session_id: str | UnsetType = UNSET
    event_ts: str


class Feature(Struct, frozen=True):
    feature: str
    z: float
    p_value: float
    direction: str


class PooledStatistic(Struct, frozen=True):
    name: str
    p_value: float
    p_adjusted: float
    look: int
    window: int
    turns: int


class ValueStatistic(Struct, frozen=True):
    name: str
    value: float | None


class Alphas(Struct, frozen=True):
    alpha_medium: float
    alpha_high: float


class Tiers(Struct, frozen=True):
    medium: float
    high: float


class AnyMismatch(Struct, frozen=True):
    any_mismatch: str = "high"


class AttributionMessage(Struct, frozen=True, kw_only=True):
    component: str
    features: list[Feature] | UnsetType = UNSET
    statistic: PooledStatistic | ValueStatistic
    threshold: Alphas | Tiers | AnyMismatch
    baseline: Ref | None


class Baselines(Struct, frozen=True):
    attunement: Ref | None
    semantic: Ref | None
    safety: Ref | None


class Components(Struct, frozen=True):
    """The components by their :class:`~drift.outputs.Component` names."""

    attunement_drift: float | None
    semantic_drift: float | None
    safety_drift: float | None


class Weights(Struct, frozen=True):
    attunement: float
    semantic: float
    safety: float


class DriftScoreMessage(Envelope, frozen=True, kw_only=True):
    score_kind: str = "continuity_drift"
    turn: int
    checkpoint: str
    mode: str
    baselines: Baselines
    components: Components
    continuity_drift_score: float
    tier: str
    effective_tier: str
    attribution: AttributionMessage
    weights: Weights
    thresholds: Tiers
    drift_policy_id: str
    source_event_id: str


class ReattuneParts(Struct, frozen=True):
    convergence: float
    semantic_consistency: float | None
    trust_continuity: float | None


class ResponseMessage(Envelope, frozen=True, kw_only=True):
    """A response of any kind, and a ``reattune_quality`` score. Each kind sets its own
    fields and leaves the others out: a ladder's score and tiers, a release's kinds, a
    model change's models, a re-attunement's offers, posture and result (the result ends a
    ``reattune_quality`` score too, after the score's turn and source event). One struct
    keeps the one order every kind's fields follow."""

    score_kind: str | UnsetType = UNSET
    turn: int | UnsetType = UNSET
    source_event_id: str | UnsetType = UNSET
    action: str | UnsetType = UNSET
    cause_event_id: str | UnsetType = UNSET
    score_id: str | UnsetType = UNSET
    score: float | UnsetType = UNSET
    tier: str | UnsetType = UNSET
    effective_tier: str | UnsetType = UNSET
    hold_kinds: list[str] | UnsetType = UNSET
    kinds: list[str] | UnsetType = UNSET
    reconfirmed_event_id: str | UnsetType = UNSET
    reattune_required: bool | UnsetType = UNSET
    previous_model: Model | UnsetType = UNSET
    model: Model | UnsetType = UNSET
    offers: list[str] | UnsetType = UNSET
    posture: str | UnsetType = UNSET
    reattune_quality_score: float | UnsetType = UNSET
    reattune_turns_to_baseline: int | None | UnsetType = UNSET
    components: ReattuneParts | UnsetType = UNSET
    threshold: float | UnsetType = UNSET
    reattune_id: str | UnsetType = UNSET
    baseline: Ref | None | UnsetType = UNSET


class EscalationMessage(Envelope, frozen=True, kw_only=True):
    kind: str
    route: str
    sessions: int
    last_quality: float
    threshold: float
    cause_event_id: str


class ViolationMessage(Envelope, frozen=True, kw_only=True):
    rule: str
    reason: str
    event_id: str


class Target(Struct, frozen=True):
    kind: str
    baseline_id: str | None
    versions: int
    outcome: str


class Replacement(Struct, frozen=True):
    kind: str
    features: list[str]


class ReceiptMessage(Envelope, frozen=True, kw_only=True):
    request_id: str
    reason: str
    cause_event_id: str
    outcome: str
    targets: list[Target]
    replacement: Replacement | None
    checks: list[str]


class Source(Struct, frozen=True, kw_only=True):
    topic: str
    partition: int
    offset: int
    last_offset: int | UnsetType = UNSET


class DeadLetterMessage(Struct, frozen=True, kw_only=True):
    schema: str = SCHEMA
    id: str
    reason: str
    source: Source
    event_id: str | None
    fields: list[str]


Message = (DriftScoreMessage | ResponseMessage | EscalationMessage | ViolationMessage
           | ReceiptMessage | DeadLetterMessage)
