"""The edge: FHR wire format (``schemas/fhr-1.schema.json``) decoded once with msgspec.

:func:`decode_event` turns a Kafka record into a :class:`drift.model.FhrEvent` or a
:class:`Rejection` with a reason code and the names of the fields at fault, never
their values. :func:`encode_event` is its inverse, for the simulator and tests.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from drift import model as m
from streams.wire import iso, model_dict

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")]
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



class BatchFault(enum.Enum):
    """Why a whole record batch could not be read (``streams.batches``): its dead letter's
    reason code."""

    CRC_MISMATCH = "batch_crc_mismatch"
    CODEC_UNSUPPORTED = "batch_codec_unsupported"
    CORRUPT = "batch_corrupt"


#: Every reason code a dead letter can carry: why a record did not decode,
#: ``processing_error`` for one that decoded but whose processing raised, or why the
#: record batch that held it could not be read.
REJECTION_REASONS = (
    "invalid_json", "too_deep", "unknown_schema", "unknown_event_type", "unknown_field",
    "missing_field", "wrong_type", "out_of_range", "invalid_value", "invalid_timestamp",
    "raw_content_rejected", "key_mismatch", "processing_error",
    *(f.value for f in BatchFault))


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

_decoder = msgspec.json.Decoder(WireEvent)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record went to the dead-letter topic: a reason code and field names only."""

    reason: str
    fields: tuple[str, ...]
    event_id: str | None = None


# --------------------------------------------------------------------------- decode


def _model(w: WireModel) -> m.ModelTriple:
    return m.ModelTriple(w.model_version, w.tokenizer_id, w.precision_tag, w.adapter_id)


def _body(w: WireEvent) -> m.Body:
    if isinstance(w, TurnEvent):
        d, s = w.dynamics, w.states
        return m.Turn(w.turn, d.trust, d.resonance_depth, d.valence, d.friction, d.reflection,
                      d.user_tokens, d.latency_ms, s.ae_severity, s.care_override,
                      s.care_cooloff, s.crisis, s.legal_hold)
    if isinstance(w, SessionStartEvent):
        return m.SessionStart(m.Mode(w.continuity_mode), w.consent_state_id, _model(w.model),
                              w.safety.gate_config_id, w.safety.drift_policy_id)
    if isinstance(w, SemanticEvent):
        return m.Semantic(w.turn, w.commitment_id, w.kind, w.stance)
    if isinstance(w, MemoryWriteEvent):
        return m.MemoryWrite(w.turn, w.memory_class, w.category, w.scope, w.consent_state_id,
                             w.confirmed)
    if isinstance(w, MemoryWriteBlockedEvent):
        return m.MemoryWriteBlocked(w.turn, w.memory_class, w.reason)
    if isinstance(w, MemoryEraseEvent):
        return m.MemoryErase(w.memory_class, w.scope, w.reason, w.request_id)
    if isinstance(w, ModeChangedEvent):
        return m.ModeChanged(m.Mode(w.from_mode), m.Mode(w.to_mode), w.consent_state_id,
                             w.retroactive)
    if isinstance(w, NoticeShownEvent):
        return m.NoticeShown(_model(w.model))
    if isinstance(w, BaselineReconfirmedEvent):
        return m.BaselineReconfirmed(tuple(m.BaselineKind(k) for k in w.kinds))
    assert isinstance(w, SessionEndEvent)
    return m.SessionEnd(w.turns, w.reason)


def to_domain(w: WireEvent) -> m.FhrEvent:
    tag = type(w).__struct_config__.tag
    return m.FhrEvent(w.event_id, str(tag), w.ts.timestamp(), w.user_id, w.session_id,
                      w.ephemeral, _body(w))


#: The key of a tick record (:class:`drift.model.Tick`): no user id can be it, since user
#: ids never hold a NUL byte.
TICK_KEY = b"\x00continuity-tick"
TICK_SCHEMA = "continuity-tick/1"


