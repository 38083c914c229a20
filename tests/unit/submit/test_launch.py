"""harp-submit's entry point: HARP_DISABLE runs sbatch without loading harp's decision code.

The disabled path is what a workflow manager pays on every task, so it must
import next to nothing; anything harp has to read (its own options, --help,
--version) still takes the full way, with harp's decision code loaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harp_submit.off import disabled, plain

REPO = Path(__file__).resolve().parents[3]
JOB = "#!/bin/bash\n#SBATCH --time=10\ntrue\n"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-H", "job.sh"],
        ["--time=5", "-J", "x", "job.sh", "a", "b"],
        ["--wrap=true"],
        ["-p", "short", "--", "job.sh"],
        ["-N2", "--mem", "4G"],
    ],
)
def test_plain_argv_goes_straight_to_sbatch(args) -> None:
    assert plain(args)


@pytest.mark.parametrize(
    "args",
    [
        ["--harp-off", "job.sh"],
        ["--harp-dry-run", "job.sh"],
        ["--harp-dryrun"],
        ["--ha"],
        ["--har=1"],
        ["--help"],
        ["--he"],
        ["--usage"],
        ["--us"],
        ["--version"],
        ["--vers"],
        ["-h"],
        ["-V"],
        ["-HV"],
        ["-Jhello", "job.sh"],
        ["job.sh", "-h"],
        ["--hold", "job.sh"],
        ["-?"],
    ],
)
def test_anything_harp_must_read_takes_the_full_way(args) -> None:
    assert not plain(args)


@pytest.mark.parametrize(
    "value, off",
    [
        ("1", True),
        ("yes", True),
        (" TRUE ", True),
        ("on", True),
        ("0", False),
        ("", False),
        ("no", False),
        ("2", False),
    ],
)
def test_disable_values(value, off) -> None:
    assert disabled({"HARP_DISABLE": value}) is off
    assert disabled({}) is False


def _imported(stderr: bytes) -> set[str]:
    """Module names from ``python -X importtime``'s report."""
    names = set()
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_disabled_submission_loads_only_the_sbatch_runner(run, harpd) -> None:
    run.write("job.sh", JOB)
    e = {**run.env, "HARP_DISABLE": "1"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _RUN, "-H", "job.sh"],
        env=e,
        cwd=str(run.home),
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run.calls()[0]["argv"] == ["-H", "job.sh"] and harpd.requests == []
    loaded = {m for m in _imported(proc.stderr) if m.startswith("harp_submit")}
    assert loaded == {"harp_submit", "harp_submit.launch", "harp_submit.off", "harp_submit.sbatch_run"}, loaded
    assert proc.stdout.startswith(b"Submitted batch job ")


def test_disabled_with_a_harp_option_still_reads_it(run, harpd) -> None:
    """--harp-dry-run with HARP_DISABLE: a dry run (nothing submitted), harp's option never reaches sbatch."""
    run.write("job.sh", JOB)
    e = {**run.env, "HARP_DISABLE": "1"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _RUN, "--harp-dry-run", "-H", "job.sh"],
        env=e,
        cwd=str(run.home),
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0 and run.calls() == [] and harpd.requests == []
    assert "harp_submit.cli" in _imported(proc.stderr)
    assert b"dry run, nothing submitted" in proc.stderr


def test_disabled_without_sbatch_says_so(run) -> None:
    run.write("job.sh", JOB)
    proc = run("-H", "job.sh", env={"HARP_DISABLE": "1", "HARP_SBATCH": None, "PATH": "/nonexistent"})
    assert proc.returncode == 127
    assert proc.stderr.decode().strip() == "harp: cannot find sbatch in PATH (set HARP_SBATCH to its path)"


def test_disabled_passes_sbatch_exit_code_and_output(run) -> None:
    """sbatch's exit code, stdout and stderr come back as sbatch gave them, as on the full path."""
    run.write("job.sh", JOB)
    fail = {"FAKE_SBATCH_RC": "3", "FAKE_SBATCH_ERR": "sbatch: error: no\n", "FAKE_SBATCH_OUT": "out\n"}
    proc = run("-H", "job.sh", env={**fail, "HARP_DISABLE": "1"})
    full = run("--harp-off", "-H", "job.sh", env=fail)
    assert proc.returncode == full.returncode == 3
    assert proc.stdout == full.stdout == b"out\n" and proc.stderr == full.stderr == b"sbatch: error: no\n"


def test_the_installed_script_is_a_plain_script() -> None:
    """bin/harp-submit: no console-script wrapper (its `import re` costs every submission).

    Run without site (-S): this interpreter's own site hooks may import re themselves.
    """
    text = (REPO / "bin" / "harp-submit").read_text()
    assert text.startswith("#!python\n") and "import re" not in text
    assert 'script-files = ["bin/harp-submit"]' in (REPO / "pyproject.toml").read_text()
    out = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", str(REPO / "bin" / "harp-submit"), "--harp-off", "--version"],
        env={"PYTHONPATH": str(REPO), "HARP_SBATCH": "/bin/true", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=300,
    )
    assert out.returncode == 0 and b"harp-submit " in out.stdout
    loaded = _imported(out.stderr)
    assert "harp_submit.cli" in loaded and "re" not in loaded


_RUN = "import sys; from harp_submit.launch import main; sys.exit(main())"


def test_a_users_sbatch_wrapper_that_runs_harp_is_stepped_over(tmp_path, monkeypatch) -> None:
    """#51: ``~/bin/sbatch`` that execs harp-submit, first on PATH: harp-submit must reach Slurm's sbatch,
    not start itself again until the process limit."""
    from harp_submit.sbatch_run import find_sbatch, wraps_harp

    mine, site, real = tmp_path / "home-bin", tmp_path / "site-bin", tmp_path / "slurm-bin"
    for d in (mine, site, real):
        d.mkdir()
    (mine / "sbatch").write_text('#!/bin/sh\nexec harp-submit "$@"\n')
    (site / "sbatch").write_text('#!/bin/sh\nexec /opt/slurm/bin/sbatch --account=lab "$@"\n')  # the site's own
    (real / "sbatch").write_bytes(b"\x7fELF" + b"\0" * 64)
    for d in (mine, site, real):
        (d / "sbatch").chmod(0o755)
    assert wraps_harp(str(mine / "sbatch")) and not wraps_harp(str(site / "sbatch"))
    assert not wraps_harp(str(real / "sbatch")) and not wraps_harp(str(tmp_path / "missing"))
    assert find_sbatch({"PATH": f"{mine}:{site}:{real}"}) == str(site / "sbatch")
    assert find_sbatch({"PATH": f"{mine}:{real}"}) == str(real / "sbatch")
    assert find_sbatch({"PATH": str(mine)}) is None  # said in one line by the caller: set HARP_SBATCH
