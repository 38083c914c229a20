"""harp-submit against the real local Slurm: rewritten limits reach the job; no job is ever lost."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harp_submit import client

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "unit" / "submit"))
from submit_fakes import FakeHarpd, change, decision  # noqa: E402

from tests.helpers.harpd_process import wait_for_health  # noqa: E402
from tests.helpers.processes import run_harp_submit, short_tmpdir  # noqa: E402
from tests.helpers.wait import wait_for  # noqa: E402

pytestmark = pytest.mark.slurm


@pytest.fixture
def submit_dir():
    with short_tmpdir("hst-") as d:
        yield d


harp_submit = run_harp_submit


def show_job(cluster, job_id: str) -> dict[str, str]:
    out = cluster.scontrol("show", "job", job_id)
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", out))


def test_rewritten_job_runs_with_the_new_limits(slurm_cluster, submit_dir) -> None:
    work = slurm_cluster.workdir
    script = work / "limits.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --time=50\n"
        "#SBATCH -p short\n"
        "#SBATCH -o harp-limits-%j.out\n"
        'echo "args=$*"\n'
        'echo "name=$SLURM_JOB_NAME"\n'
    )
    limits = dict(partition="short", max_time_s=slurm_cluster.partitions["short"] * 60, max_mem_mb=4000, max_cpus=2)
    with FakeHarpd(
        submit_dir / "h.sock", decision(change("time", "00:07:00"), change("mem", "300M"), **limits)
    ) as harpd:
        proc = harp_submit(slurm_cluster, "--parsable", "limits.sh", "hello", "world", socket_path=harpd.path)
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.strip().split(";")[0]
        assert job_id.isdigit()
        assert proc.stderr == ""  # --parsable: harp stays quiet
        job = show_job(slurm_cluster, job_id)
        assert job["TimeLimit"] == "00:07:00"
        assert job["MinMemoryNode"] == "300M"
        assert job["JobName"] == "limits.sh"  # not "stdin"
        assert job["WorkDir"] == str(work)
        assert job["Partition"] == "short"
        [reg] = harpd.wait_for("register")
        assert reg["job_id"] == job_id
        assert reg["original"]["time_s"] == 3000 and reg["submitted"]["time_s"] == 420
        assert reg["submitted"]["mem_mb"] == 300

    assert slurm_cluster.wait_job(job_id) == "COMPLETED"
    out = (work / f"harp-limits-{job_id}.out").read_text()
    assert "args=hello world" in out and "name=limits.sh" in out
    [row] = slurm_cluster.sacct(job_id, "JobID,Timelimit,ReqMem", steps=False)
    assert row["Timelimit"] == "00:07:00" and row["ReqMem"].startswith("300M")


def test_a_change_slurm_refuses_still_submits_the_users_job(slurm_cluster, submit_dir) -> None:
    """The cluster enforces partition limits at submission: a (wrongly) raised limit is refused."""
    (slurm_cluster.workdir / "tiny.sh").write_text("#!/bin/bash\n#SBATCH -p tiny\n#SBATCH -t 2\ntrue\n")
    lying = decision(change("time", "02:00:00"), partition="tiny", max_time_s=10 * 3600)
    with FakeHarpd(submit_dir / "h.sock", lying) as harpd:
        proc = harp_submit(slurm_cluster, "-H", "--parsable", "tiny.sh", socket_path=harpd.path)
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.strip()
        try:
            assert proc.stderr.splitlines() == [
                "harp: sbatch refused the changed request (Batch job submission failed: Requested time limit is "
                "invalid (missing or exceeds some limit)); submitting your job as you wrote it"
            ]
            assert show_job(slurm_cluster, job_id)["TimeLimit"] == "00:02:00"
            assert harpd.wait_for("register")[0]["job_id"] == job_id
        finally:
            slurm_cluster.run(["scancel", job_id], check=False)


def test_without_harpd_200_submissions_each_land_exactly_once(slurm_cluster, submit_dir) -> None:
    (slurm_cluster.workdir / "once.sh").write_text("#!/bin/bash\n#SBATCH -t 1\n#SBATCH -o /dev/null\ntrue\n")
    token = uuid.uuid4().hex[:8]
    names = [f"harp-once-{token}-{i}" for i in range(200)]
    ids: list[str] = []
    try:
        for name in names:
            proc = harp_submit(
                slurm_cluster, "-H", "--parsable", "-J", name, "once.sh", socket_path=str(submit_dir / "no-harpd.sock")
            )
            assert proc.returncode == 0, proc.stderr
            ids.append(proc.stdout.strip().split(";")[0])
            warnings = [x for x in proc.stderr.splitlines() if x.startswith("harp:")]
            assert len(warnings) == 1 and "harpd is not running" in warnings[0]
        queue = slurm_cluster.run(["squeue", "-h", "-a", "-o", "%i %j"]).stdout.split("\n")
        mine = [line.split(" ", 1) for line in queue if f"harp-once-{token}-" in line]
        assert sorted(n for _, n in mine) == sorted(names)  # every one, exactly once
        assert sorted(i for i, _ in mine) == sorted(ids) and len(set(ids)) == 200
    finally:
        queue = slurm_cluster.run(["squeue", "-h", "-a", "-o", "%i %j"], check=False).stdout.split("\n")
        leftover = [line.split(" ", 1)[0] for line in queue if f"harp-once-{token}-" in line]
        for k in range(0, len(leftover), 50):
            slurm_cluster.run(["scancel", *leftover[k : k + 50]], check=False)


@pytest.fixture
def real_harpd(slurm_cluster, submit_dir):
    cfg = submit_dir / "harpd.toml"
    sock = submit_dir / "harpd.sock"
    cfg.write_text(
        f'[server]\nsocket = "{sock}"\n[store]\npath = "{submit_dir}/lib/harp.db"\n[ingest]\npoll_interval_s = 3600\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
    env["SLURM_CONF"] = str(slurm_cluster.conf)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)], stderr=subprocess.PIPE, text=True, env=env
    )
    wait_for_health(str(sock), proc)
    yield str(sock)
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def test_with_the_real_harpd_the_job_is_predicted_and_registered(slurm_cluster, real_harpd) -> None:
    (slurm_cluster.workdir / "real.sh").write_text("#!/bin/bash\n#SBATCH -t 20\n#SBATCH -p short\nsleep 1\n")
    proc = harp_submit(slurm_cluster, "-H", "real.sh", socket_path=real_harpd)
    assert proc.returncode == 0, proc.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", proc.stdout)
    assert m, proc.stdout
    job_id = m.group(1)
    try:
        # the daemon took our request (JobRequest, commands included) and the registration
        assert "unchanged" not in proc.stderr, proc.stderr

        def status_of_job() -> dict | None:  # registration runs in the background: give it a moment
            try:
                return client.call(real_harpd, {"op": "status", "job_id": job_id}, 5)["job"]
            except client.HarpdUnavailable:
                return None

        status = wait_for("harpd to hear of the job", status_of_job, 120, interval=0.1)
        assert status["registered"] is True
        assert status["original"]["time_s"] == 1200 and status["original"]["partition"] == "short"
        assert show_job(slurm_cluster, job_id)["JobState"] == "PENDING"
    finally:
        slurm_cluster.run(["scancel", job_id], check=False)


BAD_SCRIPTS = {
    "crlf.sh": b"#!/bin/bash\r\n#SBATCH -t 5\r\necho hi\r\n",
    "nul.sh": b"#!/bin/bash\n#SBATCH -t 5\necho \x00hi\n",
    "noshebang.sh": b"#SBATCH -t 5\necho hi\n",
    "empty.sh": b"",
    "blank.sh": b"\n  \n",
    "bogus.sh": b"#!/bin/bash\n#SBATCH --bogus\necho hi\n",
    "stray.sh": b"#!/bin/bash\n#SBATCH foo -t 5\necho hi\n",
    "unmatched.sh": b'#!/bin/bash\n#SBATCH -J "oops\necho hi\n',
    "badmem.sh": b"#!/bin/bash\n#SBATCH --mem=12X\necho hi\n",
}


@pytest.mark.parametrize(
    "args",
    [[name] for name in BAD_SCRIPTS]
    + [
        ["--mem=1.5G", "good.sh"],
        ["-c", "0", "good.sh"],
        ["--bogus", "good.sh"],
        ["missing.sh"],
        ["--wrap=true", "good.sh"],
        ["-t", "1:2:3:4", "good.sh"],
        ["--ti=5", "good.sh"],
    ],
)
def test_bad_input_gets_exactly_sbatchs_own_answer(slurm_cluster, submit_dir, args) -> None:
    work = slurm_cluster.workdir
    for name, content in BAD_SCRIPTS.items():
        (work / name).write_bytes(content)
    (work / "good.sh").write_text("#!/bin/bash\ntrue\n")
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith(("HARP_", "SBATCH_"))}
    env["SLURM_CONF"] = str(slurm_cluster.conf)
    plain = subprocess.run(
        ["sbatch", "-H", *args], capture_output=True, cwd=str(work), env=env, stdin=subprocess.DEVNULL, timeout=60
    )
    with FakeHarpd(submit_dir / "h.sock", decision(change("time", "5"))) as harpd:
        proc = harp_submit(slurm_cluster, "-H", *args, socket_path=harpd.path)
        assert harpd.requests == []  # harp stepped aside without asking
    assert plain.returncode != 0, plain.stdout  # each of these is refused by sbatch
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        plain.returncode,
        plain.stdout.decode(),
        plain.stderr.decode(),
    )


def test_a_script_on_dev_stdin_is_sized_and_registered(slurm_cluster, submit_dir) -> None:
    """Snakemake's --slurm-pass-command-as-script: `sbatch ... /dev/stdin` with the script piped in."""
    from tests.helpers.processes import RUN_MAIN

    script = "#!/bin/sh\n#SBATCH --time=50\n#SBATCH -o harp-stdin-%j.out\necho from-stdin \"$1\"\n"
    limits = dict(partition="short", max_time_s=slurm_cluster.partitions["short"] * 60, max_mem_mb=4000, max_cpus=2)
    with FakeHarpd(submit_dir / "h.sock", decision(change("time", "00:06:00"), **limits)) as harpd:
        env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith(("HARP_", "SBATCH_"))}
        env.update(
            {
                "SLURM_CONF": str(slurm_cluster.conf),
                "HARP_SOCKET": harpd.path,
                "PYTHONPATH": str(REPO),
                "HARP_CONFIG": "/nonexistent/harpd.toml",
            }
        )
        proc = subprocess.run(
            [sys.executable, "-c", RUN_MAIN, "--parsable", "/dev/stdin", "arg1"],
            input=script,
            capture_output=True,
            text=True,
            cwd=slurm_cluster.workdir,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.strip().split(";")[0]
        assert show_job(slurm_cluster, job_id)["TimeLimit"] == "00:06:00"
        [ask] = harpd.ops("predict")
        assert ask["job"]["commands"] == ['echo from-stdin "$1"']
        [reg] = harpd.wait_for("register")
        assert reg["job_id"] == job_id
    assert slurm_cluster.wait_job(job_id) == "COMPLETED"
    assert (slurm_cluster.workdir / f"harp-stdin-{job_id}.out").read_text() == "from-stdin arg1\n"
