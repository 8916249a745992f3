"""Worker settings: the codec of what the worker produces, and the client that produces it."""

from __future__ import annotations

import pytest

from streams.settings import CODECS, PRODUCERS, SettingsError, load_settings


def test_the_worker_compresses_with_zstd_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("CONTINUITY_COMPRESSION", raising=False)
    assert load_settings(None, {}).compression == "zstd"
    config = tmp_path / "w.toml"
    for codec in CODECS:
        config.write_text(f'[worker]\ncompression = "{codec}"\n')
        assert load_settings(config, {}).compression == codec


def test_a_codec_kafka_does_not_define_is_refused_with_the_ones_it_does(tmp_path):
    config = tmp_path / "w.toml"
    config.write_text('[worker]\ncompression = "brotli"\n')
    with pytest.raises(SettingsError, match="none, gzip, snappy, lz4, zstd"):
        load_settings(config, {})


def test_the_worker_produces_with_aiokafka_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("CONTINUITY_PRODUCER", raising=False)
    assert load_settings(None, {}).producer == "aiokafka"
    config = tmp_path / "w.toml"
    for client in PRODUCERS:
        config.write_text(f'[worker]\nproducer = "{client}"\n')
        assert load_settings(config, {}).producer == client
    monkeypatch.setenv("CONTINUITY_PRODUCER", "librdkafka")
    assert load_settings(None, {}).producer == "librdkafka"


def test_a_producer_the_worker_has_not_is_refused_with_the_ones_it_has(tmp_path):
    config = tmp_path / "w.toml"
    config.write_text('[worker]\nproducer = "kafkajs"\n')
    with pytest.raises(SettingsError, match="aiokafka, librdkafka"):
        load_settings(config, {})
