"""Tick records: event time moved on a quiet partition (:class:`drift.model.Tick`)."""

from __future__ import annotations

from typing import Literal

import msgspec

from drift import model as m
from streams.edge.fhr_schema import Id, Ts, is_id
from streams.edge.rejection import Rejection
from streams.edge.wire import iso

#: The key of a tick record (:class:`drift.model.Tick`): no user id can be it, since user
#: ids never hold a NUL byte.
TICK_KEY = b"\x00continuity-tick"
TICK_SCHEMA = "continuity-tick/1"


class _TickWire(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["continuity-tick/1"]
    app_id: Id
    ts: Ts


_tick_decoder = msgspec.json.Decoder(_TickWire)
_encoder = msgspec.json.Encoder()


def encode_tick(tick: m.Tick) -> bytes:
    """The value of a tick record.

    >>> decode_tick(encode_tick(m.Tick("continuity-drift", 1.7e9)))
    Tick(app_id='continuity-drift', ts_s=1700000000.0)
    """
    return _encoder.encode({"schema": TICK_SCHEMA, "app_id": tick.app_id,
                            "ts": iso(tick.ts_s).replace("Z", "+00:00")})


def decode_tick(value: bytes | None) -> m.Tick | Rejection:
    """The tick a record keyed :data:`TICK_KEY` holds, or why it holds none.

    >>> decode_tick(b'{"schema":"continuity-tick/1"}')
    Rejection(reason='invalid_value', fields=('tick',), event_id=None)
    """
    try:
        wire = _tick_decoder.decode(value or b"")
    except (msgspec.DecodeError, RecursionError):
        return Rejection("invalid_value", ("tick",))
    if not is_id(wire.app_id):
        return Rejection("invalid_value", ("tick",))
    return m.Tick(wire.app_id, wire.ts.timestamp())
