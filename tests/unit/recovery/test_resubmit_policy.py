"""Recovery's pure parts: who is recovered, the next limits, the sbatch command line."""

from __future__ import annotations

import dataclasses

import pytest

from harp_submit.units import fmt_mem, fmt_time
from harpd.protocol import Resources
from harpd.records import JobRecord, Outcome
from harpd.recovery.attempts import AttemptLimits
from harpd.recovery.policy import Caps, eligible, first_limits, next_limits, retry_choice
from harpd.recovery.sbatch_argv import ArgvError, resubmit_argv
from tests.helpers.submissions import stored_submission

T, M = Outcome.TIMEOUT, Outcome.OOM


@pytest.mark.parametrize(
    "lines,want",
    [
        ([], None),
        (["#HARP retry"], True),
        (["#HARP RETRY  # please"], True),
        (["#HARP retry off"], False),
        (["#HARP retry no"], False),
        (["#HARP noretry"], False),
        (["#HARP retry", "#HARP retry off"], False),  # the last one wins
        (["#HARP dnn model=gpt2"], None),
    ],
)
def test_retry_choice(lines, want):
    assert retry_choice(lines) is want


def _sub(lines=(), changes=(), **job):
    return stored_submission(job={"harp_lines": list(lines), **job}, decision={"changes": list(changes)})


def test_eligible_reasons():
    assert eligible("5", None) == (False, "not submitted through harp-submit")
    assert eligible("5_1", _sub(["#HARP retry"]))[0] is False
    assert eligible("5", _sub(["#HARP retry"], array_size=4))[0] is False
    assert eligible("5", _sub(["#HARP retry"])) == (True, "the script opted in (#HARP retry)")
    assert eligible("5", _sub([], [{"option": "time"}])) == (True, "harp had changed its request")
    ok, why = eligible("5", _sub([]))
    assert not ok and "no #HARP retry line" in why
    assert eligible("5", _sub(["#HARP retry off"], [{"option": "time"}]))[0] is False


def test_first_limits_from_the_record_and_the_memory_option_used():
    rec = JobRecord(job_id="7", req_time_s=600, req_mem_mb=800, alloc_nodes=2, alloc_cpus=8, partition="long")
    lim = first_limits(rec, stored_submission({"submitted": {"mem_mb": 400}})).to_json()
    assert lim == {"time_s": 600, "mem_mb": 400, "partition": "long", "nodes": 2, "cpus_per_node": 4}
    lim = first_limits(rec, stored_submission({"submitted": {"mem_per_cpu_mb": 100}})).to_json()
    assert lim["mem_per_cpu_mb"] == 100 and "mem_mb" not in lim
    # no memory asked: the partition default Slurm applied, per node
    assert first_limits(rec, stored_submission({"submitted": {}})).mem_mb == 400
    # no record values: what harp-submit registered
    bare = JobRecord(job_id="7")
    lim = first_limits(
        bare, stored_submission({"submitted": {"time_s": 120, "mem_mb": 64, "partition": "short"}})
    ).to_json()
    assert (lim["time_s"], lim["mem_mb"], lim["partition"]) == (120, 64, "short")


def nl(outcome, attempt, limits, original=None, **kw):
    args = dict(max_attempts=3, partition_max_time_s=None, node_mem_mb=None, cfg_max_time_s=None, cfg_max_mem_mb=None)
    args.update(kw)
    n = next_limits(
        outcome,
        attempt,
        AttemptLimits.from_json(limits),
        None if original is None else Resources(**original),
        Caps(**args),
    )
    return dataclasses.replace(n, limits=n.limits and n.limits.to_json())  # the row recovery stores


def test_doubles_only_what_ran_out():
    n = nl(T, 1, {"time_s": 60, "mem_mb": 100})
    assert n.limits == {"time_s": 120, "mem_mb": 100} and n.resource == "time"
    n = nl(M, 1, {"time_s": 60, "mem_mb": 100})
    assert n.limits == {"time_s": 60, "mem_mb": 200} and n.resource == "mem"
    assert "memory 100M -> 200M" in n.reason


def test_time_is_whole_minutes_within_the_cap():
    assert nl(T, 1, {"time_s": 100}).limits["time_s"] == 240  # 200 s rounds up to 4 min
    n = nl(T, 1, {"time_s": 120}, partition_max_time_s=180, partition="tiny")
    assert n.limits["time_s"] == 180 and "to the cap, partition tiny MaxTime = 3 min" in n.reason
    n = nl(T, 2, {"time_s": 180}, partition_max_time_s=180, partition="tiny")
    assert n.limits is None and "at the cap, partition tiny MaxTime = 3 min" in n.reason
    # a cap that is no whole minute above the current limit
    n = nl(T, 1, {"time_s": 120}, cfg_max_time_s=150)
    assert n.limits is None and "no whole minute" in n.reason


def test_memory_caps_per_node_and_per_cpu():
    n = nl(M, 1, {"mem_mb": 5000}, node_mem_mb=8000)
    assert n.limits["mem_mb"] == 8000 and "the node's memory" in n.reason
    n = nl(M, 1, {"mem_per_cpu_mb": 1500, "cpus_per_node": 4}, node_mem_mb=8000)
    assert n.limits["mem_per_cpu_mb"] == 2000  # 8000 MiB over 4 CPUs
    n = nl(M, 1, {"mem_mb": 100}, cfg_max_mem_mb=150)
    assert n.limits["mem_mb"] == 150 and "recovery.max_mem_mb" in n.reason
    assert nl(M, 1, {"mem_per_gpu_mb": 1000}).limits is None


