"""harp's time cut keeps what --signal, --time-min, --deadline and --test-only mean to sbatch (real cluster).

A real harpd with 25 earlier runs of the script (one minute of a five-minute
request each), so it cuts ``-t 5``:

* ``--signal=B:USR1@120``: the cut leaves the 120 s after the predicted need,
  so a job that finishes in its usual time gets no early signal (with the cut
  alone it would be signalled as it starts); under soft limits the job keeps
  its time;
* ``--time-min=4``: the cut stops at four minutes, and sbatch takes it at once;
* ``--deadline``: the cut job is taken as plain sbatch takes it;
* ``--test-only``: harp-submit answers exactly as sbatch does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harp_submit.units import parse_time
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir
from tests.helpers.slurm_jobs import scontrol_fields, wait_finished

pytestmark = pytest.mark.slurm

NAME = "warned.sh"
SCRIPT = (
    "#!/bin/bash\n#SBATCH -p short -t 5 {extra}\n"
    "trap 'echo \"signal $(date +%s)\"; exit 0' USR1\n"
    "echo \"start $(date +%s)\"\n"
    "for i in $(seq 20); do sleep 1; done\n"
    "echo \"done $(date +%s)\"\n"
)


def _signature(script: str) -> str | None:
    """The signature harpd computes for this script, as the poller would store it."""
    from harp_submit import directives
    from harp_submit.request import Request
    from harp_submit.sbatch_options import SBATCH_TABLE
    from harpd.features.workflow import job_signature

    req = Request(SBATCH_TABLE.parse([]), {}, directives.parse(script), script_path=NAME, script_text=script)
    return job_signature(req.commands(), req.job_name(), NAME, None)


def _seed(store_path: Path) -> None:
    """25 earlier runs of the script: one minute of a five-minute request each."""
    now = time.time()
    sig = _signature(SCRIPT.format(extra=""))
    with Store.open(store_path) as st:
        st.insert_jobs(
            [
                JobRecord(
                    job_id=f"seed{i}",
                    source="seed",
                    user="root",
                    account="harp",
                    partition="short",
                    job_name=NAME,
                    signature=sig,
                    submit_time=now - 7200 + i * 60,
                    start_time=now - 7200 + i * 60,
                    end_time=now - 7140 + i * 60,
                    used_time_s=60.0,
                    used_cpu_s=60.0,
                    req_time_s=300.0,
                    req_cpus=1,
                    alloc_cpus=1,
                    req_mem_mb=400.0,
                    used_mem_mb=100.0,
                    outcome=Outcome.COMPLETED,
                )
                for i in range(25)
            ]
        )


def _harpd(cluster, soft: bool) -> Iterator[str]:
    with short_tmpdir("hsm-") as d:
        (d / "lib").mkdir()
        _seed(d / "lib" / "harp.db")
        with running_harpd(
            d,
            slurm_conf=cluster.conf,
            timeout_s=90,
            extra_toml=f"[watch]\nsoft_limits = {'true' if soft else 'false'}\n",
        ) as sock:
            yield sock


@pytest.fixture(scope="module")
def hard(slurm_cluster) -> Iterator[str]:
    yield from _harpd(slurm_cluster, soft=False)


def _submit(cluster, sock: str, *args: str, extra: str = "") -> tuple[str, str]:
    (cluster.workdir / NAME).write_text(SCRIPT.format(extra=extra))
    proc = run_harp_submit(
        cluster,
        "--parsable",
        "--harp-explain",
        "-o",
        "warned-%j.out",
        *args,
        NAME,
        socket_path=sock,
        env={"HARP_TIMEOUT": "30"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "sbatch refused the changed request" not in proc.stderr, proc.stderr
    return proc.stdout.strip().split(";")[0], proc.stderr


def _limit_s(cluster, job_id: str) -> int:
    return parse_time(scontrol_fields(cluster, job_id)["TimeLimit"]) or 0


def test_a_cut_job_still_gets_no_signal_before_its_usual_end(slurm_cluster, hard) -> None:
    job, err = _submit(slurm_cluster, hard, "--signal=B:USR1@120")
    limit = _limit_s(slurm_cluster, job)
    assert "--signal" in err, err  # --harp-explain says the lead was kept
    assert 120 + 60 <= limit < 300, (limit, err)  # cut, and room for the warning after the usual minute
    assert wait_finished(slurm_cluster, job, 300.0) == "COMPLETED"
    out = (slurm_cluster.workdir / f"warned-{job}.out").read_text()
    assert "done" in out and "signal" not in out, out  # as under plain sbatch: it ended before its warning


def test_time_min_is_never_cut_below(slurm_cluster, hard) -> None:
    job, err = _submit(slurm_cluster, hard, "--time-min=4")
    assert _limit_s(slurm_cluster, job) == 240, err  # harp's cut (about two minutes) stopped at --time-min
    assert scontrol_fields(slurm_cluster, job)["TimeMin"] == "00:04:00"
    plain, _ = _submit(slurm_cluster, hard)
    assert _limit_s(slurm_cluster, plain) < 240  # without --time-min the same script is cut further
    slurm_cluster.run(["scancel", job, plain])  # no need to run them out


def test_a_deadline_job_is_taken_as_plain_sbatch_takes_it(slurm_cluster, hard) -> None:
    job, err = _submit(slurm_cluster, hard, "--deadline=now+1hour")
    assert _limit_s(slurm_cluster, job) < 300, err  # under hard limits the cut stays: it may only start sooner
    assert scontrol_fields(slurm_cluster, job).get("Deadline", "N/A") != "N/A"
    assert wait_finished(slurm_cluster, job, 300.0) == "COMPLETED"


_TEST_ONLY_ARGS = [
    ["-t", "5"],
    ["-t", "5", "--time-min=2"],
    ["-t", "5", "--time-min=10"],  # sbatch refuses a --time-min above --time
    ["-t", "5", "--signal=B:USR1@120"],
    ["-p", "nosuchpartition", "-t", "5"],
    ["-t", "1:2:3:4"],
]


@pytest.mark.parametrize("args", _TEST_ONLY_ARGS, ids=" ".join)
def test_test_only_answers_exactly_as_sbatch(slurm_cluster, hard, args) -> None:
    import subprocess

    (slurm_cluster.workdir / NAME).write_text(SCRIPT.format(extra=""))
    plain = subprocess.run(
        ["sbatch", "--test-only", *args, NAME],
        capture_output=True,
        text=True,
        cwd=str(slurm_cluster.workdir),
        env={**slurm_cluster.env, "SLURM_CONF": str(slurm_cluster.conf)},
        timeout=120,
    )
    harp = run_harp_submit(slurm_cluster, "--test-only", *args, NAME, socket_path=hard)
    assert (harp.returncode, _same(harp.stdout), _same(harp.stderr)) == (
        plain.returncode,
        _same(plain.stdout),
        _same(plain.stderr),
    )


def test_test_only_in_the_script_answers_exactly_as_sbatch(slurm_cluster, hard) -> None:
    import subprocess

    (slurm_cluster.workdir / NAME).write_text(SCRIPT.format(extra="--test-only --time-min=2"))
    plain = subprocess.run(
        ["sbatch", NAME],
        capture_output=True,
        text=True,
        cwd=str(slurm_cluster.workdir),
        env={**slurm_cluster.env, "SLURM_CONF": str(slurm_cluster.conf)},
        timeout=120,
    )
    harp = run_harp_submit(slurm_cluster, NAME, socket_path=hard)
    assert plain.returncode == 0 and "to start at" in plain.stderr, plain.stderr
    assert (harp.returncode, _same(harp.stdout), _same(harp.stderr)) == (
        plain.returncode,
        _same(plain.stdout),
        _same(plain.stderr),
    )


def _same(text: str) -> str:
    """sbatch's answer less what differs between two runs a moment apart: the job id and the start time."""
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", "TIME", text)
    return re.sub(r"\bJob \d+", "Job N", text)


def test_under_soft_limits_a_signal_job_keeps_its_time(slurm_cluster) -> None:
    for sock in _harpd(slurm_cluster, soft=True):
        job, err = _submit(slurm_cluster, sock, "--signal=B:USR1@120")
        assert _limit_s(slurm_cluster, job) == 300, err
        assert "soft limits" in err and "--signal" in err, err
        other, err = _submit(slurm_cluster, sock)
        assert _limit_s(slurm_cluster, other) < 300, err  # the same script without --signal is cut
        slurm_cluster.run(["scancel", job, other])
