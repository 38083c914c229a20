"""etc/harpd.toml and harpd.config stay in step, and config errors name the key.

The shipped file is the admin's only documentation of the settings, so a key
added to the code but not the file (or a default changed in one place only)
must fail here rather than surprise a site later.
"""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from harpd.config import ConfigError, HarpSettings, load_settings

ETC = Path(__file__).resolve().parents[2] / "etc" / "harpd.toml"

_HEADER = re.compile(r"^\s*(#\s*)?\[\[?\s*([A-Za-z0-9_.]+)\s*\]\]?\s*$")
_KEY = re.compile(r"^\s*(#\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("HARP_"):
            monkeypatch.delenv(name)


def _model_at(path: str) -> type[BaseModel]:
    """The pydantic model behind a dotted table name ('dnn.gpu_types' -> GpuType)."""
    model: type[BaseModel] = HarpSettings
    for part in path.split("."):
        assert part in model.model_fields, f"[{path}]: {part!r} is not a config section"
        ann = model.model_fields[part].annotation
        for arg in (ann, *typing.get_args(ann)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model = arg
                break
        else:
            raise AssertionError(f"[{path}] is not a table in harpd.config")
    return model


def _documented_keys() -> list[tuple[str, str, bool, str, bool]]:
    """(table, key, commented, raw value, has comment above) for every key line."""
    found = []
    table = ""  # the active table
    example = ""  # a commented-out table header ("# [[dnn.gpu_types]]") in force
    documented = False
    for line in ETC.read_text().splitlines():
        header = _HEADER.match(line)
        if header:
            if header.group(1):  # a commented example table: belongs to its comment
                example = header.group(2)
            else:
                table, example, documented = header.group(2), "", False
            continue
        key = _KEY.match(line)
        if key and table:
            commented, name, value = bool(key.group(1)), key.group(2), key.group(3)
            where = example if commented and example else table
            found.append((where, name, commented, value, documented))
            if not commented:
                example = ""
            continue
        if line.strip().startswith("#"):
            documented = True
        elif not line.strip():
            documented = False
    return found


def _defaults() -> dict[str, dict[str, object]]:
    return HarpSettings().model_dump()


def test_shipped_file_loads_to_exactly_the_defaults():
    assert load_settings(ETC) == HarpSettings()


def test_every_setting_is_in_the_file_and_every_file_key_is_a_setting():
    defaults = _defaults()
    data = tomllib.loads(ETC.read_text())
    assert set(data) == set(defaults), "sections differ between etc/harpd.toml and harpd.config"
    lines = {(t, k): c for t, k, c, _, _ in _documented_keys()}
    for section, values in defaults.items():
        for key, default in values.items():
            assert (section, key) in lines, f"[{section}] {key} is missing from etc/harpd.toml"
            if default is None:
                # TOML has no null: an unset default is shown as a commented example.
                assert lines[(section, key)], f"[{section}] {key} defaults to unset; show it commented out"
                assert key not in data[section]
            else:
                assert key in data[section], f"[{section}] {key} must be set to its default {default!r}"
        for key in data[section]:
            assert key in values, f"[{section}] {key} in etc/harpd.toml is not a setting"


def test_each_value_in_the_file_equals_its_default():
    defaults = _defaults()
    loaded = load_settings(ETC).model_dump()
    for section, values in tomllib.loads(ETC.read_text()).items():
        for key in values:
            assert loaded[section][key] == defaults[section][key], f"[{section}] {key}"


def test_commented_keys_are_real_settings_and_valid_when_uncommented():
    for table, key, commented, raw, _ in _documented_keys():
        model = _model_at(table)
        assert key in model.model_fields, f"[{table}] {key} is not a setting"
        if not commented or "." in table:
            continue
        section = table
        value = tomllib.loads(f"v = {raw}")["v"]
        HarpSettings(**{section: {key: value}})  # raises if the example is invalid


def test_commented_table_example_is_valid():
    # The [[dnn.gpu_types]] example, uncommented, must be accepted as is.
    text = ETC.read_text()
    block = re.search(r"^# \[\[dnn\.gpu_types\]\]\n((?:# \w+ = .*\n)+)", text, re.M)
    assert block, "etc/harpd.toml lacks the commented [[dnn.gpu_types]] example"
    example = tomllib.loads(block.group(1).replace("# ", ""))
    settings = HarpSettings(dnn={"gpu_types": [example]})
    assert settings.dnn.gpu_types[0].name == example["name"]


def test_every_key_has_a_comment_above_it():
    undocumented = [f"[{t}] {k}" for t, k, _, _, doc in _documented_keys() if not doc]
    assert not undocumented, f"keys without an explaining comment: {undocumented}"


# ---- errors name the key -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[predict]\nalpha_time = 2\n", "predict.alpha_time"),
        ("[server]\nmax_clients = \"many\"\n", "server.max_clients"),
        ("[server]\nsokcet = \"/tmp/x.sock\"\n", "server.sokcet"),
        ("[nosuch]\nx = 1\n", "nosuch"),
        ("[recovery]\nmax_attempts = 0\n", "recovery.max_attempts"),
        ("[predict]\ncores_tolerance = -0.1\n", "predict.cores_tolerance"),
        ("[predict]\ncores_tolerance = 1.0\n", "predict.cores_tolerance"),
        ("[dnn]\n[[dnn.gpu_types]]\nname = \"a100\"\n", "dnn.gpu_types.0"),
        ("[metrics]\nlisten = \"9817\"\n", "metrics.listen"),
        ("[metrics]\nallow = [\"10.0.0.0/33\"]\n", "metrics.allow"),
        ("[metrics]\nallow = [\"prometheus-host\"]\n", "metrics.allow"),
    ],
)
def test_bad_value_error_names_the_key(tmp_path, text, key):
    p = tmp_path / "harpd.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(p)
    msg = str(err.value)
    assert key in msg
    assert str(p) in msg
    assert "\n" not in msg


def test_bad_toml_says_so_in_one_line(tmp_path):
    p = tmp_path / "harpd.toml"
    p.write_text("[server\nsocket = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML") as err:
        load_settings(p)
    assert "\n" not in str(err.value)


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_settings(tmp_path / "absent.toml")


def test_environment_overrides_the_file(tmp_path, monkeypatch):
    p = tmp_path / "harpd.toml"
    p.write_text("[server]\nmax_clients = 5\n[predict]\nmin_history = 7\n")
    monkeypatch.setenv("HARP_SERVER__MAX_CLIENTS", "3")
    s = load_settings(p)
    assert s.server.max_clients == 3
    assert s.predict.min_history == 7


def test_bad_environment_value_names_the_key(tmp_path, monkeypatch):
    p = tmp_path / "harpd.toml"
    p.write_text("")
    monkeypatch.setenv("HARP_PREDICT__ALPHA_TIME", "lots")
    with pytest.raises(ConfigError) as err:
        load_settings(p)
    assert "predict.alpha_time" in str(err.value)
