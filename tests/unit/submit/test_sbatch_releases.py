"""sbatch of 22.05 through 26.05: one option table for all, cores from --tres-per-task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from submit_fakes import change, decision

from harp_submit import directives
from harp_submit import sbatch_options as so
from harp_submit.request import Request

RELEASES = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
JOB = "#!/bin/bash\n#SBATCH --time=2-00:00:00\nsrun ./a.out\n"

#: The long options 26.05's sbatch has and 22.05's has not.
NEW_IN_26_05 = (
    "--container-id=abc",
    "--container-type=oci",
    "--extra-node-info=2:4:1",
    "--oom-kill-step=1",
    "--resv-ports=2",
    "--spread-segments",
    "--tres-bind=gres/gpu:per_task:1",
    "--tres-per-task=gres/gpu=1",
)


@pytest.mark.parametrize(
    ("value", "cpus"),
    [
        ("cpu=4", 4),
        ("cpu:4", 4),
        ("CPU=2", 2),
        ("gres/gpu=1,cpu=8", 8),
        ("cpu=8,license/ansys=1", 8),
        ("cpu=1k", 1024),
        ("gres/gpu=1", None),
        ("license/cpu=1", None),
        ("cpu=0", None),
        ("cpu=x", None),
        ("cpu", None),
        ("", None),
        (None, None),
    ],
)
def test_tres_per_task_cpu_count(value, cpus) -> None:
    assert so.tres_per_task_cpus(value) == cpus


def _request(argv: list[str], env: dict[str, str] | None = None, text: str = JOB) -> Request:
    return Request(
        so.SBATCH_TABLE.parse(argv), env or {}, directives.parse(text), script_path="job.sh", script_text=text
    )


@pytest.mark.parametrize(
    ("argv", "env", "text", "cpus"),
    [
        (["--tres-per-task=cpu=4", "job.sh"], {}, JOB, 4),
        (["--tres-per-task", "cpu:6", "job.sh"], {}, JOB, 6),
        (["job.sh"], {}, "#!/bin/bash\n#SBATCH --tres-per-task=cpu=3\nsrun x\n", 3),
        (["job.sh"], {"SBATCH_TRES_PER_TASK": "cpu=5"}, JOB, 5),
        # sbatch: an option given outside the environment beats the other's variable
        (["-c", "2", "job.sh"], {"SBATCH_TRES_PER_TASK": "cpu=5"}, JOB, 2),
        (["--tres-per-task=cpu=7", "job.sh"], {"SBATCH_CPUS_PER_TASK": "2"}, JOB, 7),
        (["--tres-per-task=gres/gpu=1", "-c", "2", "job.sh"], {}, JOB, 2),
        (["job.sh"], {}, JOB, None),
    ],
)
def test_tres_per_task_cpus_are_the_cores_request(argv, env, text, cpus) -> None:
    assert _request(argv, env, text).resources()["cpus_per_task"] == cpus


def test_harpd_is_told_the_cores_of_a_tres_per_task_job(run, harpd) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    proc = run("--tres-per-task=cpu:4", "--mem-per-cpu=1G", "job.sh")
    assert proc.returncode == 0, proc.stderr
    [request] = harpd.ops("predict")
    assert request["job"]["request"]["cpus_per_task"] == 4


@pytest.mark.parametrize("option", NEW_IN_26_05)
def test_options_new_in_26_05_reach_sbatch_exactly(run, harpd, option) -> None:
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    proc = run(option, "job.sh")
    assert proc.returncode == 0 and len(harpd.ops("predict")) == 1, proc.stderr
    [call] = run.calls()
    assert option in call["argv"] and "#SBATCH --time=45\n" in call["stdin"]
    harps = ("--open-mode=append", "--job-name=job.sh")  # what harp adds when it feeds the script on stdin
    assert [a for a in call["argv"] if a.startswith("--") and a not in harps] == [option]


def test_each_release_table_grows_from_22_05() -> None:
    names = {r: {o.name for o in so.release_options(r)} for r in RELEASES}
    assert names["22.05"] == {o.name for o in so.SBATCH_OPTIONS_22_05}
    assert names["26.05"] | {"power"} == {o.name for o in so.SBATCH_OPTIONS}
    assert "power" in names["23.11"] and "power" not in names["24.05"]
    for new in NEW_IN_26_05:
        name = new[2:].split("=")[0]
        assert name in names["26.05"]
        if name != "extra-node-info":
            assert name not in names["22.05"]
    assert so.OptionTable(so.release_options("25.11")).by_name["requeue"].has_arg == so.OPT
    assert so.OptionTable(so.release_options("25.05")).by_name["requeue"].has_arg == so.NO
    assert so.OptionTable(so.release_options("25.05")).by_name["get-user-env"].has_arg == so.NO
    assert so.SBATCH_TABLE.by_name["get-user-env"].has_arg == so.OPT  # harp reads either form


def _resolve(table: so.OptionTable, name: str) -> str | None:
    try:
        return table.lookup_long(name).canonical
    except so.GetoptError as exc:
        return "ambiguous" if "ambiguous" in str(exc) else None


@pytest.mark.parametrize("release", RELEASES)
def test_the_union_table_never_reads_an_option_otherwise_than_the_release(release) -> None:
    """Every abbreviation of every option: harp's reading is the release's, or harp steps aside
    (ambiguous), or the release's sbatch refuses it anyway (an option it does not have)."""
    mine, theirs = so.SBATCH_TABLE, so.OptionTable(so.release_options(release))
    known = {o.canonical for o in so.release_options(release)}
    prefixes = {o.name[:k] for o in so.SBATCH_OPTIONS for k in range(1, len(o.name) + 1)}
    steps_aside = 0
    for p in sorted(prefixes):
        got, want = _resolve(mine, p), _resolve(theirs, p)
        if got == want:
            continue
        if (release, p) == ("22.05", "extra"):
            # the one exception: 23.02's --extra is spelled out, so it beats 22.05's reading of --extra
            # as an abbreviation of --extra-node-info (-B).  harp neither sizes from nor changes either.
            assert (got, want) == ("extra", "extra-node-info")
            continue
        assert got == "ambiguous" or (got not in known and want is None), (release, p, got, want)
        steps_aside += got == "ambiguous"
    if release == so.TABLE_COVERS:
        assert steps_aside == 0
    # 22.05 reads --res as --reservation; the union also has --resv-ports and --resources
    if release == "22.05":
        assert _resolve(theirs, "res") == "reservation" and _resolve(mine, "res") == "ambiguous"


