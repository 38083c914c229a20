"""Options of sbatch releases after 22.05 are known, so harp still advises such jobs."""

from __future__ import annotations

import re

import pytest
from submit_fakes import change, decision

from harp_submit import sbatch_options as so

JOB = "#!/bin/bash\n#SBATCH --time=2-00:00:00\nsrun ./a.out\n"
RELEASES = ("23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")


def test_the_table_says_which_releases_it_covers() -> None:
    assert so.TABLE_COVERS == RELEASES[-1]
    names = [o.name for o in so.SBATCH_OPTIONS]
    assert len(names) == len(set(names))
    for release, spec in so.NEWER_OPTIONS:
        assert release in RELEASES, spec
        assert spec.name not in {o.name for o in so.SBATCH_OPTIONS_22_05}, spec
        assert so.SBATCH_TABLE.by_name[spec.name].has_arg == spec.has_arg
    added = {spec.name: release for release, spec in so.NEWER_OPTIONS}
    assert added["tres-per-task"] == "23.02" and added["oom-kill-step"] == "24.11"
    assert added["spread-segments"] == "25.11" and added["mem-update"] == "26.05"


@pytest.mark.parametrize("spec", [s for _, s in so.NEWER_OPTIONS if s.has_arg == so.REQ], ids=lambda s: s.name)
def test_newer_options_with_a_value_take_the_next_word(spec) -> None:
    p = so.SBATCH_TABLE.parse([f"--{spec.name}", "x:1", "job.sh"])
    assert [(o.name, o.value) for o in p.options] == [(spec.name, "x:1")] and p.end == 2
    p = so.SBATCH_TABLE.parse([f"--{spec.name}=x:1", "job.sh"])
    assert p.end == 1


def test_options_whose_argument_changed_accept_every_releases_form() -> None:
    # --requeue takes an optional value since 25.11; --get-user-env lost its value in 25.05
    for argv in (
        ["--requeue", "job.sh"],
        ["--requeue=expedite", "job.sh"],
        ["--get-user-env", "job.sh"],
        ["--get-user-env=10L", "job.sh"],
        ["--resv-ports", "job.sh"],
        ["--oom-kill-step=1", "job.sh"],
    ):
        assert so.SBATCH_TABLE.parse(argv).end == 1, argv


def test_tres_per_task_job_is_advised(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    proc = run("--tres-per-task=cpu:2", "job.sh")
    assert proc.returncode == 0 and len(harpd.ops("predict")) == 1
    [call] = run.calls()
    assert (
        call["argv"][:2] == ["--open-mode=append", "--tres-per-task=cpu:2"] and "#SBATCH --time=45\n" in call["stdin"]
    )
    assert any("--time" in x and "45" in x for x in proc.stderr.decode().splitlines())


def test_a_newer_option_with_its_value_as_the_next_word_is_advised(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    proc = run("--tres-bind", "gres/gpu:per_task:1", "--segment", "2", "job.sh", "arg")
    assert proc.returncode == 0 and len(harpd.ops("predict")) == 1
    [request] = harpd.ops("predict")
    assert request["job"]["script_name"] == "job.sh"
    [call] = run.calls()
    assert call["argv"][:5] == ["--open-mode=append", "--tres-bind", "gres/gpu:per_task:1", "--segment", "2"]
    assert call["argv"][-2:] == ["/dev/stdin", "arg"] and "#SBATCH --time=45\n" in call["stdin"]


def test_newer_options_in_script_directives_are_advised(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", "#!/bin/bash\n#SBATCH --tres-per-task=cpu=2\n#SBATCH --time=2-00:00:00\nsrun ./a.out\n")
    proc = run("job.sh")
    assert proc.returncode == 0 and len(harpd.ops("predict")) == 1
    assert re.search(r"#SBATCH --time=45\n", run.calls()[0]["stdin"])


def test_harp_does_not_set_cpus_per_task_beside_a_tres_per_task_cpu_count(run, harpd) -> None:
    # sbatch 23.02+ dies on "--tres-per-task=cpu=N and --cpus-per-task": harp leaves the CPUs alone
    harpd.decision = decision(change("cpus-per-task", "1"), max_cpus=8)
    run.write("job.sh", JOB)
    proc = run("--tres-per-task=cpu=4", "job.sh")
    assert proc.returncode == 0
    [call] = run.calls()
    assert call["argv"] == ["--tres-per-task=cpu=4", "job.sh"]
    assert any("--tres-per-task" in x for x in proc.stderr.decode().splitlines())
