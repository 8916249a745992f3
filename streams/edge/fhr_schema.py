"""The FHR wire format (``schemas/fhr-1.schema.json``) as msgspec Structs, one per event type.

:mod:`streams.edge.codec` decodes records into these once and turns them into
:class:`drift.model.FhrEvent` values; nothing past the edge sees them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

#: The schema's pattern for an id. The decoder checks only the length of an id
#: (:data:`Id`); :func:`is_id` checks its characters after the decode, in about a tenth of
#: the time msgspec's regex takes (a regex per id was about 1 us a record).
ID_PATTERN = r"^[A-Za-z0-9._:-]+$"
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
EventId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Ts = Annotated[datetime, msgspec.Meta(tz=True)]
Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
TurnNo = Annotated[int, msgspec.Meta(ge=1)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
ModeName = Literal["stateless", "session_only", "continuity_light", "continuity_full"]
MemoryClass = Literal["operational", "relational", "explicit", "ephemeral"]
Category = Literal["style", "boundaries", "friction_history", "topic", "emotional_trajectory",
                   "resonance", "attunement_profile", "trust_trajectory"]
BlockReason = Literal["ae_active", "care_override", "crisis", "high_resonance_no_reflection",
                      "legal_hold"]

MAX_TEXT = 500

_ID_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"


def is_id(text: str) -> bool:
    """Whether ``text`` matches :data:`ID_PATTERN`: one or more of its characters, nothing
    else. A trailing newline does not match, as JSON Schema reads the pattern (Python's
    ``$`` would let one through).

    >>> is_id("user-7:a.b_c"), is_id("has space"), is_id("u\\n"), is_id("caf\\u00e9"), is_id("")
    (True, False, False, False, False)
    """
    return text.isascii() and text != "" and not text.encode("ascii").translate(None, _ID_BYTES)


class _Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="event_type",
            kw_only=True):
    schema: Literal["fhr/1"]
    event_id: EventId
    ts: Ts
    user_id: Id
    session_id: Id
    ephemeral: bool = False


class WireModel(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    model_version: Text
    tokenizer_id: Text
    precision_tag: Text
    adapter_id: Text | None = None


class WireSafety(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    gate_config_id: Text
    drift_policy_id: Text


class WireDynamics(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    trust: Unit
    resonance_depth: Unit
    valence: Annotated[float, msgspec.Meta(ge=-1.0, le=1.0)]
    friction: bool
    reflection: bool
    user_tokens: NonNegInt
    latency_ms: Annotated[float, msgspec.Meta(ge=0.0)]


class WireStates(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    ae_severity: Literal["none", "low", "med", "high"]
    care_override: bool
    care_cooloff: bool
    crisis: bool
    legal_hold: bool


# One Struct per event type of the schema, alike in form: each validates its own event's fields.
class SessionStartEvent(_Base, frozen=True, tag="session_start"):
    continuity_mode: ModeName
    consent_state_id: Text
    model: WireModel
    safety: WireSafety


class TurnEvent(_Base, frozen=True, tag="turn"):
    turn: TurnNo
    dynamics: WireDynamics
    states: WireStates


class SemanticEvent(_Base, frozen=True, tag="semantic"):
    turn: TurnNo
    commitment_id: Text
    kind: Literal["commitment", "position", "constraint"]
    stance: Literal["affirm", "contradict", "retract"]


class MemoryWriteEvent(_Base, frozen=True, tag="memory_write"):
    turn: TurnNo
    memory_class: MemoryClass
    category: Category
    scope: Text
    consent_state_id: Text
    confirmed: bool


class MemoryWriteBlockedEvent(_Base, frozen=True, tag="memory_write_blocked"):
    turn: TurnNo
    memory_class: MemoryClass
    reason: BlockReason


class MemoryEraseEvent(_Base, frozen=True, tag="memory_erase"):
    memory_class: MemoryClass
    scope: Literal["all"] | Category
    reason: Literal["user_request", "mode_downgrade", "ttl_expired", "operator"]
    request_id: Text


class ModeChangedEvent(_Base, frozen=True, tag="continuity_mode_changed"):
    from_mode: ModeName
    to_mode: ModeName
    consent_state_id: Text
    retroactive: bool


class NoticeShownEvent(_Base, frozen=True, tag="model_change_notice_shown"):
    model: WireModel


class BaselineReconfirmedEvent(_Base, frozen=True, tag="baseline_reconfirmed"):
    kinds: Annotated[list[Literal["attunement", "semantic", "safety"]],
                     msgspec.Meta(min_length=1)]


class SessionEndEvent(_Base, frozen=True, tag="session_end"):
    turns: NonNegInt
    reason: Literal["closed", "idle_timeout"]


WireEvent = (SessionStartEvent | TurnEvent | SemanticEvent | MemoryWriteEvent
             | MemoryWriteBlockedEvent | MemoryEraseEvent | ModeChangedEvent | NoticeShownEvent
             | BaselineReconfirmedEvent | SessionEndEvent)
