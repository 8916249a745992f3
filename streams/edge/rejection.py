"""Why a record or a record batch goes to the dead-letter topic: the reason codes."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class BatchFault(enum.Enum):
    """Why a whole record batch could not be read (``streams.kafka.batches``): its dead letter's
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


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record went to the dead-letter topic: a reason code and field names only."""

    reason: str
    fields: tuple[str, ...]
    event_id: str | None = None
