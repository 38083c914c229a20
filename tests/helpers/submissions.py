"""A stored submission built from a partial row, for tests of what reads one (``harpd.records.Submission``)."""

from __future__ import annotations

from typing import Any

from harpd.records import Submission


def stored_submission(row: dict[str, Any] | None = None, **cols: Any) -> Submission:
    """The ``Submission`` the store would return for ``row`` (decoded JSON columns); the rest defaulted."""
    return Submission.from_row(
        {"job_id": "1", "uid": 1000, "submitted_at": 0.0, "state": "pending", **(row or {}), **cols}
    )
