"""Recovery escalates from what an attempt really ran with: the ledger's later changes of it (#45)."""

from __future__ import annotations

from harpd.records import LimitChange
from harpd.recovery.attempts import AttemptLimits, as_ran


def _change(kind: str, at: float, **cols) -> LimitChange:
    base = dict(job_id="53", kind=kind, old_time_s=180, new_time_s=180, old_mem_mb=None, new_mem_mb=None)
    return LimitChange(**{**base, **cols}, step="done", reason="", created_at=at, updated_at=at)


def test_a_floor_lift_of_the_pending_attempt_is_what_it_ran_with_earlier_changes_are_not():
    planned = AttemptLimits(time_s=180, mem_mb=1082)
    rows = [
        _change("resize-mem", 5.0, old_mem_mb=2000, new_mem_mb=541),  # the attempt before: not this one's
        _change("lift-mem", 20.0, old_mem_mb=1082, new_mem_mb=2000),
        _change("extend", 30.0, old_time_s=180, new_time_s=600),
        _change("signal", 31.0, new_time_s=999),  # not a limit
    ]
    ran = as_ran(rows, 10.0, planned)
    assert ran.mem_mb == 2000 and ran.time_s == 600
    assert as_ran([], 10.0, planned) is planned
    per_cpu = AttemptLimits(time_s=180, mem_per_cpu_mb=500)  # a --mem change says nothing of --mem-per-cpu
    assert as_ran(rows, 10.0, per_cpu).mem_per_cpu_mb == 500 and as_ran(rows, 10.0, per_cpu).mem_mb is None
