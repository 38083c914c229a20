"""Classification and usage: every outcome class, censoring, peak memory."""

from __future__ import annotations

import pytest
from ingest_helpers import by_name, fixture_text, sjob, step

from harpd.records import Outcome
from harpd.slurm.classify import OOM_RSS_FRACTION, classify, to_record, to_records
from harpd.slurm.sacct_json import parse_json
from harpd.slurm.sacct_text import parse_parsable2

# what the recorded 22.05 jobs must come out as, whichever way sacct printed them
EXPECTED_2205 = {
    "fx-completed": (Outcome.COMPLETED, False, False),
    "fx-timeout": (Outcome.TIMEOUT, True, False),
    "fx-oom": (Outcome.OOM, False, True),
    "fx-failed": (Outcome.FAILED, False, False),
    "fx-cancelled": (Outcome.CANCELLED, False, False),
    "fx-array": (Outcome.COMPLETED, False, False),
    "fx-percpu": (Outcome.COMPLETED, False, False),
    "fx-steps": (Outcome.COMPLETED, False, False),
    "fx-stepoom": (Outcome.OOM, False, True),
    "fx-gpu": (Outcome.COMPLETED, False, False),
}


@pytest.mark.parametrize("name", ["22.05-jobs.json", "22.05-jobs.psv", "22.05-jobs-epoch.psv"])
def test_recorded_2205_jobs_classified(name):
    text = fixture_text(name)
    jobs = parse_json(text) if name.endswith(".json") else parse_parsable2(text)
    recs = by_name(to_records(jobs, "harptest"))
    assert set(recs) == set(EXPECTED_2205)
    for job_name, (outcome, c_time, c_mem) in EXPECTED_2205.items():
        for r in recs[job_name]:
            assert (r.outcome, r.censored_time, r.censored_mem) == (outcome, c_time, c_mem), job_name
            assert r.source == "harptest"


def test_recorded_2205_usage():
    recs = by_name(to_records(parse_json(fixture_text("22.05-jobs.json"))))
    done = recs["fx-completed"][0]
    assert done.used_time_s == 4.0 and done.req_time_s == 120.0
    assert done.used_mem_mb == pytest.approx(46923776 / 2**20)  # 45 MiB python
    assert done.req_mem_mb == 100.0 and done.used_cpu_s == pytest.approx(0.12483)
    oom = recs["fx-oom"][0]
    assert oom.used_mem_mb >= oom.req_mem_mb  # the lower bound it died at
    timeout = recs["fx-timeout"][0]
    assert timeout.used_time_s >= timeout.req_time_s
    # two 43 MiB tasks on one node: 86 MiB on the node, capped by the task total
    steps = recs["fx-steps"][0]
    assert steps.used_mem_mb == pytest.approx(90619904 / 2**20)
    assert recs["fx-gpu"][0].req_gpus == 1


def test_constructed_2311_jobs_classified():
    recs = by_name(to_records(parse_json(fixture_text("23.11-constructed.json"))))
    assert recs["fx-oom"][0].outcome is Outcome.OOM and recs["fx-oom"][0].censored_mem
    assert recs["fx-timeout"][0].outcome is Outcome.TIMEOUT and recs["fx-timeout"][0].censored_time
    assert recs["fx-failed"][0].outcome is Outcome.FAILED and recs["fx-failed"][0].exit_code == 1
    assert recs["fx-cancelled"][0].outcome is Outcome.CANCELLED
    assert recs["fx-running"][0].outcome is Outcome.RUNNING
    assert recs["fx-unlimited"][0].req_time_s is None
    first, second = recs["fx-requeued"]
    # the earlier run of a requeued job ran past its 1-minute limit: a timeout
    assert (first.outcome, first.censored_time, first.attempt) == (Outcome.TIMEOUT, True, 1)
    assert (second.outcome, second.attempt, second.req_mem_mb) == (Outcome.COMPLETED, 2, 600.0)


# ----------------------------------------------------------- each rule


@pytest.mark.parametrize(
    "state, outcome",
    [
        ("COMPLETED", Outcome.COMPLETED),
        ("FAILED", Outcome.FAILED),
        ("CANCELLED", Outcome.CANCELLED),
        ("NODE_FAIL", Outcome.NODE_FAIL),
        ("BOOT_FAIL", Outcome.NODE_FAIL),
        ("PREEMPTED", Outcome.PREEMPTED),
        ("DEADLINE", Outcome.CANCELLED),
        ("SPECIAL_EXIT", Outcome.FAILED),
        ("RUNNING", Outcome.RUNNING),
        ("PENDING", Outcome.RUNNING),
        ("REQUEUE_HOLD", Outcome.RUNNING),
        ("SUSPENDED", Outcome.RUNNING),
        ("WHATEVER_NEW", Outcome.UNKNOWN),
    ],
)
def test_state_map(state, outcome):
    assert classify(sjob(state, step()))[0] is outcome


def test_unfinished_never_counts_as_finished():
    assert not classify(sjob("RUNNING"))[0].finished
    assert classify(sjob(None))[0] is Outcome.UNKNOWN


def test_oom_state_on_job_or_step_only():
    assert classify(sjob("OUT_OF_MEMORY", step())) == (Outcome.OOM, False, True)
    assert classify(sjob("FAILED", step(state="OUT_OF_MEMORY"))) == (Outcome.OOM, False, True)


