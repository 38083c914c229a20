"""Merging #SBATCH lines, SBATCH_* variables and the command line as sbatch does; what harpd is told."""

from __future__ import annotations

import os

import pytest

from harp_submit import directives, harp_lines
from harp_submit.request import Request, array_size
from harp_submit.sbatch_options import SBATCH_TABLE

SCRIPT = (
    "#!/bin/bash\n#SBATCH --time=10\n#SBATCH --mem=1G -c 2 -p debug\n#SBATCH -J from-script\n"
    "module load x\n./run --n 5\n"
)


def req(
    argv: list[str],
    env: dict[str, str] | None = None,
    text: str | None = SCRIPT,
    path: str | None = "job.sh",
    wrap: str | None = None,
) -> Request:
    script = directives.parse(text) if text is not None else None
    return Request(
        SBATCH_TABLE.parse(argv),
        env or {},
        script,
        script_path=path,
        script_text=text,
        wrap=wrap,
        harp_lines=harp_lines.find(text or ""),
    )


def test_command_line_beats_environment_beats_script() -> None:
    assert req([]).value("time") == "10"
    assert req([], {"SBATCH_TIMELIMIT": "20"}).value("time") == "20"
    assert req(["-t", "30"], {"SBATCH_TIMELIMIT": "20"}).value("time") == "30"
    assert req(["-t", "30"], {"SBATCH_TIMELIMIT": "20"}).effective("time").source == "command line"
    assert req(["--partition=gpu"], {"SBATCH_PARTITION": "long"}).value("partition") == "gpu"
    assert req([], {"SBATCH_PARTITION": "long"}).effective("partition").env_var == "SBATCH_PARTITION"


def test_later_settings_win_within_a_source() -> None:
    r = req(["-t", "5", "--time=6"], text="#!/bin/sh\n#SBATCH -t 1\n#SBATCH -t 2\n")
    assert r.value("time") == "6"
    assert req([], text="#!/bin/sh\n#SBATCH -t 1\n#SBATCH -t 2\n").value("time") == "2"


def test_memory_variables_yield_to_a_different_memory_option() -> None:
    # verified on sbatch 22.05: SBATCH_MEM_PER_NODE is ignored when the script sets --mem-per-cpu
    r = req([], {"SBATCH_MEM_PER_NODE": "4G"}, text="#!/bin/sh\n#SBATCH --mem-per-cpu=500M\n")
    assert r.effective("mem", "mem-per-cpu", "mem-per-gpu").name == "mem-per-cpu"
    r = req([], {"SBATCH_MEM_PER_NODE": "4G"}, text="#!/bin/sh\n#SBATCH --mem=1G\n")
    assert r.effective("mem").value == "4G"  # same option: the environment wins


def test_resources_in_protocol_units() -> None:
    r = req(["-N", "2-4", "-n", "8", "--gres=gpu:a100:2", "-G", "2"])
    assert r.resources() == {
        "time_s": 600,
        "mem_mb": 1024,
        "mem_per_cpu_mb": None,
        "mem_per_gpu_mb": None,
        "cpus_per_task": 2,
        "ntasks": 8,
        "nodes": 2,
        "gres": "gpu:a100:2",
        "gpus": "2",
        "partition": "debug",
        "time_min_s": None,
        "signal_s": None,
        "deadline": None,
        "requeue": None,
    }
    assert req(["-t", "UNLIMITED"]).resources()["time_s"] is None
    assert req(["--mem=0"]).resources()["mem_mb"] == 0


def test_options_that_bound_the_time_limit() -> None:
    """--time-min, --signal's lead (command line, #SBATCH, $SBATCH_SIGNAL) and --deadline reach harpd."""
    r = req(["--time-min=5", "--deadline=now+1hour"], text="#!/bin/sh\n#SBATCH --signal=B:USR1@600\n")
    got = r.resources()
    assert (got["time_min_s"], got["signal_s"], got["deadline"]) == (300, 600, True)
    assert req([], {"SBATCH_SIGNAL": "USR2"}).resources()["signal_s"] == 60  # sbatch's default lead
    assert req(["--signal=RB:10@7"]).resources()["signal_s"] == 7
    assert req(["--signal=99@5"]).resources()["signal_s"] == 5  # sbatch 22.05 takes any positive number
    for bad in ("B:USR1@x", "@5", "USR1@70000", "FOO@5", "B:@5", "X:USR1@5", "0@5"):  # each refused by sbatch 22.05
        assert req([f"--signal={bad}"]).invalid() is not None, bad


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "FOO@-3",
        "USR1@-3",
        "USR1@+3",
        "USR1@",
        "B:",
        "USR1@" + "9" * 40,
        "9" * 40 + "@5",
        "USR1@\uff13",
        "\u00b2@5",
        "USR1@4 0",
        "USR1@0x10",
        "-1@5",
        "B:B:USR1@5",
    ],
)
def test_hostile_signal_values_are_invalid_never_a_crash(bad: str) -> None:
    """Each is left to sbatch (which refuses it or reads it otherwise): harp derives no lead from it."""
    r = req([f"--signal={bad}", "--requeue"])
    assert r.invalid() is not None
    assert r.resources()["signal_s"] is None and r.resources()["requeue"] is True