def test_original_request_and_attempt_budget():
    assert nl(T, 1, {"time_s": 600}, {"time_s": 900}).limits["time_s"] == 900
    n = nl(T, 3, {"time_s": 600}, max_attempts=3)
    assert n.limits is None and "no attempts left" in n.reason


@pytest.mark.parametrize(
    "outcome", [Outcome.PREEMPTED, Outcome.NODE_FAIL, Outcome.CANCELLED, Outcome.FAILED, Outcome.COMPLETED]
)
def test_other_outcomes_stop(outcome):
    n = nl(outcome, 1, {"time_s": 60, "mem_mb": 100})
    assert n.limits is None and "not resubmitted" in n.reason


def test_formats():
    assert fmt_time(120) == "2 min" and fmt_time(5400) == "1:30:00" and fmt_time(90061) == "1-1:01:01"
    assert fmt_mem(200) == "200M" and fmt_mem(65536) == "64G"


# ------------------------------------------------------------------ argv


def test_argv_keeps_options_drops_one_time_ones_and_sets_limits():
    argv = [
        "-J",
        "x",
        "-p",
        "gpu",
        "-t",
        "5",
        "--mem-per-cpu=50M",
        "-c2",
        "--dependency=afterok:1",
        "-H",
        "--export=ALL,FOO=1",
        "--output=o-%j.txt",
        "job.sh",
        "a b",
        "--flag",
    ]
    out = resubmit_argv(
        argv,
        AttemptLimits(time_s=600, mem_mb=300, partition="short"),
        job_name="x",
        workdir="/w",
        comment="harp retry 2 of 9",
        account="acct",
    )
    assert out == [
        "--cpus-per-task=2",
        "--export=ALL,FOO=1",
        "--output=o-%j.txt",
        "--job-name=x",
        "--partition=short",
        "--account=acct",
        "--chdir=/w",
        "--comment=harp retry 2 of 9",
        "--time=10",
        "--mem=300M",
        "/dev/stdin",
        "a b",
        "--flag",
    ]


def test_argv_per_cpu_memory_and_no_script_arguments():
    out = resubmit_argv(
        ["--mem-per-cpu=50M", "--", "job.sh"],
        AttemptLimits(time_s=60, mem_per_cpu_mb=100),
        job_name=None,
        workdir="/w",
        comment="c",
    )
    assert out == ["--chdir=/w", "--comment=c", "--time=1", "--mem-per-cpu=100M"]


def test_argv_without_known_memory_keeps_the_users():
    out = resubmit_argv(
        ["--mem-per-gpu=4G", "job.sh"], AttemptLimits(time_s=120), job_name="j", workdir="/w", comment="c"
    )
    assert "--mem-per-gpu=4G" in out and not any(a.startswith("--mem=") for a in out)


def test_argv_that_does_not_parse():
    with pytest.raises(ArgvError, match="do not parse"):
        resubmit_argv(["--no-such-option"], AttemptLimits(), job_name=None, workdir="/w", comment="c")


def test_request_factor_caps_recovery_at_or_above_the_users_request():
    # a job of --time=3 whose harp cut ran out at the user's own 3 min
    unset = nl(Outcome.TIMEOUT, 2, {"time_s": 180, "mem_mb": 100}, {"time_s": 180, "mem_mb": 100})
    assert unset.limits["time_s"] == 360  # default: doubling past the request, up to the partition
    at = nl(Outcome.TIMEOUT, 2, {"time_s": 180, "mem_mb": 100}, {"time_s": 180, "mem_mb": 100}, request_factor=1.0)
    assert at.limits is None
    assert "at the cap, the user's own request (recovery.max_request_factor = 1) = 3 min" in at.reason
    assert "not resubmitted" in at.reason
    # below the request it walks back to it, never past it
    back = nl(Outcome.OOM, 1, {"time_s": 300, "mem_mb": 100}, {"time_s": 300, "mem_mb": 200}, request_factor=1.0)
    assert back.limits["mem_mb"] == 200
    stop = nl(Outcome.OOM, 2, {"time_s": 300, "mem_mb": 200}, {"time_s": 300, "mem_mb": 200}, request_factor=1.0)
    assert stop.limits is None and "the user's own request (recovery.max_request_factor = 1) = 200M" in stop.reason
    # above 1: that many times the request, once, then stop
    two = nl(Outcome.OOM, 1, {"time_s": 300, "mem_mb": 200}, {"time_s": 300, "mem_mb": 200}, request_factor=1.5)
    assert (
        two.limits["mem_mb"] == 300
        and "to the cap, 1.5 x the user's request (recovery.max_request_factor) = 300M" in two.reason
    )
    # a partition cap below the request's still wins
    tiny = nl(Outcome.TIMEOUT, 1, {"time_s": 120}, {"time_s": 120}, request_factor=4.0, partition_max_time_s=180)
    assert tiny.limits["time_s"] == 180 and "MaxTime" in tiny.reason
    # no request of that resource: only the other caps
    free = nl(Outcome.OOM, 1, {"time_s": 300, "mem_mb": 100}, {"time_s": 300}, request_factor=1.0)
    assert free.limits["mem_mb"] == 200