def test_oom_exit_125():
    assert classify(sjob("FAILED", exit_signal=125))[0] is Outcome.OOM
    assert classify(sjob("FAILED", step(signal=125)))[0] is Outcome.OOM


def test_sigkill_with_rss_at_the_limit_is_oom():
    at_limit = step(state="CANCELLED", rss=100.0 * OOM_RSS_FRACTION, signal=9)
    assert classify(sjob("FAILED", at_limit, exit_signal=9)) == (Outcome.OOM, False, True)


def test_sigkill_below_the_limit_is_a_plain_failure():
    small = step(state="CANCELLED", rss=40.0, signal=9)
    assert classify(sjob("FAILED", small, exit_signal=9)) == (Outcome.FAILED, False, False)


def test_sigkill_without_any_request_is_not_oom():
    big = step(state="CANCELLED", rss=5000.0, signal=9)
    assert classify(sjob("FAILED", big, exit_signal=9, req_mem_mb=None))[0] is Outcome.FAILED


def test_oom_threshold_is_per_node():
    """2 nodes x 100 MiB: a task at 95 MiB on one node hit its node's limit."""
    s = step(state="CANCELLED", rss=96.0, signal=9, ntasks=2, nnodes=2)
    job = sjob("FAILED", s, exit_signal=9, req_mem_mb=200.0, alloc_nodes=2, req_nodes=2)
    assert classify(job)[0] is Outcome.OOM


def test_timeout_censors_time_and_keeps_its_state():
    assert classify(sjob("TIMEOUT", step(state="CANCELLED", signal=15))) == (Outcome.TIMEOUT, True, False)
    # a step killed for memory earlier: still a TIMEOUT, but memory ran out too
    killed = step("0", state="OUT_OF_MEMORY")
    assert classify(sjob("TIMEOUT", step(), killed)) == (Outcome.TIMEOUT, True, True)


def test_requeued_run():
    assert classify(sjob("REQUEUED", elapsed_s=700.0, limit_s=600.0)) == (Outcome.TIMEOUT, True, False)
    assert classify(sjob("REQUEUED", elapsed_s=30.0)) == (Outcome.PREEMPTED, False, False)
    assert classify(sjob("REQUEUED", step(state="OUT_OF_MEMORY")))[0] is Outcome.OOM


# ------------------------------------------------------------- usage


def test_peak_memory_is_max_over_steps():
    job = sjob("COMPLETED", step("batch", rss=10.0), step("0", rss=70.0), step("extern", rss=1.0))
    assert to_record(job).used_mem_mb == 70.0


def test_multi_node_peak_is_per_node_peak_times_nodes():
    # 8 tasks on 4 nodes, largest task 30 MiB: up to 60 MiB on a node -> 240 per job
    s = step("0", rss=30.0, ntasks=8, nnodes=4)
    r = to_record(sjob("COMPLETED", step("batch", rss=5.0), s, alloc_nodes=4, req_nodes=4, req_mem_mb=400.0))
    assert r.used_mem_mb == 60.0 * 4


def test_task_total_caps_the_per_node_estimate():
    s = step("0", rss=30.0, ntasks=4, nnodes=1, tot_rss_mb=70.0)
    assert to_record(sjob("COMPLETED", s)).used_mem_mb == 70.0


def test_no_steps_means_unknown_memory():
    r = to_record(sjob("COMPLETED"))
    assert r.used_mem_mb is None and r.used_time_s == 60.0


def test_record_carries_request_and_allocation():
    r = to_record(
        sjob("COMPLETED", step(), req_gpus=2, alloc_gpus=2, req_cpus=4, alloc_cpus=4, cpu_s=99.0, job_id="7_3", run=2),
        source="clusterA",
    )
    assert (r.job_id, r.source, r.attempt) == ("7_3", "clusterA", 2)
    assert (r.req_cpus, r.alloc_cpus, r.req_gpus, r.alloc_gpus, r.used_cpu_s) == (4, 4, 2, 2, 99.0)
    assert (r.req_time_s, r.req_mem_mb) == (600.0, 100.0)


def test_elapsed_falls_back_to_start_end():
    r = to_record(sjob("COMPLETED", elapsed_s=None, start_time=100.0, end_time=160.0))
    assert r.used_time_s == 60.0


def test_a_requeued_run_is_as_long_as_it_ran_not_until_its_requeue():
    # what sacct --duplicates printed on 22.05 for a --time=1 job that timed out at
    # 08:31:01 and was requeued at 08:36:02 (harpd away): the row ends at the
    # requeue, its batch step where the run ended
    row = sjob(
        "REQUEUED",
        step(state="CANCELLED", elapsed_s=63.0),
        elapsed_s=364.0,
        limit_s=60.0,
        start_time=1_795_595_398.0,
        end_time=1_795_595_762.0,
    )
    r = to_record(row)
    assert (r.outcome, r.censored_time) == (Outcome.TIMEOUT, True)
    assert r.used_time_s == 63.0 and r.end_time == 1_795_595_398.0 + 63.0
    # a run requeued long after it was preempted early is no TIMEOUT for its late requeue
    early = sjob("REQUEUED", step(state="CANCELLED", elapsed_s=20.0), elapsed_s=700.0, limit_s=600.0)
    assert classify(early)[0] is Outcome.PREEMPTED and to_record(early).used_time_s == 20.0
    # rows of other states keep sacct's Elapsed
    assert to_record(sjob("TIMEOUT", step(elapsed_s=59.0), elapsed_s=61.0, limit_s=60.0)).used_time_s == 61.0
