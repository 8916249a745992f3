"""Worker settings: the codec of what the worker produces, and the client that produces it."""

from __future__ import annotations

import pytest

from streams.settings import CODECS, PRODUCERS, SettingsError, load_settings

#: (setting, its default, every value it takes, one it refuses, what the refusal lists)
CHOICES = [("compression", "zstd", CODECS, "brotli", "none, gzip, snappy, lz4, zstd"),
           ("producer", "aiokafka", PRODUCERS, "kafkajs", "aiokafka, librdkafka")]


@pytest.mark.parametrize(("name", "default", "values", "_refused", "_listed"), CHOICES)
def test_a_choice_has_its_default_and_takes_each_value_from_file_and_environment(
        tmp_path, monkeypatch, name, default, values, _refused, _listed):
    env = f"CONTINUITY_{name.upper()}"
    monkeypatch.delenv(env, raising=False)
    assert getattr(load_settings(None, {}), name) == default
    config = tmp_path / "w.toml"
    for value in values:
        config.write_text(f'[worker]\n{name} = "{value}"\n')
        assert getattr(load_settings(config, {}), name) == value
        monkeypatch.setenv(env, value)
        assert getattr(load_settings(None, {}), name) == value
        monkeypatch.delenv(env)


@pytest.mark.parametrize(("name", "_default", "_values", "refused", "listed"), CHOICES)
def test_a_value_the_worker_has_not_is_refused_with_the_ones_it_has(
        tmp_path, name, _default, _values, refused, listed):
    config = tmp_path / "w.toml"
    config.write_text(f'[worker]\n{name} = "{refused}"\n')
    with pytest.raises(SettingsError, match=listed):
        load_settings(config, {})
