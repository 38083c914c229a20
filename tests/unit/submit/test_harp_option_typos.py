"""An unknown ``--harp-...`` option is harp's error, never sbatch's.

A typo such as ``--harp-dryrun`` must not reach sbatch (which would submit
nothing, or worse, a site's newer sbatch might not complain) nor be dropped
silently: one line naming it and the closest harp option, exit 2, and the
fake sbatch never runs.
"""

from __future__ import annotations

import pytest

JOB = "#!/bin/bash\n#SBATCH --time=10\nsrun ./a.out\n"


def harp_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("harp:")]


@pytest.mark.parametrize(
    "args, named, hint",
    [
        (["--harp-dryrun", "job.sh"], "--harp-dryrun", "--harp-dry-run"),
        (["-H", "--harp-verbos=1", "job.sh"], "--harp-verbos", "--harp-verbose"),
        (["--harp-explian", "--time=5", "job.sh"], "--harp-explian", "--harp-explain"),
        (["--harp", "job.sh"], "--harp", "--harp-off"),  # ambiguous: lists harp's options
        (["--harp-off=yes", "job.sh"], "--harp-off", "--harp-off"),  # takes no value
        (["--bogus", "--harp-dryrun", "job.sh"], "--harp-dryrun", "--harp-dry-run"),  # after an unreadable option
        (["--harp-dry-run", "--harpdry", "job.sh"], "--harpdry", "--harp-dry-run"),
    ],
)
def test_unknown_harp_option_is_one_line_exit_2_and_nothing_submitted(run, harpd, args, named, hint) -> None:
    run.write("job.sh", JOB)
    proc = run(*args)
    assert proc.returncode == 2
    assert not run.log.exists(), run.calls()
    assert proc.stdout == b"" and b"Traceback" not in proc.stderr
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harp: "), lines
    assert named in lines[0] and hint in lines[0]
    assert harpd.requests == []


def test_harp_like_words_after_the_script_are_the_scripts(run) -> None:
    run.write("job.sh", JOB)
    proc = run("job.sh", "--harp-dryrun")
    assert proc.returncode == 0 and run.calls()[0]["argv"] == ["job.sh", "--harp-dryrun"]


def test_abbreviated_harp_options_still_work(run, harpd) -> None:
    run.write("job.sh", JOB)
    proc = run("--harp-dry", "job.sh")
    assert proc.returncode == 0 and not run.log.exists()
    assert any("dry run, nothing submitted" in x for x in harp_lines(proc.stderr))
