"""The edge: FHR records (``streams.edge.fhr_schema``) decoded once with msgspec.

:func:`decode_event` turns a Kafka record into a :class:`drift.model.FhrEvent` or a
:class:`Rejection` with a reason code and the names of the fields at fault, never
their values. :func:`encode_event` is its inverse, for the simulator and tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from drift import model as m
from streams.edge.fhr_schema import (
    MAX_TEXT,
    BaselineReconfirmedEvent,
    MemoryEraseEvent,
    MemoryWriteBlockedEvent,
    MemoryWriteEvent,
    ModeChangedEvent,
    NoticeShownEvent,
    SemanticEvent,
    SessionEndEvent,
    SessionStartEvent,
    TurnEvent,
    WireEvent,
    WireModel,
    is_id,
)
from streams.edge.rejection import Rejection
from streams.edge.tick import TICK_KEY, decode_tick
from streams.edge.wire import iso, model_dict

_decoder = msgspec.json.Decoder(WireEvent)
_encoder = msgspec.json.Encoder()


def _model(w: WireModel) -> m.ModelTriple:
    return m.ModelTriple(w.model_version, w.tokenizer_id, w.precision_tag, w.adapter_id)


def _turn(w: TurnEvent) -> m.Turn:
    d, s = w.dynamics, w.states
    return m.Turn(w.turn, d.trust, d.resonance_depth, d.valence, d.friction, d.reflection,
                  d.user_tokens, d.latency_ms, s.ae_severity, s.care_override, s.care_cooloff,
                  s.crisis, s.legal_hold)


def _start(w: SessionStartEvent) -> m.SessionStart:
    return m.SessionStart(m.Mode(w.continuity_mode), w.consent_state_id, _model(w.model),
                          w.safety.gate_config_id, w.safety.drift_policy_id)


def _semantic(w: SemanticEvent) -> m.Semantic:
    return m.Semantic(w.turn, w.commitment_id, w.kind, w.stance)


def _write(w: MemoryWriteEvent) -> m.MemoryWrite:
    return m.MemoryWrite(w.turn, w.memory_class, w.category, w.scope, w.consent_state_id,
                         w.confirmed)


def _blocked(w: MemoryWriteBlockedEvent) -> m.MemoryWriteBlocked:
    return m.MemoryWriteBlocked(w.turn, w.memory_class, w.reason)


def _erase(w: MemoryEraseEvent) -> m.MemoryErase:
    return m.MemoryErase(w.memory_class, w.scope, w.reason, w.request_id)


def _mode_changed(w: ModeChangedEvent) -> m.ModeChanged:
    return m.ModeChanged(m.Mode(w.from_mode), m.Mode(w.to_mode), w.consent_state_id,
                         w.retroactive)


def _notice(w: NoticeShownEvent) -> m.NoticeShown:
    return m.NoticeShown(_model(w.model))


def _reconfirmed(w: BaselineReconfirmedEvent) -> m.BaselineReconfirmed:
    return m.BaselineReconfirmed(tuple(m.BaselineKind(k) for k in w.kinds))


def _end(w: SessionEndEvent) -> m.SessionEnd:
    return m.SessionEnd(w.turns, w.reason)


#: Per wire type (each a final Struct: a record decodes to exactly one of them), its
#: ``event_type`` and the domain body it becomes: one lookup a record, not a chain of
#: ``isinstance`` tests.
_DOMAIN: dict[type, tuple[str, Callable[[Any], m.Body]]] = {
    cls: (str(cls.__struct_config__.tag), body) for cls, body in (
        (TurnEvent, _turn), (SessionStartEvent, _start), (SemanticEvent, _semantic),
        (MemoryWriteEvent, _write), (MemoryWriteBlockedEvent, _blocked),
        (MemoryEraseEvent, _erase), (ModeChangedEvent, _mode_changed),
        (NoticeShownEvent, _notice), (BaselineReconfirmedEvent, _reconfirmed),
        (SessionEndEvent, _end))}


def to_domain(w: WireEvent) -> m.FhrEvent:
    event_type, body = _DOMAIN[type(w)]
    return m.FhrEvent(w.event_id, event_type, w.ts.timestamp(), w.user_id, w.session_id,
                      w.ephemeral, body(w))


def decode_record(key: bytes | None, value: bytes | None
                  ) -> m.FhrEvent | m.Tick | Rejection:
    """An ``fhr.events`` record as an event, a tick (keyed :data:`TICK_KEY`) or a rejection.

    >>> decode_record(TICK_KEY, b'{"schema":"continuity-tick/1"}')
    Rejection(reason='invalid_value', fields=('tick',), event_id=None)
    """
    if key != TICK_KEY:
        return decode_event(key, value)
    return decode_tick(value)


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
    >>> decode_event(b"u 1", ok.replace(b'"u1"', b'"u 1"'))
    Rejection(reason='out_of_range', fields=('user_id',), event_id='e1')
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
    if not is_id(wire.user_id + wire.session_id):  # both ids in one check: the usual case
        name = "session_id" if is_id(wire.user_id) else "user_id"
        return Rejection("out_of_range", (name,), wire.event_id)
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
