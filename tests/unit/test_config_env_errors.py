"""Config errors in a sysadmin's words: every wrong HARP_* variable or key named, one line each."""

from __future__ import annotations

import os

import pytest

from harpd.cli.main import main as harp
from harpd.config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("HARP_"):
            monkeypatch.delenv(name)


BAD_ENV = {
    "HARP_RETRAIN__INTERVAL_S": ("abc", "must be a number of seconds, got 'abc'"),
    "HARP_PREDICT__ALPHA_TIME": ("2", "must be less than 1"),
    "HARP_RECOVERY__ENABLED": ("maybe", "must be true or false"),
    "HARP_SERVER__LOG_LEVEL": ("loud", "must be one of"),
    "HARP_PREDICT__ALPHA_TIMEE": ("0.1", "did you mean alpha_time?"),
}


def test_every_bad_environment_variable_is_named_on_its_own_line(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text("[predict]\nmin_history = 3\n")
    for var, (value, _) in BAD_ENV.items():
        monkeypatch.setenv(var, value)
    assert harp(["--config", str(cfg), "dnn", "check"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 + len(BAD_ENV) and str(len(BAD_ENV)) in lines[0]
    for var, (_, words) in BAD_ENV.items():
        mine = [ln for ln in lines if f"{var} " in ln]
        assert len(mine) == 1 and words in mine[0], (var, lines)
        assert str(cfg) not in mine[0]  # not blamed on the file
    text = "\n".join(lines)
    assert "Input should be" not in text and "valid number" not in text and "Extra inputs" not in text


def test_file_keys_are_named_with_the_file(tmp_path):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text("[store]\nbusy_timeout_s = \"soon\"\n[predict]\nmin_history = 0\n")
    with pytest.raises(ConfigError) as ei:
        load_settings(cfg)
    lines = str(ei.value).splitlines()
    assert len(lines) == 3
    assert any(f"store.busy_timeout_s in {cfg}: must be a number of seconds, got 'soon'" in ln for ln in lines)
    assert any(f"predict.min_history in {cfg}: must be at least 1, got 0" in ln for ln in lines)


def test_the_environment_is_blamed_when_it_overrides_the_file(tmp_path, monkeypatch):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text("[server]\nmax_clients = 5\n")
    monkeypatch.setenv("harp_server__max_clients", "-3")
    with pytest.raises(ConfigError) as ei:
        load_settings(cfg)
    msg = str(ei.value)
    assert "\n" not in msg and "harp_server__max_clients (environment variable" in msg
    assert "server.max_clients" in msg and "must be greater than 0, got '-3'" in msg


def test_a_missing_harp_config_is_one_line_naming_the_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARP_CONFIG", str(tmp_path / "absent.toml"))
    assert harp(["dnn", "check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"HARP_CONFIG={tmp_path / 'absent.toml'}" in err and "no such config file" in err