def test_requeue_as_sbatch_applies_it() -> None:
    """--requeue / --no-requeue: the command line over $SBATCH_(NO_)REQUEUE over #SBATCH, the last one in each."""
    sig = "#!/bin/sh\n#SBATCH --signal=B:USR1@40\n"
    assert req([], text=sig + "#SBATCH --requeue\n").resources()["requeue"] is True
    assert req([], text=sig).resources()["requeue"] is None
    assert req(["--no-requeue"], text=sig + "#SBATCH --requeue\n").resources()["requeue"] is False
    assert req(["--requeue"], text=sig + "#SBATCH --no-requeue\n").resources()["requeue"] is True
    assert req([], text=sig + "#SBATCH --requeue\n#SBATCH --no-requeue\n").resources()["requeue"] is False
    assert req([], {"SBATCH_NO_REQUEUE": "1"}, text=sig + "#SBATCH --requeue\n").resources()["requeue"] is False
    assert req(["--requeue"], {"SBATCH_NO_REQUEUE": "1"}).resources()["requeue"] is True
    got = req([], text=sig + "#SBATCH --requeue\n").resources()
    assert (got["signal_s"], got["requeue"]) == (40, True)


@pytest.mark.parametrize(
    "argv, env, text",
    [
        (["-t", "1:2:3:4"], {}, SCRIPT),
        ([], {"SBATCH_TIMELIMIT": ""}, SCRIPT),
        ([], {}, "#!/bin/sh\n#SBATCH --mem=12X\n"),
        (["-c", "0"], {}, SCRIPT),
        (["-n", "two"], {}, SCRIPT),
        (["-N", "1x"], {}, SCRIPT),
        # an overridden value is still checked: sbatch reads every one
        (["-t", "5"], {}, "#!/bin/sh\n#SBATCH -t nonsense\n"),
    ],
)
def test_invalid_values_are_found_wherever_they_are(argv, env, text) -> None:
    assert req(argv, env, text).invalid() is not None


def test_valid_request_has_no_invalid_value() -> None:
    assert req(["-t", "2-0", "--mem-per-cpu=2G"]).invalid() is None


def test_job_request() -> None:
    text = (
        "#!/bin/bash\n#SBATCH -A proj --array=0-9%2\n#HARP dnn model=llama-7b\n\n"
        "# setup\nmodule load x\n  srun ./a.out\n"
    )
    job = req([], {}, text, path="sub/train.sh").job_request()
    assert job["account"] == "proj" and job["array_size"] == 10
    assert job["job_name"] == "train.sh" and job["script_name"] == "train.sh"
    assert job["cwd"] == os.getcwd()
    assert job["harp_lines"] == ["#HARP dnn model=llama-7b"]
    assert job["commands"] == ["module load x", "srun ./a.out"]
    assert job["signature"] is None
    assert req(["-D", "/tmp"], {}, text).job_request()["cwd"] == "/tmp"


def test_job_names_as_slurm_gives_them() -> None:
    assert req([], text="#!/bin/sh\necho\n", path=None).job_name() == "sbatch"
    assert req(["--wrap=echo hi"], text=None, path=None, wrap="echo hi").job_name() == "wrap"
    assert req([], {"SBATCH_JOB_NAME": "env-name"}).job_name() == "env-name"
    assert req(["--wrap=echo hi"], text=None, path=None, wrap="echo hi").job_request()["commands"] == ["echo hi"]


def test_commands_are_bounded() -> None:
    text = "#!/bin/sh\n" + "".join(f"echo {i} {'x' * 300}\n" for i in range(100))
    cmds = req([], text=text).job_request()["commands"]
    assert len(cmds) <= 20 and sum(map(len, cmds)) <= 4096
    assert cmds[0].startswith("echo 0 ")


def test_undecodable_bytes_become_replacement_characters() -> None:
    text = b"#!/bin/sh\necho caf\xe9\n".decode("utf-8", "surrogateescape")
    assert req([], text=text).job_request()["commands"] == ["echo caf\ufffd"]


@pytest.mark.parametrize(
    "spec, n",
    [
        ("0-15", 16),
        ("0-15%4", 16),
        ("1,3,5-7", 5),
        ("0-15:4", 4),
        ("7", 1),
        ("x", None),
        ("5-1", None),
        ("", None),
        (None, None),
        ("0-9:0", None),
    ],
)
def test_array_size(spec, n) -> None:
    assert array_size(spec) == n
