"""Fixtures of the report tests (helpers live in report_helpers.py)."""

from __future__ import annotations

import pytest

from harpd.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()