class _TickWire(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["continuity-tick/1"]
    app_id: Id
    ts: Ts


_tick_decoder = msgspec.json.Decoder(_TickWire)


def encode_tick(tick: m.Tick) -> bytes:
    """The value of a tick record.

    >>> decode_record(TICK_KEY, encode_tick(m.Tick("continuity-drift", 1.7e9)))
    Tick(app_id='continuity-drift', ts_s=1700000000.0)
    """
    return _encoder.encode({"schema": TICK_SCHEMA, "app_id": tick.app_id,
                            "ts": iso(tick.ts_s).replace("Z", "+00:00")})


def decode_record(key: bytes | None, value: bytes | None
                  ) -> m.FhrEvent | m.Tick | Rejection:
    """An ``fhr.events`` record as an event, a tick (keyed :data:`TICK_KEY`) or a rejection.

    >>> decode_record(TICK_KEY, b'{"schema":"continuity-tick/1"}')
    Rejection(reason='invalid_value', fields=('tick',), event_id=None)
    """
    if key != TICK_KEY:
        return decode_event(key, value)
    try:
        wire = _tick_decoder.decode(value or b"")
    except (msgspec.DecodeError, RecursionError):
        return Rejection("invalid_value", ("tick",))
    return m.Tick(wire.app_id, wire.ts.timestamp())


def decode_event(key: bytes | None, value: bytes | None) -> m.FhrEvent | Rejection:
    """Decode and validate one ``fhr.events`` record.

    >>> ok = (b'{"schema":"fhr/1","event_id":"e1","event_type":"session_end",'
    ...       b'"ts":"2026-11-30T10:00:00+00:00","user_id":"u1","session_id":"s1",'
    ...       b'"turns":3,"reason":"closed"}')
    >>> decode_event(b"u1", ok).body
    SessionEnd(turns=3, reason='closed')
    >>> decode_event(b"u2", ok)
    Rejection(reason='key_mismatch', fields=('user_id',), event_id='e1')
    >>> decode_event(b"u1", ok.replace(b'"turns":3', b'"turns":-3'))
    Rejection(reason='out_of_range', fields=('turns',), event_id='e1')
    >>> decode_event(b"u1", ok.replace(b'"closed"', b'"' + b"x" * 600 + b'"'))
    Rejection(reason='raw_content_rejected', fields=('reason',), event_id='e1')
    """
    if value is None:
        return Rejection("invalid_json", ())
    try:
        try:
            wire = _decoder.decode(value)
        except msgspec.ValidationError as exc:
            classified = _classify(value, str(exc))
            if isinstance(classified, Rejection):
                return classified
            wire = classified
    except msgspec.DecodeError:
        return Rejection("invalid_json", ())
    except RecursionError:
        return Rejection("too_deep", ())
    if isinstance(wire, BaselineReconfirmedEvent) and len(set(wire.kinds)) != len(wire.kinds):
        return Rejection("out_of_range", ("kinds",), wire.event_id)
    if key is None or key != wire.user_id.encode("utf-8"):
        return Rejection("key_mismatch", ("user_id",), wire.event_id)
    return to_domain(wire)


_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_FIELD = re.compile(r"field `(?P<name>[^`]+)`")


def _find_long_strings(obj: Any, path: str, out: list[str]) -> None:
    if isinstance(obj, str):
        if len(obj) > MAX_TEXT:
            out.append(path or "$")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            child = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and len(k) > MAX_TEXT:
                out.append(path or "$")
            else:
                _find_long_strings(v, child, out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _find_long_strings(v, f"{path}[{i}]", out)


def _integral_floats(obj: Any) -> Any:
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    if isinstance(obj, dict):
        return {k: _integral_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_integral_floats(v) for v in obj]
    return obj


def _readable_event_id(obj: Any) -> str | None:
    if isinstance(obj, dict):
        eid = obj.get("event_id")
        if isinstance(eid, str) and 0 < len(eid) <= 64:
            return eid
    return None


def _classify(value: bytes, message: str) -> WireEvent | Rejection:
    """Turn a validation failure into a reason code and field names (slow path only), or
    the event itself when only integral floats stood for integers."""
    try:
        generic = msgspec.json.decode(value)
    except msgspec.DecodeError:
        return Rejection("invalid_json", ())
    event_id = _readable_event_id(generic)
    long_strings: list[str] = []
    _find_long_strings(generic, "", long_strings)
    if long_strings:
        return Rejection("raw_content_rejected", tuple(sorted(set(long_strings))), event_id)
    if "got `float`" in message and "Expected `int`" in message:
        try:
            converted: WireEvent = msgspec.convert(_integral_floats(generic), WireEvent)
            return converted
        except msgspec.ValidationError as exc:
            message = str(exc)
    if not isinstance(generic, dict):
        return Rejection("wrong_type", ("$",), None)
    match = _PATH.search(message)
    path = match.group("path").lstrip(".") if match else ""
    field = _FIELD.search(message)
    if "unknown field" in message and field:
        name = f"{path}.{field.group('name')}" if path else field.group("name")
        return Rejection("unknown_field", (name,), event_id)
    if "missing required field" in message and field:
        name = f"{path}.{field.group('name')}" if path else field.group("name")
        return Rejection("missing_field", (name,), event_id)
    if path == "schema":
        return Rejection("unknown_schema", ("schema",), event_id)
    if path == "event_type":
        return Rejection("unknown_event_type", ("event_type",), event_id)
    if "datetime" in message or "RFC3339" in message:
        return Rejection("invalid_timestamp", (path or "ts",), event_id)
    if message.startswith("Expected `") and ("got `" in message):
        return Rejection("wrong_type", (path,), event_id)
    if "Invalid enum value" in message:
        return Rejection("invalid_value", (path,), event_id)
    return Rejection("out_of_range", (path,), event_id)


# --------------------------------------------------------------------------- encode


def _wire_model(mt: m.ModelTriple) -> dict[str, Any]:
    """The input format leaves an absent adapter out rather than null."""
    return {k: v for k, v in model_dict(mt).items() if v is not None}


def event_to_dict(e: m.FhrEvent, ts: str) -> dict[str, Any]:
    """The wire dict of a domain event, with ``ts`` given as RFC 3339 text."""
    out: dict[str, Any] = {"schema": "fhr/1", "event_id": e.event_id, "event_type": e.event_type,
                           "ts": ts, "user_id": e.user_id, "session_id": e.session_id}
    if e.ephemeral:
        out["ephemeral"] = True
    b = e.body
    if isinstance(b, m.Turn):
        out.update(turn=b.turn, dynamics={
            "trust": b.trust, "resonance_depth": b.resonance_depth, "valence": b.valence,
            "friction": b.friction, "reflection": b.reflection, "user_tokens": b.user_tokens,
            "latency_ms": b.latency_ms}, states={
            "ae_severity": b.ae_severity, "care_override": b.care_override,
            "care_cooloff": b.care_cooloff, "crisis": b.crisis, "legal_hold": b.legal_hold})
    elif isinstance(b, m.SessionStart):
        out.update(continuity_mode=b.mode.value, consent_state_id=b.consent_state_id,
                   model=_wire_model(b.model),
                   safety={"gate_config_id": b.gate_config_id,
                           "drift_policy_id": b.drift_policy_id})
    elif isinstance(b, m.Semantic):
        out.update(turn=b.turn, commitment_id=b.commitment_id, kind=b.kind, stance=b.stance)
    elif isinstance(b, m.MemoryWrite):
        out.update(turn=b.turn, memory_class=b.memory_class, category=b.category, scope=b.scope,
                   consent_state_id=b.consent_state_id, confirmed=b.confirmed)
    elif isinstance(b, m.MemoryWriteBlocked):
        out.update(turn=b.turn, memory_class=b.memory_class, reason=b.reason)
    elif isinstance(b, m.MemoryErase):
        out.update(memory_class=b.memory_class, scope=b.scope, reason=b.reason,
                   request_id=b.request_id)
    elif isinstance(b, m.ModeChanged):
        out.update(from_mode=b.from_mode.value, to_mode=b.to_mode.value,
                   consent_state_id=b.consent_state_id, retroactive=b.retroactive)
    elif isinstance(b, m.NoticeShown):
        out.update(model=_wire_model(b.model))
    elif isinstance(b, m.BaselineReconfirmed):
        out.update(kinds=[k.value for k in b.kinds])
    elif isinstance(b, m.SessionEnd):
        out.update(turns=b.turns, reason=b.reason)
    return out


def encode_event(e: m.FhrEvent) -> bytes:
    """JSON bytes of a domain event (the simulator's producer uses this).

    >>> from drift.model import FhrEvent, SessionEnd
    >>> raw = encode_event(FhrEvent("e1", "session_end", 0.0, "u", "s", False,
    ...                             SessionEnd(0, "closed")))
    >>> decode_event(b"u", raw).body
    SessionEnd(turns=0, reason='closed')
    """
    return _encoder.encode(event_to_dict(e, iso(e.ts_s).replace("Z", "+00:00")))


def encode_json(obj: Any) -> bytes:
    return _encoder.encode(obj)
