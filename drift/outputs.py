"""What the core hands the shell: typed, frozen results with deterministic ids.

Every output names its topic through :class:`OutputKind`; ``streams.edge.wire`` turns
each into the JSON of SPEC section 7. Closed sets are enums, so metric labels and
wire values come from one place.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from drift.attunement import AttunementTest
from drift.baseline import AttunementBaseline, Baseline, BaselineMeta, derive_id
from drift.evolve import fast_init
from drift.model import BaselineKind, Mode, ModelTriple, Tier
from drift.reattune import ReattuneScore


# Enums and frozen dataclasses alike in form, here and in drift.model: each declares its own
# closed set of the SPEC's values or its own result, and mypy checks each by its type.
class OutputKind(str, enum.Enum):
    SCORE = "score"
    RESPONSE = "response"
    ESCALATION = "escalation"
    VIOLATION = "violation"
    RECEIPT = "receipt"


class Action(str, enum.Enum):
    """Response actions on ``drift.responses`` (SPEC sections 4 and 5)."""

    CHECK_PROMPTED = "continuity_check_prompted"
    REBASELINE_REQUIRED = "continuity_rebaseline_required"
    HOLD_RELEASED = "hold_released"
    MODEL_CHANGE_NOTICE = "model_change_notice"
    POSTURE_DOWNGRADE = "posture_downgrade"
    REATTUNE_COMPLETED = "reattune_completed"
    REATTUNE_FAILED = "reattune_failed"


class Rule(str, enum.Enum):
    """Memory-governance rules on ``governance.violations`` (SPEC section 6)."""

    MODE_FORBIDDEN = "relational_write_mode_forbidden"
    BLOCKED_STATE = "relational_write_in_blocked_state"
    UNCONFIRMED = "relational_write_unconfirmed"
    MODEL_CHANGE_UNDISCLOSED = "model_change_undisclosed"


class EscalationKind(str, enum.Enum):
    SUSTAINED_LOW_REATTUNE = "sustained_low_reattune"


class ErasureOutcome(str, enum.Enum):
    REQUESTED = "requested"
    IN_PROGRESS = "in_progress"
    PARTIAL = "partial"
    FAILED = "failed"
    VERIFIED = "verified"


class Component(str, enum.Enum):
    ATTUNEMENT = "attunement_drift"
    SEMANTIC = "semantic_drift"
    SAFETY = "safety_drift"


class ReattuneOutcome(str, enum.Enum):
    COMPLETED = "completed"
    FAILED = "failed"
    NEVER_REACHED_BASELINE = "never_reached_baseline"


class Offer(str, enum.Enum):
    RESET_SESSION_ONLY = "reset_session_only"
    CONTINUE_CONSERVATIVE = "continue_conservative"


class Posture(str, enum.Enum):
    RESTORED = "restored"
    CONSERVATIVE = "conservative"


@fast_init
@dataclass(frozen=True, slots=True)
class BaselineRef:
    baseline_id: str
    version: int

    @staticmethod
    def of(meta: BaselineMeta | None) -> BaselineRef | None:
        return None if meta is None else BaselineRef(meta.baseline_id, meta.version)


@fast_init
@dataclass(frozen=True, slots=True)
class Components:
    """The three drift components of one score; None where no baseline of that kind exists."""

    attunement: float | None
    semantic: float | None
    safety: float | None

    def items(self) -> tuple[tuple[Component, float | None], ...]:
        return ((Component.ATTUNEMENT, self.attunement), (Component.SEMANTIC, self.semantic),
                (Component.SAFETY, self.safety))


@fast_init
@dataclass(frozen=True, slots=True)
class Attribution:
    """What drove a score: the component, its statistic and threshold, the baseline version."""

    component: BaselineKind
    baseline: BaselineRef | None
    test: AttunementTest | None = None
    value: float | None = None
    alpha_medium: float = 0.0
    alpha_high: float = 0.0


@fast_init
@dataclass(frozen=True, slots=True)
class DriftScore:
    """One ``continuity_drift_score`` with its tier and the effective tier after it."""

    kind: ClassVar[OutputKind] = OutputKind.SCORE
    id: str
    user_id: str
    session_id: str
    ts_s: float
    turn: int
    checkpoint: str
    mode: Mode
    baselines: tuple[BaselineRef | None, BaselineRef | None, BaselineRef | None]
    components: Components
    score: float
    tier: Tier
    effective_tier: Tier
    attribution: Attribution
    weights: tuple[float, float, float]
    thresholds: tuple[float, float]
    drift_policy_id: str
    source_event_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class Reattunement:
    """A re-attunement score and what it was held against."""

    score: ReattuneScore
    threshold: float
    reattune_id: str
    baseline: BaselineRef | None

    @property
    def passed(self) -> bool:
        return self.score.quality >= self.threshold


@fast_init
@dataclass(frozen=True, slots=True)
class ReattuneQualityScore:
    """The continuity-quality signal of a session with a prior and no model change."""

    kind: ClassVar[OutputKind] = OutputKind.SCORE
    id: str
    user_id: str
    session_id: str
    ts_s: float
    turn: int
    source_event_id: str
    reattunement: Reattunement


@fast_init
@dataclass(frozen=True, slots=True)
class LadderDetail:
    score_id: str
    score: float
    tier: Tier
    effective_tier: Tier
    hold_kinds: tuple[BaselineKind, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class ReleaseDetail:
    kinds: tuple[BaselineKind, ...]
    reconfirmed_event_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class ModelChangeDetail:
    reattune_required: bool
    previous_model: ModelTriple
    model: ModelTriple


@fast_init
@dataclass(frozen=True, slots=True)
class ReattuneDetail:
    posture: Posture
    offers: tuple[Offer, ...]
    reattunement: Reattunement


@fast_init
@dataclass(frozen=True, slots=True)
class Response:
    """A tighten-only action for upstream services, with its cause."""

    kind: ClassVar[OutputKind] = OutputKind.RESPONSE
    id: str
    user_id: str
    session_id: str
    ts_s: float
    action: Action
    cause_event_id: str
    detail: LadderDetail | ReleaseDetail | ModelChangeDetail | ReattuneDetail


@fast_init
@dataclass(frozen=True, slots=True)
class Escalation:
    kind: ClassVar[OutputKind] = OutputKind.ESCALATION
    id: str
    user_id: str
    session_id: str
    ts_s: float
    escalation: EscalationKind
    route: str
    sessions: int
    last_quality: float
    threshold: float
    cause_event_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class Violation:
    kind: ClassVar[OutputKind] = OutputKind.VIOLATION
    id: str
    user_id: str
    session_id: str
    ts_s: float
    rule: Rule
    reason: str
    event_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class ErasureTarget:
    """The outcome for one baseline kind of one erasure request."""

    kind: BaselineKind
    baseline_id: str | None
    versions: int
    outcome: ErasureOutcome


@fast_init
@dataclass(frozen=True, slots=True)
class ErasureResult:
    """What the store did for one erasure request (or did the first time, on a repeat)."""

    request_id: str
    targets: tuple[ErasureTarget, ...]
    replayed: bool
    repeat: bool = False
    """Carried out before for another event with the same request id, whose receipt (the
    same id) was published then."""

    @property
    def outcome(self) -> ErasureOutcome:
        """``verified`` when every target was; ``partial`` when some were; else ``failed``.

        >>> t = ErasureTarget(BaselineKind.SEMANTIC, "b", 1, ErasureOutcome.VERIFIED)
        >>> ErasureResult("r", (t,), False).outcome.value, ErasureResult("r", (), False).outcome.value
        ('verified', 'verified')
        """
        outcomes = {t.outcome for t in self.targets}
        if not outcomes or outcomes == {ErasureOutcome.VERIFIED}:
            return ErasureOutcome.VERIFIED
        if ErasureOutcome.VERIFIED in outcomes:
            return ErasureOutcome.PARTIAL
        return ErasureOutcome.FAILED


@fast_init
@dataclass(frozen=True, slots=True)
class ErasureReceipt:
    kind: ClassVar[OutputKind] = OutputKind.RECEIPT
    id: str
    user_id: str
    session_id: str
    ts_s: float
    request_id: str
    reason: str
    cause_event_id: str
    outcome: ErasureOutcome
    targets: tuple[ErasureTarget, ...]
    replacement_features: tuple[str, ...] | None
    checks: tuple[str, ...]


Output = DriftScore | ReattuneQualityScore | Response | Escalation | Violation | ErasureReceipt


@fast_init
@dataclass(frozen=True, slots=True)
class ErasureCommand:
    """Remove every stored version of ``kinds`` for a user, leaving tombstones.

    ``replacement`` is written after the removal (a downgrade that keeps a
    restricted attunement baseline). ``everything`` also drops the user's state
    and session rows (a downgrade to a mode that keeps nothing, or an operator's
    erase of the whole user).
    """

    user_id: str
    session_id: str
    kinds: tuple[BaselineKind, ...]
    reason: str
    request_id: str
    cause_event_id: str
    ts_s: float
    replacement: AttunementBaseline | None = None

    @property
    def everything(self) -> bool:
        return set(self.kinds) == set(BaselineKind)


@fast_init
@dataclass(frozen=True, slots=True)
class SessionSummary:
    """What the review API shows of a session: no feature values."""

    user_id: str
    session_id: str
    mode: Mode
    started_s: float
    ended_s: float | None
    turns: int
    max_tier: Tier
    scores: int
    model_change: bool
    reattune_quality: float | None


@fast_init
@dataclass(frozen=True, slots=True)
class Effects:
    """Everything one step asks of the shell.

    ``writes`` are new baseline versions and erasures in the order the fold made
    them (a version folded before an erasure in the same step is erased with the
    rest); ``sessions`` are summaries of the sessions that closed.
    """

    outputs: tuple[Output, ...] = ()
    writes: tuple[Baseline | ErasureCommand, ...] = ()
    sessions: tuple[SessionSummary, ...] = ()
    duplicate: bool = False

    def __add__(self, other: Effects) -> Effects:
        if other.empty and not other.duplicate:
            return self
        if self.empty and not self.duplicate:
            return other
        return Effects(self.outputs + other.outputs, self.writes + other.writes,
                       self.sessions + other.sessions, self.duplicate or other.duplicate)

    @property
    def empty(self) -> bool:
        return not (self.outputs or self.writes or self.sessions)


NO_EFFECTS = Effects()


def dead_letter_id(topic: str, partition: int, offset: int, last_offset: int | None = None
                   ) -> str:
    """The id of the dead letter for the record at ``offset`` of ``topic``/``partition``, or
    for the unreadable record batch from ``offset`` to ``last_offset`` (inclusive): derived
    from where it sits in the log, so a replay dead-letters it under the same id.

    >>> dead_letter_id("fhr.events", 0, 7)
    '4ed26514a3c4a0d5780040f1eeaa8874'
    >>> dead_letter_id("fhr.events", 0, 7, 9) != dead_letter_id("fhr.events", 0, 7)
    True
    """
    parts = ("deadletter", topic, str(partition), str(offset))
    return derive_id(*parts) if last_offset is None else derive_id(*parts, str(last_offset))