CACHE = Path(os.environ.get("HARP_SLURM_CACHE", "/var/cache/harp/slurm"))
BUILT = [r for r in RELEASES if (CACHE / r / "lib" / "slurm" / "libslurmfull.so").exists()]


@pytest.mark.skipif(not BUILT, reason=f"no Slurm release built in {CACHE} (scripts/build-slurm 26.05)")
@pytest.mark.parametrize("release", BUILT or ["none"])
def test_release_table_is_the_built_sbatchs_own(tmp_path, release) -> None:
    """A release built by scripts/build-slurm: its libslurmfull's sbatch table is release_options(release)."""
    from test_sbatch_options import DUMP, OPTSTRING

    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=probe\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1 State=UNKNOWN\n"
        f"PartitionName=p Nodes=localhost Default=YES\nPlugStackConfig={tmp_path}/plugstack.conf\n"
    )
    (tmp_path / "plugstack.conf").write_text("")
    lib = CACHE / release / "lib" / "slurm" / "libslurmfull.so"
    # a built Slurm's plugins (auth_munge.so) take slurm_conf from libslurmfull: load it globally
    dump = DUMP.replace("ctypes.CDLL(sys.argv[1])", "ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)")
    assert dump != DUMP
    out = subprocess.run(
        [sys.executable, "-c", dump, str(lib)],
        env={**os.environ, "SLURM_CONF": str(conf)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == OPTSTRING  # no short option added since 22.05
    theirs = {}
    for name, has_arg, val in (line.split() for line in lines[1:]):
        theirs[name] = (int(has_arg), chr(int(val)) if int(val) < 256 else None)
    mine = {o.name: (o.has_arg, o.short) for o in so.release_options(release)}
    assert mine == theirs
