"""Fixtures of the DNN tests (helpers live in dnn_helpers.py)."""

from __future__ import annotations

import pytest
from dnn_helpers import site_settings


@pytest.fixture
def site():
    return site_settings()
