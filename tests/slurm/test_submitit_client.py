"""An unmodified submitit (Meta's Python job library, the test extra) through harp-submit, on the real cluster.

submitit submits with ``sbatch`` and reads ``sacct``; harp-submit is first on
PATH as ``sbatch`` (how a site puts a job library behind harp without
changing it), a real harpd as root with soft limits polls the cluster (#51):

* two functions of different memory, pickled in one folder, are sized apart
  (each from its own runs: harp-submit reads the function from submitit's
  pickle without loading it);
* a function cut below what it then uses runs out of memory, harp recovers
  it and ``job.result()`` returns;
* a checkpointed function requeued twice (submitit's USR2 handler runs
  ``scontrol requeue $SLURM_JOB_ID``) completes once: harp stores every run,
  learns the completed one and never runs the function again;
* under hard limits (a second harpd, cuts allowed), a submitit job asking
  for a signal is sized but keeps its time: submitit takes a signal before
  min(0.8·T, T − 10 min) of its own timeout T for a preemption (requeued from
  scratch, forever) and one after it for a timeout that fails a function
  that cannot checkpoint, which harp cannot run again.

``sbatch`` is a user's wrapper script that execs harp-submit, with no
``HARP_SBATCH``: harp-submit finds the real sbatch past it (#51).

One module, one harpd, the jobs of each test in flight together: lean for CI.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from harp_submit import client
from harpd.records import Outcome
from harpd.store import Store
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import short_tmpdir
from tests.helpers.wait import wait_for
from tests.slurm.test_snakemake_workflow import sandbox

submitit = pytest.importorskip("submitit", reason="submitit (the test extra) is not installed")

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
REQUEST_GB = 2  # what the user asks for every function: harp's floor is a quarter of it (512 MB)


# ---------------------------------------------------------------- the user's functions (pickled by reference)


def _hold(mb: int) -> int:
    """Touch ``mb`` MB (RSS that accounting samples) for a few seconds."""
    block = b"x" * (mb << 20)
    time.sleep(4)
    return len(block) >> 20


def small(mb: int) -> int:
    return _hold(mb)


def big(mb: int) -> int:
    return _hold(mb)


def quick() -> str:
    time.sleep(1)
    return "done"


class Counted(submitit.helpers.Checkpointable):
    """Counts its runs in ``runs``; returns once ``go`` exists (the test makes it after two requeues)."""

    def __call__(self, runs: str, go: str) -> int:
        with open(runs, "a") as f:
            f.write("run\n")
        deadline = time.time() + 300
        while not os.path.exists(go) and time.time() < deadline:
            time.sleep(0.5)
        return sum(1 for _ in open(runs))


# ---------------------------------------------------------------- the cluster, harpd and the client


@pytest.fixture(scope="module")
def lab(slurm_cluster):
    """harpd (soft limits, each function's own two runs enough to size it) and submitit's environment."""
    if shutil.which("srun") is None:
        pytest.skip("Slurm's srun is not installed")
    with short_tmpdir("hsi-") as d:
        d = Path(d)
        _, bin_dir, harpd_dir = sandbox(d, "")  # bin/sbatch: a wrapper script that execs harp-submit
        toml = "[predict]\nmin_history = 2\n"
        with running_harpd(harpd_dir, slurm_conf=slurm_cluster.conf, extra_toml=toml, poll_interval_s=2) as sock:
            env = {
                "SLURM_CONF": str(slurm_cluster.conf),
                # the functions pickle by reference to this module, as pytest imported it
                "PYTHONPATH": f"{REPO}:{Path(__file__).parent}",
                "HARP_SOCKET": sock,
                "HARP_CONFIG": "/nonexistent/harpd.toml",
                "HARP_TIMEOUT": "10",
                "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{slurm_cluster.env.get('PATH', '/usr/bin:/bin')}",
            }
            saved = {k: os.environ.get(k) for k in [*env, "HARP_SBATCH"]}
            os.environ.pop("HARP_SBATCH", None)
            os.environ.update(env)  # submitit runs sbatch, sacct, scancel from this process's environment
            try:
                yield {
                    "dir": d,
                    "socket": sock,
                    "cluster": slurm_cluster,
                    "db": harpd_dir / "lib" / "harp.db",
                    "toml": toml,
                }
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v


def _executor(lab, folder: str, **params):
    ex = submitit.AutoExecutor(folder=lab["dir"] / folder)
    ex.update_parameters(
        **{"timeout_min": 10, "mem_gb": REQUEST_GB, "cpus_per_task": 1, "slurm_partition": "short", **params}
    )
    return ex


def _sacct(lab, job_id: str) -> list[dict[str, str]]:
    """Every run of ``job_id`` (sacct --duplicates): state and ReqMem (MB)."""
    out = (
        lab["cluster"]
        .run(["sacct", "-P", "-n", "-X", "--duplicates", "--units=M", "-j", job_id, "-o", "JobID,State,ReqMem"])
        .stdout
    )
    return [dict(zip(("id", "state", "reqmem"), line.split("|"))) for line in out.splitlines() if line]


def _queue_state(lab, job) -> str:
    """The job's state as slurmctld has it now (submitit's own watcher asks sacct at most every few minutes)."""
    out = lab["cluster"].run(["squeue", "-h", "-j", job.job_id, "-o", "%T"]).stdout.strip()
    return out.splitlines()[0] if out else ""


def _job_log(lab, job) -> str:
    """What explains a wait on the job: slurmctld's view of it and the tail of harpd's log."""
    show = lab["cluster"].run(["scontrol", "show", "job", job.job_id], check=False).stdout
    log = lab["dir"] / "harpd" / "harpd.log"
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
    return show + "\n".join(tail)


def _mb(reqmem: str) -> float:
    return float(reqmem.rstrip("nc").rstrip("M"))


def _closed(lab, job_ids: list[str], timeout: float = 120) -> None:
    """Until harpd has closed each job's submission (its outcome stored)."""
    left = set(job_ids)

    def done() -> bool:
        for jid in sorted(left):
            if client.call(lab["socket"], {"op": "status", "job_id": jid}, 10.0)["job"].get("state") == "done":
                left.discard(jid)
        return not left

    wait_for("harpd to close every submission", done, timeout, interval=1, log=lambda: f"open: {sorted(left)}")


