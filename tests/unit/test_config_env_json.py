"""A HARP_* variable that must hold JSON (a list, a table) and does not: the error names it."""

from __future__ import annotations

import os

import pytest

from harpd.config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.upper().startswith("HARP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HARP_CONFIG", str(tmp_path / "harpd.toml"))
    (tmp_path / "harpd.toml").write_text("")


@pytest.mark.parametrize(
    "name, value",
    [
        ("HARP_DNN__GPU_TYPES", "[oops"),
        ("HARP_SERVER__LISTEN", "notjson"),
        ("HARP_CLIENT__SERVERS", "a,b"),
        ("HARP_CLIENT__SERVERS", "{"),
    ],
)
def test_the_variable_is_named(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARP_SERVER__SOCKET", "/run/x.sock")  # a plain string key: never blamed
    with pytest.raises(ConfigError) as info:
        load_settings()
    text = str(info.value)
    assert text.startswith(f"{name}={value!r} is not valid JSON")
    assert "HARP_SERVER__SOCKET" not in text and "\n" not in text


def test_valid_json_lists_are_read(monkeypatch):
    monkeypatch.setenv("HARP_CLIENT__SERVERS", '["h1:7000", "h2:7000"]')
    assert load_settings().client.servers == ["h1:7000", "h2:7000"]


def test_a_config_in_a_directory_this_user_cannot_search(monkeypatch, tmp_path):
    """Path.exists() raises there: one line, not a traceback."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "harpd.toml").write_text("")
    monkeypatch.setenv("HARP_CONFIG", str(private / "harpd.toml"))
    import pathlib

    real = pathlib.Path.exists

    def denied(self, *a, **kw):
        if str(self).startswith(str(private)):
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "exists", denied)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == f"{private / 'harpd.toml'}: cannot read (Permission denied)"
