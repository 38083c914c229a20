"""Fixtures shared by the replay tests (tests/unit/predict, tests/unit/evaluate)."""

from __future__ import annotations

import pytest


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    """An empty harpd.toml as HARP_CONFIG: the CLI runs on the defaults, never on this machine's config."""
    (tmp_path / "empty.toml").write_text("")
    monkeypatch.setenv("HARP_CONFIG", str(tmp_path / "empty.toml"))
