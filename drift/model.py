"""Domain values: FHR events as the core sees them, enums and the configuration.

The wire format is decoded and validated at the edge (``streams.edge.codec``); the core
only ever sees these frozen values.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field
from typing import Any

import msgspec
import msgspec.structs

from drift.evolve import fast_init


class Mode(str, enum.Enum):
    STATELESS = "stateless"
    SESSION_ONLY = "session_only"
    LIGHT = "continuity_light"
    FULL = "continuity_full"

    @property
    def keeps_baselines(self) -> bool:
        """Light and full modes baseline and score; the others keep nothing per user.

        >>> [m.keeps_baselines for m in Mode], [m.rank for m in Mode]
        ([False, False, True, True], [0, 1, 2, 3])
        """
        # By value: hashing a member calls Enum.__hash__ in Python, and this is read per event.
        return self._value_ in _BASELINING

    @property
    def rank(self) -> int:
        return _MODE_RANK[self._value_]


_BASELINING = frozenset({Mode.LIGHT.value, Mode.FULL.value})
_MODE_RANK = {Mode.STATELESS.value: 0, Mode.SESSION_ONLY.value: 1, Mode.LIGHT.value: 2,
              Mode.FULL.value: 3}


class Tier(enum.IntEnum):
    LOW = 0
    MEDIUM = 1
    HIGH = 2

    @property
    def label(self) -> str:
        return self.name.lower()


class BaselineKind(str, enum.Enum):
    ATTUNEMENT = "attunement"
    SEMANTIC = "semantic"
    SAFETY = "safety"


#: Turn-dynamics features, in a fixed order used by every array in the core.
FEATURES: tuple[str, ...] = (
    "trust", "resonance_depth", "valence", "friction", "user_tokens", "latency_ms",
)
#: Features each baselining mode may hold (SPEC section 3).
MODE_FEATURES: dict[Mode, tuple[str, ...]] = {
    Mode.LIGHT: ("friction", "user_tokens", "latency_ms"),
    Mode.FULL: FEATURES,
}
#: Relational categories a light-mode user may have written.
LIGHT_CATEGORIES = frozenset({"style", "boundaries", "friction_history"})
#: Relational categories the attunement baseline draws on, per feature. An erasure
#: of one of these categories erases the attunement baseline.
ATTUNEMENT_CATEGORIES = frozenset({
    "style", "friction_history", "emotional_trajectory", "resonance", "attunement_profile",
    "trust_trajectory",
})
#: Categories the semantic baseline (commitments, positions, constraints) draws on.
SEMANTIC_CATEGORIES = frozenset({"boundaries", "topic"})


@dataclass(frozen=True, slots=True)
class ModelTriple:
    """The model a session ran on; its text is shared between the many users and baselines
    that name the same model (interned), so each holds a reference, not a copy."""

    model_version: str
    tokenizer_id: str
    precision_tag: str
    adapter_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("model_version", "tokenizer_id", "precision_tag", "adapter_id"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, sys.intern(value))


@dataclass(frozen=True, slots=True)
class SessionStart:
    """A session's start; its ids are shared between users as :class:`ModelTriple`'s text
    is (an open session keeps them)."""

    mode: Mode
    consent_state_id: str
    model: ModelTriple
    gate_config_id: str
    drift_policy_id: str

    def __post_init__(self) -> None:
        for name in ("consent_state_id", "gate_config_id", "drift_policy_id"):
            object.__setattr__(self, name, sys.intern(getattr(self, name)))


# The two values built for every record (an event and its turn) are frozen msgspec Structs,
# built in C: 0.09 us each here, against 0.7-1.3 us for a frozen dataclass even with
# fast_init (docs/design.md, "The values built for every record"). gc=False: they hold no
# cycles, so the collector need not track them.
class Turn(msgspec.Struct, frozen=True, gc=False):
    turn: int
    trust: float
    resonance_depth: float
    valence: float
    friction: bool
    reflection: bool
    user_tokens: int
    latency_ms: float
    ae_severity: str
    care_override: bool
    care_cooloff: bool
    crisis: bool
    legal_hold: bool

    @staticmethod
    def neutral(turn: int, **changes: Any) -> Turn:
        """A turn with middling dynamics and no blocking state, with ``changes`` applied.

        >>> Turn.neutral(3, crisis=True).crisis, Turn.neutral(3).trust
        (True, 0.5)
        """
        base = Turn(turn, 0.5, 0.5, 0.0, False, False, 40, 900.0, "none", False, False, False,
                    False)
        return msgspec.structs.replace(base, **changes)

    def features(self) -> tuple[float, ...]:
        """The six dynamics in :data:`FEATURES` order, as floats."""
        return (self.trust, self.resonance_depth, self.valence, float(self.friction),
                float(self.user_tokens), self.latency_ms)


@dataclass(frozen=True, slots=True)
class Semantic:
    """A commitment referenced at a turn; its kind and stance, a few words every user
    shares, are kept as one shared string each (an open session keeps one per commitment)."""

    turn: int
    commitment_id: str
    kind: str
    stance: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", sys.intern(self.kind))
        object.__setattr__(self, "stance", sys.intern(self.stance))


@fast_init
@dataclass(frozen=True, slots=True)
class MemoryWrite:
    turn: int
    memory_class: str
    category: str
    scope: str
    consent_state_id: str
    confirmed: bool


@fast_init
@dataclass(frozen=True, slots=True)
class MemoryWriteBlocked:
    turn: int
    memory_class: str
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class MemoryErase:
    memory_class: str
    scope: str
    reason: str
    request_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class ModeChanged:
    from_mode: Mode
    to_mode: Mode
    consent_state_id: str
    retroactive: bool


@fast_init
@dataclass(frozen=True, slots=True)
class NoticeShown:
    model: ModelTriple


@fast_init
@dataclass(frozen=True, slots=True)
class BaselineReconfirmed:
    kinds: tuple[BaselineKind, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class SessionEnd:
    turns: int
    reason: str


Body = (SessionStart | Turn | Semantic | MemoryWrite | MemoryWriteBlocked | MemoryErase
        | ModeChanged | NoticeShown | BaselineReconfirmed | SessionEnd)

#: The wire ``event_type`` of each body.
EVENT_TYPES: dict[type, str] = {
    SessionStart: "session_start", Turn: "turn", Semantic: "semantic",
    MemoryWrite: "memory_write", MemoryWriteBlocked: "memory_write_blocked",
    MemoryErase: "memory_erase", ModeChanged: "continuity_mode_changed",
    NoticeShown: "model_change_notice_shown", BaselineReconfirmed: "baseline_reconfirmed",
    SessionEnd: "session_end",
}


def event_type_of(body: Body) -> str:
    """
    >>> event_type_of(SessionEnd(3, "closed"))
    'session_end'
    """
    return EVENT_TYPES[type(body)]


class FhrEvent(msgspec.Struct, frozen=True, gc=False):
    """One accepted FHR event. ``ts_s`` is event time in seconds since the epoch."""

    event_id: str
    event_type: str
    ts_s: float
    user_id: str
    session_id: str
    ephemeral: bool
    body: Body


@fast_init
@dataclass(frozen=True, slots=True)
class Tick:
    """Event time on a quiet partition moved to ``ts_s`` by the worker ``app_id`` that owns
    it: an input record of its own, so a replay of the log moves it at the same place.
    Every user of the partition is swept at ``ts_s`` (idle sessions closed, baselines past
    their TTL erased); nothing else changes (docs/design.md, "Event time")."""

    app_id: str
    ts_s: float


@dataclass(frozen=True)
class DriftConfig:
    """Scoring, response and governance configuration (SPEC defaults).

    ``alpha_medium`` and ``alpha_high`` are the per-session false-alarm budgets
    of the attunement component for the two tiers; ``first_look_share`` is the
    part of each budget spent at the first checkpoint, the rest is spent on later
    checkpoints in halving shares.
    """

    drift_policy_id: str = "drift-policy-1"
    checkpoint_turn: int = 5
    checkpoint_every: int = 5
    idle_timeout_s: float = 30 * 60.0
    threshold_medium: float = 0.5
    threshold_high: float = 0.8
    weight_attunement: float = 1.0
    weight_semantic: float = 1.0
    weight_safety: float = 1.0
    alpha_medium: float = 0.04
    alpha_high: float = 0.005
    first_look_share: float = 0.8
    core_share: float = 0.8
    baseline_sessions: int = 5
    recency_decay: float = 0.7
    windows: int = 3
    min_baseline_turns: int = 3
    reattune_checkpoint_turn: int = 5
    reattune_threshold: float = 0.6
    reattune_window: int = 3
    reattune_tolerance_level: float = 0.99
    reattune_weight_convergence: float = 0.5
    reattune_weight_semantic: float = 0.2
    reattune_weight_trust: float = 0.3
    sustained_low_sessions: int = 3
    high_resonance: float = 0.8
    high_resonance_turns: int = 3
    ttl_light_s: float = 30 * 86400.0
    ttl_full_s: float = 90 * 86400.0
    recent_event_ids: int = 128
    late_profile_turns: int = 3
    extra: dict[str, str] = field(default_factory=dict)

    def ttl_s(self, mode: Mode) -> float:
        return self.ttl_full_s if mode is Mode.FULL else self.ttl_light_s
