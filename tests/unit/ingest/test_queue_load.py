"""harpd.slurm.queue_load: the queue's load at a decision, from one cached squeue answer."""

from __future__ import annotations

from harpd.predict.queue_policy import queue_cut, view_of
from harpd.slurm.base import PartitionInfo, QueuedJob
from harpd.slurm.queue_load import queue_load, total_cores


def _part(name: str, nodes: tuple[str, ...], cpus: int) -> PartitionInfo:
    return PartitionInfo(name, 86400, 64000, cpus, len(nodes), node_names=nodes)


PARTS = {"a": _part("a", ("n1", "n2"), 16), "b": _part("b", ("n2", "n3"), 32)}


def test_each_node_counts_once_with_its_largest_partition():
    # n1: 16, n2: in both, 32, n3: 32
    assert total_cores(PARTS) == 80
    # no node list: the partition's own nodes x processors
    assert total_cores({"x": PartitionInfo("x", None, None, 8, 4)}) == 32
    assert total_cores({}) == 0


def test_the_backlog_is_the_pending_jobs_limits_times_their_processors():
    jobs = [
        QueuedJob("1", "RUNNING", time_limit_s=600, cpus_per_task=4, num_tasks=1),
        QueuedJob("2", "PENDING", time_limit_s=3600, cpus_per_task=2, num_tasks=3),  # 6 x 3600
        QueuedJob("3", "PENDING", time_limit_s=100),  # 1 x 100
        QueuedJob("4", "PENDING", time_limit_s=None, cpus_per_task=8),  # unlimited: adds nothing
        QueuedJob("5", "COMPLETING"),
    ]
    load = queue_load(jobs, PARTS)
    assert (load.pending_jobs, load.backlog_core_s, load.running_jobs, load.total_cores) == (3, 21700.0, 1, 80)
    v = view_of(load, now=5.0)
    assert (v.pending_jobs, v.backlog_core_s, v.running_jobs, v.now, v.total_cores) == (3, 21700.0, 1, 5.0, 80)
    # the same rule as the replay's: the machine is busy 21700 / 80 = 271.25 s
    assert queue_cut(v, 1000.0, 800.0).limit_s == 800.0  # shorter than the request: the cut stands
    assert queue_cut(v, 200.0, 100.0).limit_s == 200.0  # longer, and a shallow cut: the request
    assert queue_cut(v, 200.0, 40.0).limit_s == 40.0  # longer, and a deep cut: it stands


def test_only_jobs_in_line_for_processors_count_and_a_pending_array_counts_each_task():
    jobs = [
        QueuedJob("1", "PENDING", time_limit_s=600, reason="Priority"),
        QueuedJob("2", "PENDING", time_limit_s=600, reason=None),  # not yet looked at: in line
        QueuedJob("3", "PENDING", time_limit_s=600, reason="JobHeldUser"),
        QueuedJob("4", "PENDING", time_limit_s=600, reason="JobHeldAdmin"),
        QueuedJob("5", "PENDING", time_limit_s=600, reason="Dependency"),
        QueuedJob("6", "PENDING", time_limit_s=600, reason="BeginTime"),
        QueuedJob("7", "PENDING", time_limit_s=600, reason="JobArrayTaskLimit", array_job_id="7", tasks=50),
        QueuedJob("8", "PENDING", time_limit_s=100, reason="Resources", array_job_id="8", tasks=4, num_tasks=2),
    ]
    load = queue_load(jobs, PARTS)
    assert load.pending_jobs == 1 + 1 + 4
    assert load.backlog_core_s == 600 + 600 + 4 * 2 * 100


def test_a_user_holding_many_jobs_does_not_deepen_everyone_s_queue():
    held = [
        QueuedJob(str(i), "PENDING", time_limit_s=86400, cpus_per_task=64, reason="JobHeldUser") for i in range(1000)
    ]
    load = queue_load(held, PARTS)
    assert (load.pending_jobs, load.backlog_core_s) == (0, 0.0)
    assert queue_cut(view_of(load, 0.0), 200.0, 100.0).limit_s == 100.0  # harp's cut stands


def test_the_recorded_squeue_documents_give_reasons_and_array_task_counts():
    from pathlib import Path

    from harpd.slurm.squeue_json import parse_squeue_json, queued_jobs

    root = Path(__file__).parents[2] / "fixtures" / "squeue"
    for name, array_id, tasks in (("22.05-jobs.json", "8", 4), ("26.05-jobs.json", "2", 3)):
        jobs = queued_jobs(parse_squeue_json((root / name).read_text()), now=0.0)
        array = [j for j in jobs if j.job_id == array_id]
        assert len(array) == 1 and array[0].array_task is None and array[0].tasks == tasks, name
        assert array[0].reason == "JobHeldUser" and not array[0].eligible, name
        assert all(j.tasks == 1 for j in jobs if j.job_id != array_id), name
        assert any(j.running for j in jobs) and not any(j.eligible for j in jobs), name  # every pending one is held
