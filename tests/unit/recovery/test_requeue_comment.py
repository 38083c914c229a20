"""A requeue appends harp's marker to the job's comment instead of replacing it.

Workflow managers read the comment back (Snakemake's Slurm executor names the
rule there for its efficiency report), and a requeued job keeps its id, so
the comment must still say what the manager wrote.
"""

from __future__ import annotations

import pytest

from harpd.recovery.attempts import AttemptLimits, Plan, marker, with_marker
from harpd.recovery.requeue import pending_changes
from harpd.slurm.base import JobInfo


@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        (None, "harp retry 2 of 7"),
        ("", "harp retry 2 of 7"),
        ("rule_work_wildcards_s1", "rule_work_wildcards_s1; harp retry 2 of 7"),
        # an earlier attempt's marker is replaced, not piled up
        ("rule_work; harp retry 2 of 7", "rule_work; harp retry 2 of 7"),
        # a requeued job starts again at its attempt's limit: an extension's note is no longer true
        ("rule_work; harp extended 1 min -> 2 min; harp retry 2 of 7", "rule_work; harp retry 2 of 7"),
        ("rule_work; harp extended 1 min -> 2 min", "rule_work; harp retry 2 of 7"),
    ],
)
def test_marker_is_appended_once(comment, expected) -> None:
    assert with_marker(comment, marker("7", 2)) == expected


def test_a_later_attempt_replaces_the_earlier_marker() -> None:
    assert with_marker("rule_work; harp retry 2 of 7", marker("7", 3)) == "rule_work; harp retry 3 of 7"


def test_requeue_keeps_the_managers_comment() -> None:
    plan = Plan(limits=AttemptLimits(time_s=120), escalated="time", comment=marker("7", 2))
    held = JobInfo(
        job_id="7",
        state="PENDING",
        reason="job_requeued_in_held_state",
        restarts=1,
        time_limit_s=60,
        comment="rule_slow_wildcards_s1",
    )
    changes = pending_changes(held, plan)
    assert changes["comment"] == "rule_slow_wildcards_s1; harp retry 2 of 7"
    assert changes["time_limit_s"] == 120
    # carried out again after a crash: the comment already holds the marker, nothing to change
    done = JobInfo(
        job_id="7",
        state="PENDING",
        reason="job_requeued_in_held_state",
        restarts=1,
        time_limit_s=120,
        comment=changes["comment"],
    )
    assert "comment" not in pending_changes(done, plan)
