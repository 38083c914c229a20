"""Fixtures of the ingest tests (helpers live in ingest_helpers.py)."""

from __future__ import annotations

import pytest
from ingest_helpers import fixture_text


@pytest.fixture
def json_2205() -> str:
    return fixture_text("22.05-jobs.json")


@pytest.fixture
def json_2311() -> str:
    return fixture_text("23.11-constructed.json")


@pytest.fixture
def psv_2205() -> str:
    return fixture_text("22.05-jobs.psv")


@pytest.fixture
def psv_2205_epoch() -> str:
    return fixture_text("22.05-jobs-epoch.psv")


@pytest.fixture
def store(tmp_path):
    from harpd.store import Store

    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()