def _runs(lab, job_id: str) -> list:
    store = Store.open(lab["db"])
    try:
        return sorted((r for r in store.iter_jobs() if r.job_id == job_id), key=lambda r: r.attempt)
    finally:
        store.close()


# ---------------------------------------------------------------- the tests


def test_functions_in_one_folder_are_sized_apart_and_an_oom_is_recovered(lab) -> None:
    ex = _executor(lab, "fns")
    first = [ex.submit(small, 40), ex.submit(small, 40), ex.submit(big, 500), ex.submit(big, 500)]
    assert [j.result() for j in first] == [40, 40, 500, 500]
    _closed(lab, [j.job_id for j in first])
    client.call(lab["socket"], {"op": "reload"}, 60.0)  # the live history reads the store now

    s, b = ex.submit(small, 40), ex.submit(big, 500)
    # small has used 40 MB: cut to harp's floor; asked for 1200 MB it runs out of memory, harp recovers it
    oom = ex.submit(small, 1200)
    assert s.result() == 40 and b.result() == 500
    assert oom.result() == 1200  # recovered: the function's result, not submitit's UncompletedJobError
    small_mb, big_mb = (_mb(_sacct(lab, j.job_id)[0]["reqmem"]) for j in (s, b))
    # each from its own runs: the small function cut further than the big one, both below the request
    assert small_mb < big_mb < REQUEST_GB * 1024, (small_mb, big_mb)
    assert big_mb > 500, big_mb
    # the result is written before the job's end reaches accounting
    wait_for("the recovered job to end", lambda: _sacct(lab, oom.job_id)[-1]["state"] == "COMPLETED", 60)
    runs = _sacct(lab, oom.job_id)
    assert len(runs) >= 2, runs
    assert _mb(runs[-1]["reqmem"]) > _mb(runs[0]["reqmem"]), runs


