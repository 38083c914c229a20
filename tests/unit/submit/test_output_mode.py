"""``--open-mode=append`` for jobs harp may run again, and only for them (harp_submit.output_mode).

A requeued job writes its next run to the same files, which Slurm truncates
by default: the messages of the run that ran out would be lost.  Each test
runs harp-submit as a process against a recording sbatch and a fake harpd.
"""

from __future__ import annotations

import pytest
from submit_fakes import change, decision

JOB = "#!/bin/bash\n#SBATCH --time=2-00:00:00\nsrun ./a.out\n"
APPEND = "--open-mode=append"


def _argv(run, *args: str, script: str = JOB, env: dict | None = None) -> list[str]:
    run.write("job.sh", script)
    proc = run(*args, "job.sh", env=env) if env else run(*args, "job.sh")
    assert proc.returncode == 0, proc.stderr
    return run.calls()[-1]["argv"]


@pytest.mark.parametrize("opts", [[], ["-o", "out-%j.txt"], ["-o", "out-%J.txt", "-e", "err-%j.txt"]])
def test_a_resized_job_with_its_own_output_files_appends(run, harpd, opts) -> None:
    harpd.decision = decision(change("time", "45"))
    assert _argv(run, "-H", *opts)[0] == APPEND


def test_a_retry_line_alone_appends(run, harpd) -> None:
    harpd.decision = decision()  # harp changed nothing; the script opted in
    assert _argv(run, "-H", script=JOB.replace("srun", "#HARP retry\nsrun"))[0] == APPEND


@pytest.mark.parametrize(
    "opts, script, env",
    [
        (["-o", "fixed.log"], JOB, None),  # a fixed path: appending would mix in an earlier job's output
        (["-e", "fixed.err"], JOB, None),
        (["--open-mode=truncate"], JOB, None),  # the user's own choice
        ([], JOB.replace("srun", "#SBATCH --open-mode=truncate\nsrun"), None),
        ([], JOB, {"SBATCH_OPEN_MODE": "truncate"}),
        ([], JOB.replace("srun", "#HARP retry off\nsrun"), None),  # opted out of recovery
        (["--array=1-3"], JOB, None),  # arrays are never recovered
    ],
)
def test_left_alone(run, harpd, opts, script, env) -> None:
    harpd.decision = decision(change("time", "45"))
    assert APPEND not in _argv(run, "-H", *opts, script=script, env=env)


def test_a_job_harp_leaves_alone_and_may_not_recover_is_untouched(run, harpd) -> None:
    harpd.decision = decision()
    assert APPEND not in _argv(run, "-H")
