"""The decoder accepts exactly what fhr-1.schema.json accepts, on valid and invalid samples."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drift.model import BaselineKind, BaselineReconfirmed, MemoryErase, Mode, ModeChanged
from drift.simulation import Scenario, simulate
from streams.edge.codec import decode_event, encode_event
from streams.edge.fhr_schema import ID_PATTERN, is_id
from streams.edge.rejection import Rejection
from tests.builders import UserScript
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "schemas" / "fhr-1.schema.json"
CONTRACT_PATH = ROOT.parent / "shared" / "schemas" / "fhr-1.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


def _valid_samples() -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for events, _ in simulate(2, list(Scenario), 1, 1.7e9):
        for e in events:
            out.setdefault(e.event_type, json.loads(encode_event(e)))
    script = UserScript("codec-user")
    for body in (MemoryErase("relational", "style", "user_request", "req-9"),
                 ModeChanged(Mode.FULL, Mode.LIGHT, "consent-2", False),
                 BaselineReconfirmed((BaselineKind.SAFETY, BaselineKind.SEMANTIC))):
        e = script.emit("s-1", body, ephemeral=True)
        out.setdefault(e.event_type, json.loads(encode_event(e)))
    return list(out.values())


VALID = _valid_samples()
BY_TYPE = {s["event_type"]: s for s in VALID}


def _mutate(base: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()

INVALID: list[tuple[str, list[str], Any, str]] = [
    ("turn", ["dynamics", "trust"], 1.5, "out_of_range"),
    ("turn", ["dynamics", "valence"], -1.01, "out_of_range"),
    ("turn", ["dynamics", "user_tokens"], -1, "out_of_range"),
    ("turn", ["dynamics", "friction"], "yes", "wrong_type"),
    ("turn", ["dynamics", "extra"], 1, "unknown_field"),
    ("turn", ["states", "ae_severity"], "severe", "invalid_value"),
    ("turn", ["turn"], 0, "out_of_range"),
    ("turn", ["turn"], "3", "wrong_type"),
    ("turn", ["dynamics", "trust"], _DELETE, "missing_field"),
    ("session_start", ["continuity_mode"], "forever", "invalid_value"),
    ("session_start", ["model", "model_version"], "m" * 501, "raw_content_rejected"),
    ("session_start", ["schema"], "fhr/2", "unknown_schema"),
    ("session_start", ["user_id"], "has space", "out_of_range"),
    ("session_start", ["user_id"], "u" * 129, "out_of_range"),
    ("turn", ["session_id"], "s/1", "out_of_range"),
    ("session_start", ["ts"], "2026-11-30T10:00:00", "invalid_timestamp"),
    ("session_start", ["ts"], "yesterday", "invalid_timestamp"),
    ("session_start", ["event_id"], "e" * 65, "out_of_range"),
    ("session_start", ["event_type"], "session_pause", "unknown_event_type"),
    ("session_start", ["notes"], "free text", "unknown_field"),
    ("semantic", ["stance"], "maybe", "invalid_value"),
    ("memory_write", ["category"], "hobbies", "invalid_value"),
    ("memory_write", ["confirmed"], 1, "wrong_type"),
    ("session_end", ["reason"], "crashed", "invalid_value"),
    ("session_end", ["ephemeral"], "no", "wrong_type"),
]


def test_the_vendored_schema_is_the_contract() -> None:
    if not CONTRACT_PATH.exists():
        pytest.skip(f"no contract checkout beside the repository at {CONTRACT_PATH}")
    assert json.loads(CONTRACT_PATH.read_text()) == SCHEMA


def test_every_event_type_has_a_valid_sample() -> None:
    assert len(BY_TYPE) == 10


@pytest.mark.parametrize("sample", VALID, ids=lambda s: s["event_type"])
def test_valid_samples_pass_both(sample: dict[str, Any]) -> None:
    VALIDATOR.validate(sample)
    result = decode_event(sample["user_id"].encode(), json.dumps(sample).encode())
    assert not isinstance(result, Rejection), result
    assert result.event_type == sample["event_type"]  # each wire type has its domain body


@pytest.mark.parametrize("event_type,path,value,reason", INVALID,
                         ids=[f"{t}:{'.'.join(p)}:{r}" for t, p, _, r in INVALID])
def test_invalid_samples_fail_both_with_the_reason(
        event_type: str, path: list[str], value: Any, reason: str) -> None:
    doc = _mutate(BY_TYPE[event_type], path, value)
    assert not VALIDATOR.is_valid(doc)
    raw = json.dumps(doc).encode()
    result = decode_event(str(doc.get("user_id", "")).encode(), raw)
    assert isinstance(result, Rejection)
    assert result.reason == reason
    if reason == "raw_content_rejected":
        assert result.fields == (".".join(path),)
    assert isinstance(value, str) is False or value not in repr(result)


def test_key_must_equal_user_id() -> None:
    sample = BY_TYPE["session_end"]
    result = decode_event(b"someone-else", json.dumps(sample).encode())
    assert result == Rejection("key_mismatch", ("user_id",), sample["event_id"])


def test_integral_floats_are_integers_as_in_json_schema() -> None:
    doc = copy.deepcopy(BY_TYPE["turn"])
    doc["turn"] = 3.0
    assert VALIDATOR.is_valid(doc)
    result = decode_event(doc["user_id"].encode(), json.dumps(doc).encode())
    assert not isinstance(result, Rejection)


def test_duplicate_reconfirmed_kinds_are_rejected_as_the_schema_does() -> None:
    doc = copy.deepcopy(BY_TYPE["baseline_reconfirmed"])
    assert VALIDATOR.is_valid(doc)
    doc["kinds"] = ["safety", "safety"]
    assert not VALIDATOR.is_valid(doc)
    result = decode_event(doc["user_id"].encode(), json.dumps(doc).encode())
    assert isinstance(result, Rejection) and result.reason == "out_of_range"


@settings(max_examples=examples(150), deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=3)
                    | st.dictionaries(st.text(max_size=8), children, max_size=4),
                    max_leaves=10))
def test_arbitrary_json_never_crashes_and_agrees_with_the_schema(doc: Any) -> None:
    raw = json.dumps(doc).encode()
    result = decode_event(b"k", raw)
    if VALIDATOR.is_valid(doc):
        assert not isinstance(result, Rejection) or result.reason == "key_mismatch"
    else:
        assert isinstance(result, Rejection)


@settings(max_examples=examples(60), deadline=None)
@given(st.sampled_from(VALID), st.integers(min_value=0, max_value=2**32 - 1))
def test_single_field_perturbations_agree_with_the_schema(base: dict[str, Any], seed: int
                                                          ) -> None:
    rng = np.random.default_rng(seed)
    doc = copy.deepcopy(base)
    keys = [k for k in doc if k not in ("schema", "event_type", "user_id")]
    key = keys[int(rng.integers(len(keys)))]
    doc[key] = [None, True, -5, 2.5, "", "x" * 600, {"a": 1}, []][int(rng.integers(8))]
    result = decode_event(base["user_id"].encode(), json.dumps(doc).encode())
    assert VALIDATOR.is_valid(doc) == (not isinstance(result, Rejection))


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("._:-\n"), max_size=12)
       | st.text(alphabet="ab._:-\n \t/", max_size=6))
def test_id_characters_are_the_schemas_pattern(text: str) -> None:
    # JSON Schema reads the pattern as ECMA 262, where "$" is the end of the text only.
    assert is_id(text) == (re.fullmatch(ID_PATTERN.strip("^$"), text) is not None)


def test_an_id_with_a_trailing_newline_is_rejected() -> None:
    # Python's jsonschema reads "$" as Python does and lets "u\n" through; the schema does not.
    doc = copy.deepcopy(BY_TYPE["turn"])
    doc["session_id"] = doc["session_id"] + "\n"
    result = decode_event(doc["user_id"].encode(), json.dumps(doc).encode())
    assert result == Rejection("out_of_range", ("session_id",), doc["event_id"])
