"""``scontrol show job -o`` lines as the watcher's typed records."""

from __future__ import annotations

from harpd.slurm.scontrol import parse_kv_line, queued_job

RUNNING = (
    "JobId=224 JobName=sleep.sh UserId=harptest1(1001) GroupId=harptest1(1001) MCS_label=N/A "
    "Priority=1 JobState=RUNNING Reason=None Dependency=(null) RunTime=00:00:42 TimeLimit=00:01:00 "
    "SubmitTime=2026-11-23T21:40:00 StartTime=2026-11-23T21:40:01 Partition=debug "
    "Comment=harp retry 2 of 220; harp extended 1 min -> 2 min MinMemoryNode=100M"
)
ARRAY = (
    "JobId=300 ArrayJobId=300 ArrayTaskId=2-9 JobName=a.sh UserId=alice(1000) JobState=PENDING "
    "Reason=Resources RunTime=00:00:00 TimeLimit=01:00:00 StartTime=Unknown Partition=debug"
)


def test_running_job():
    j = queued_job(parse_kv_line(RUNNING))
    assert (j.job_id, j.user, j.uid, j.state) == ("224", "harptest1", 1001, "RUNNING")
    assert (j.time_limit_s, j.time_used_s, j.time_left_s) == (60, 42, 18)
    assert j.comment == "harp retry 2 of 220; harp extended 1 min -> 2 min" and j.mem_mb == 100
    assert j.start_time is not None and j.running and not j.pending


def test_pending_array_tasks_act_through_the_array_id():
    j = queued_job(parse_kv_line(ARRAY))
    assert (j.job_id, j.array_job_id, j.array_task, j.pending) == ("300", "300", None, True)
    assert j.start_time is None and j.time_limit_s == 3600
    assert (j.tasks, j.reason, j.eligible) == (8, "Resources", True)  # 2-9: the record stands for 8 jobs
    line = "JobId=301" + ARRAY[len("JobId=300") :].replace("ArrayTaskId=2-9", "ArrayTaskId=1")
    task = queued_job(parse_kv_line(line))
    assert task.job_id == "300_1" and task.array_task == "1" and task.tasks == 1


def test_unknown_owner_and_unlimited_time_are_none():
    j = queued_job(parse_kv_line("JobId=5 UserId=(null) JobState=PENDING TimeLimit=UNLIMITED RunTime=00:00:00"))
    assert j.user is None and j.time_limit_s is None and j.time_left_s is None
    assert j.reason is None and j.eligible  # no reason printed: in line
