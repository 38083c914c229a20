"""``--harp-dry-run`` never submits, whatever path harp takes.

The fake sbatch first on PATH (and in HARP_SBATCH) records every run in a
file; a dry run must leave that file absent, while a normal run of the same
command line still submits.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from submit_fakes import change, decision

JOB = "#!/bin/bash\n#SBATCH --time=2-00:00:00\nsrun ./a.out\n"


def harp_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("harp:")]


def assert_nothing_submitted(run, proc) -> None:
    assert not run.log.exists(), f"sbatch ran: {run.calls()}"
    assert proc.returncode == 0, proc.stderr
    assert b"Submitted batch job" not in proc.stdout
    assert b"Traceback" not in proc.stderr
    assert any("dry run, nothing submitted" in x for x in harp_lines(proc.stderr))


@pytest.mark.parametrize(
    "args",
    [
        ["--harp-dry-run", "--bogus-option", "job.sh"],  # harp cannot read the command line
        ["--harp-dry-run", "--from-a-future-sbatch=1", "-H", "job.sh"],
    ],
)
def test_dry_run_with_an_option_harp_does_not_know_submits_nothing(run, harpd, args) -> None:
    run.write("job.sh", JOB)
    proc = run(*args)
    assert not run.log.exists()
    assert b"Submitted batch job" not in proc.stdout and b"Traceback" not in proc.stderr


def test_dry_run_with_unknown_option_says_why_harp_steps_aside(run, harpd) -> None:
    run.write("job.sh", JOB)
    proc = run("--harp-dry-run", "--bogus-option", "job.sh")
    assert_nothing_submitted(run, proc)
    lines = harp_lines(proc.stderr)
    assert any("--bogus-option" in x and "would run: sbatch --bogus-option job.sh" not in x for x in lines)
    assert any("would run: sbatch --bogus-option job.sh" in x for x in lines)
    assert harpd.requests == []


def test_dry_run_with_the_daemon_down_submits_nothing(run) -> None:
    run.write("job.sh", JOB)
    proc = run("--harp-dry-run", "job.sh", env={"HARP_SOCKET": str(run.home / "nothing-here.sock")})
    assert_nothing_submitted(run, proc)
    assert not any("submitting your job unchanged" in x for x in harp_lines(proc.stderr))


@pytest.mark.parametrize(
    "content",
    [
        b"#SBATCH -t 5\necho no shebang\n",
        b"",
        b"#!/bin/bash\n#SBATCH --mem=12X\necho hi\n",
        b"#!/bin/bash\n#SBATCH --bogus\necho hi\n",
    ],
)
def test_dry_run_with_a_bad_script_submits_nothing(run, harpd, content) -> None:
    run.write("bad.sh", content)
    proc = run("--harp-dry-run", "bad.sh")
    assert_nothing_submitted(run, proc)
    assert harpd.requests == []


@pytest.mark.parametrize(
    "args, env, script",
    [
        (["--harp-dry-run", "--harp-off", "job.sh"], {}, JOB),
        (["--harp-dry-run", "job.sh"], {"HARP_DISABLE": "1"}, JOB),
        (["--harp-dry-run", "job.sh"], {}, JOB + "#HARP off\n"),
        (["--harp-dry-run", "job.sh"], {}, "#!/bin/bash\n#SBATCH -t 3\n#SBATCH hetjob\n#SBATCH -t 4\necho hi\n"),
        (["--harp-dry-run", "--wrap=echo", "job.sh"], {}, JOB),
        (["--harp-dry-run", "missing.sh"], {}, JOB),
    ],
)
def test_dry_run_when_harp_steps_aside_submits_nothing_and_says_why(run, harpd, args, env, script) -> None:
    run.write("job.sh", script)
    proc = run(*args, env=env)
    assert_nothing_submitted(run, proc)
    assert any("steps aside" in x for x in harp_lines(proc.stderr)), proc.stderr


def test_dry_run_after_an_early_internal_error_submits_nothing(run, harpd) -> None:
    run.write("job.sh", JOB)
    code = "import sys, harp_submit.cli as c\nc.CLI_TABLE = None\nsys.exit(c.main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "--harp-dry-run", "-H", "job.sh"],
        env=run.env,
        cwd=run.home,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert_nothing_submitted(run, proc)
    assert any("internal error" in x for x in harp_lines(proc.stderr))


def test_dry_run_after_a_late_internal_error_submits_nothing(run, harpd) -> None:
    run.write("job.sh", JOB)
    code = (
        "import sys, harp_submit.cli as c\n"
        "def boom(*a, **k): raise RuntimeError('synthetic')\n"
        "c.validate = boom\nsys.exit(c.main())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "--harp-dry-run", "job.sh"],
        env=run.env,
        cwd=run.home,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert_nothing_submitted(run, proc)


def test_the_same_command_lines_submit_without_dry_run(run, harpd) -> None:
    """The control: without --harp-dry-run each of these reaches sbatch."""
    harpd.decision = decision(change("time", "45"))
    run.write("job.sh", JOB)
    run("job.sh")
    run("--bogus-option", "job.sh")
    run("--harp-off", "job.sh")
    run("job.sh", env={"HARP_SOCKET": str(run.home / "nothing-here.sock")})
    argvs = [c["argv"] for c in run.calls()]
    assert argvs[1:] == [["--bogus-option", "job.sh"], ["job.sh"], ["job.sh"]]
    assert len(argvs) == 4 and "#SBATCH --time=45\n" in run.calls()[0]["stdin"]


def test_verbose_says_why_harp_steps_aside_and_still_submits(run, harpd) -> None:
    run.write("job.sh", JOB)
    proc = run("--harp-verbose", "--bogus-option", "job.sh")
    assert [c["argv"] for c in run.calls()] == [["--bogus-option", "job.sh"]]
    assert any("steps aside" in x and "--bogus-option" in x for x in harp_lines(proc.stderr))