def test_a_checkpointed_function_that_requeues_itself_twice_completes_once_and_is_learnt(lab) -> None:
    d = lab["dir"]
    runs_file, go = d / "counted.runs", d / "counted.go"
    ex = _executor(lab, "ckpt")
    job = ex.submit(Counted(), str(runs_file), str(go))

    def runs() -> int:
        return sum(1 for _ in open(runs_file)) if runs_file.exists() else 0

    def started(n: int) -> bool:
        """Run ``n`` has begun; a pending job is released at every poll.

        slurmctld holds a requeued job back for two minutes; an admin's StartTime=now keeps CI short.
        It is said again at each poll, not once: a requeue still completing on a loaded host sets its
        hold after an update sent as soon as squeue first showed PENDING (CI saw run 3 never start).
        """
        state = _queue_state(lab, job)
        if state == "PENDING":
            lab["cluster"].run(["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"], check=False)
        return runs() >= n and state == "RUNNING"

    for n in (1, 2):
        wait_for(f"run {n} of the function", lambda n=n: started(n), 180, interval=1, log=lambda: _job_log(lab, job))
        job._interrupt()  # submitit's own test hook: USR2 as a preemption; its handler requeues the job
        wait_for(f"the job to requeue itself ({n})", lambda: _queue_state(lab, job) == "PENDING", 120)
    wait_for("run 3 of the function", lambda: started(3), 180, interval=1, log=lambda: _job_log(lab, job))
    go.write_text("go\n")
    assert job.result() == 3
    _closed(lab, [job.job_id])
    stored = _runs(lab, job.job_id)
    assert [r.attempt for r in stored] == [1, 2, 3], stored
    assert [r.outcome for r in stored] == [Outcome.PREEMPTED, Outcome.PREEMPTED, Outcome.COMPLETED]
    assert stored[-1].signature and stored[-1].signature.startswith("wf:")  # the function's identity
    status = client.call(lab["socket"], {"op": "status", "job_id": job.job_id}, 10.0)
    assert status["job"].get("outcome") == "completed", status
    # no function runs after it succeeded (harp asked nothing of it: no recovery chain)
    t0 = time.monotonic()
    wait_for("two more polls of harpd", lambda: time.monotonic() - t0 > 6, 30, interval=1)
    assert runs() == 3
    assert [r["state"] for r in _sacct(lab, job.job_id)][-1] == "COMPLETED"
    # harp's TaskEpilog ends quietly under a requeue: no "slurmstepd: error: --task-epilog failed status=9"
    err = job.stderr() or ""
    assert "task-epilog failed" not in err, err[-2000:]


def test_a_signal_job_keeps_its_time_under_hard_cuts(lab) -> None:
    hard_dir = lab["dir"] / "hard"
    hard_dir.mkdir()
    # cuts allowed under hard limits: a job of another client would have its time cut here
    toml = lab["toml"] + "hard_cut_gain = 1.0\n[watch]\nsoft_limits = false\n"
    with running_harpd(hard_dir, slurm_conf=lab["cluster"].conf, extra_toml=toml, poll_interval_s=2) as sock:
        saved = os.environ["HARP_SOCKET"]
        os.environ["HARP_SOCKET"] = sock
        try:
            minutes = 20
            ex = _executor(lab, "signal", timeout_min=minutes)  # submitit's --signal=USR2@90
            first = [ex.submit(quick), ex.submit(quick)]
            assert [j.result() for j in first] == ["done", "done"]
            wait_for("harpd to learn both runs", lambda: _learnt(sock, [j.job_id for j in first]), 120)
            client.call(sock, {"op": "reload"}, 60.0)
            job = ex.submit(quick)
            limit_s = _limit_s(lab, job.job_id)
            mem_mb = _mem_mb(lab, job.job_id)
            job.cancel()
        finally:
            os.environ["HARP_SOCKET"] = saved
    # harp sized the job (its memory from the two runs) but kept its time: a signal before submitit's own
    # threshold is a preemption to it, and after it a timeout that fails a function harp cannot run again
    assert mem_mb < REQUEST_GB * 1024, (
        f"memory not cut ({mem_mb} MB): harp did not size the job, the test shows nothing"
    )
    assert limit_s == minutes * 60, limit_s


def _learnt(sock: str, job_ids: list[str]) -> bool:
    return all(client.call(sock, {"op": "status", "job_id": j}, 10.0)["job"].get("state") == "done" for j in job_ids)


def _mem_mb(lab, job_id: str) -> float:
    """The memory slurmctld holds for a queued job (squeue's %m: 512M, 2G), in MB."""
    out = lab["cluster"].run(["squeue", "-h", "-j", job_id, "-o", "%m"]).stdout.strip()
    units = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}
    return float(out[:-1]) * units[out[-1]] if out and out[-1] in units else float(out or 0)


def _limit_s(lab, job_id: str) -> float:
    out = lab["cluster"].run(["squeue", "-h", "-j", job_id, "-o", "%l"]).stdout.strip() or "0"
    parts = [float(x) for x in out.replace("-", ":").split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return parts[-3] * 3600 + parts[-2] * 60 + parts[-1]
