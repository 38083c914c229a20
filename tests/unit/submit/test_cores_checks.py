"""harp-submit's own checks on a lowered --cpus-per-task: single tasks only, memory kept."""

from __future__ import annotations

import pytest
from submit_fakes import change, decision

from harp_submit import directives
from harp_submit.decision import BadDecision, check_beside, validate
from harp_submit.request import Request
from harp_submit.rewrite import apply
from harp_submit.sbatch_options import SBATCH_TABLE

RES = {"time_s": 600, "mem_mb": 4096, "cpus_per_task": 4, "partition": "debug"}


def ok(*changes):
    return {"ok": True, "decision": decision(*changes, max_cpus=64, max_mem_mb=10**6)}


def test_a_lowered_cpus_per_task_of_a_single_task_job_is_valid() -> None:
    _, changes = validate(ok(change("cpus-per-task", "1")), RES)
    assert [(c.option, c.amount) for c in changes] == [("cpus-per-task", 1)]


@pytest.mark.parametrize(
    "res, changes, words",
    [
        ({**RES, "ntasks": 4}, (change("cpus-per-task", "1"),), "single-task jobs only"),
        ({**RES, "nodes": 2}, (change("cpus-per-task", "1"),), "single-task jobs only"),
        ({**RES, "cpus_per_task": 2}, (change("cpus-per-task", "3"),), "never raises"),
        ({**RES, "mem_mb": None, "mem_per_cpu_mb": 1024}, (change("cpus-per-task", "1"),), "shrink the memory"),
        (
            {**RES, "mem_mb": None, "mem_per_cpu_mb": 1024},
            (change("cpus-per-task", "1"), change("mem-per-cpu", "900M")),
            "shrink the memory",
        ),
    ],
)
def test_unsafe_core_changes_are_refused(res, changes, words: str) -> None:
    with pytest.raises(BadDecision) as info:
        validate(ok(*changes), res)
    assert words in str(info.value)


def test_several_tasks_per_node_keep_their_cpus() -> None:
    _, changes = validate(ok(change("cpus-per-task", "1")), RES)
    with pytest.raises(BadDecision, match="several tasks"):
        check_beside(changes, None, "4")
    check_beside(changes, None, "1")  # one task per node: allowed


def test_mem_per_cpu_becomes_a_total_mem_beside_fewer_cores() -> None:
    text = "#!/bin/bash\n#SBATCH -c 4\n#SBATCH --mem-per-cpu=1G\npython work.py\n"
    res = {**RES, "mem_mb": None, "mem_per_cpu_mb": 1024}
    _, changes = validate(ok(change("mem", "4G"), change("cpus-per-task", "1")), res)
    r = Request(SBATCH_TABLE.parse(["job.sh"]), {}, directives.parse(text), script_path="job.sh", script_text=text)
    out = apply(r, ["job.sh"], changes)
    assert out.script_text == "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --mem=4G\npython work.py\n"
