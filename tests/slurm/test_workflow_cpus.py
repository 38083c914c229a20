"""Never fewer CPUs than a job's own steps ask for, on the real cluster.

* An unmodified Snakemake (slurm executor plugin) rule with ``threads: 2``:
  its job step runs ``srun --cpus-per-task=2`` inside the job, which the
  ``--wrap`` command harp reads does not show.  With a history that says the
  rule keeps a third of a core busy, every run still gets its 2 CPUs and
  COMPLETES (a cut to one made every run fail: "More processors requested
  than permitted").
* A plain script whose ``srun -c 2`` harp can read is lowered from 4 CPUs to
  2, never to 1, and its step runs.
* A script whose step harp cannot see (``bash step.sh`` running ``srun -c 2``)
  is cut, fails, and gets its CPUs back: the next submission keeps its 2 and
  completes.
* Snakemake's own retry (``--retries 1``) of a task that ran out of the
  memory harp gave it, submitted before harpd has read how it ended, gets at
  least the escalation rule's next size and completes.
"""

from __future__ import annotations

import time

import pytest

from harp_submit import client
from harpd.features.workflow import TaskIdentity, job_signature
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import run_harp_submit, short_tmpdir
from tests.helpers.slurm_jobs import scontrol_fields, wait_finished
from tests.helpers.wait import wait_for
from tests.slurm.test_snakemake_workflow import (
    _ids,
    _jobs,
    _mb,
    _run,
    _snakemake,
    _wait_outcomes,
    require_system_conf,
    sandbox,
)

pytestmark = pytest.mark.slurm

SNAKEFILE = '''
SAMPLES = ["s1", "s2"]

rule all:
    input: expand("out/work_{s}.txt", s=SAMPLES)

rule work:
    output: "out/work_{s}.txt"
    threads: 2
    resources: runtime=10, mem_mb=1600
    shell: "sleep 1 && echo {wildcards.s} > {output}"
'''


def _seed(store_path, signature: str, cpus: int, n: int = 25) -> None:
    """``n`` earlier completed runs that held ``cpus`` CPUs and kept a third of one busy, using 400 of 1600 MB.

    400 MB, not less: a Snakemake job's own batch step (Snakemake itself, ~130 MB) is part of what
    sacct records of a real run, and harp's memory rule sizes a rule from its runs with no floor.
    """
    now = time.time()
    with Store.open(store_path) as st:
        st.insert_jobs(
            [
                JobRecord(
                    job_id=f"seed{i}",
                    source="seed",
                    user="root",
                    account="harp",
                    partition="short",
                    signature=signature,
                    submit_time=now - 7200 + i * 60,
                    start_time=now - 7200 + i * 60,
                    end_time=now - 7140 + i * 60,
                    used_time_s=60.0,
                    used_cpu_s=20.0,
                    req_time_s=600.0,
                    req_cpus=cpus,
                    alloc_cpus=cpus,
                    req_mem_mb=1600.0,
                    used_mem_mb=400.0,
                    outcome=Outcome.COMPLETED,
                )
                for i in range(n)
            ]
        )


def _alloc_cpus(c, job_ids: list[str]) -> dict[str, int]:
    out = c.run(["sacct", "-X", "-P", "-n", "-j", ",".join(job_ids), "-o", "JobID,AllocCPUS"]).stdout
    return {jid: int(n) for jid, n in (line.split("|") for line in out.splitlines() if line)}


@pytest.fixture
def snakemake_workflow(slurm_cluster):
    yield from _workflow(slurm_cluster, SNAKEFILE, "work", poll_interval_s=2)


def _workflow(slurm_cluster, snakefile: str, rule: str, poll_interval_s: float):
    """A workflow directory, harp-submit as ``sbatch``, and a harpd whose store holds ``rule``'s history."""
    require_system_conf(slurm_cluster)
    snakemake = _snakemake()
    with short_tmpdir("hwc-") as d:
        wf, bin_dir, harpd_dir = sandbox(d, snakefile)
        (harpd_dir / "lib").mkdir()
        # the rule's history: 25 runs that kept a third of a core busy of their 2 (harp's cores rule would give 1)
        _seed(harpd_dir / "lib" / "harp.db", TaskIdentity("snakemake", str(wf / "Snakefile"), rule).signature(), 2)
        with running_harpd(
            harpd_dir,
            slurm_conf=slurm_cluster.conf,
            poll_interval_s=poll_interval_s,
            timeout_s=90,
            extra_toml="[predict]\nmin_history = 4\n",
        ) as sock:
            yield {
                "dir": wf,
                "bin": bin_dir,
                "socket": sock,
                "snakemake": snakemake,
                "cluster": slurm_cluster,
                "store": harpd_dir / "lib" / "harp.db",
            }


def test_a_snakemake_rule_with_two_threads_keeps_its_two_cpus_and_every_run_completes(snakemake_workflow) -> None:
    wf = snakemake_workflow
    c = wf["cluster"]
    for n in range(3):  # the history grows with each run's own outcomes
        start, _ = _run(wf, harp=True)
        jobs = _jobs(c, start)
        assert set(jobs) == {"work_s1", "work_s2"}, jobs
        assert all(j["state"] == "COMPLETED" for j in jobs.values()), (n, jobs)
        ids = _ids(c, start)
        assert set(_alloc_cpus(c, ids).values()) == {2}, (n, _alloc_cpus(c, ids))
        _wait_outcomes(wf["socket"], ids)
        client.call(wf["socket"], {"op": "reload"}, 60.0)  # the live history reads the store now
    # harpd saw the rule's history and said why it kept the CPUs
    with Store.open(wf["store"]) as st:
        subs = [st.get_submission(j) for j in ids]
        reasons = [(s.stored["decision"] if s else {}).get("explain", {}).get("cores", {}).get("reason") for s in subs]
        n_runs = st.count_jobs()
    assert n_runs >= 25 + 4
    assert all(r and "Snakemake" in r and "srun --cpus-per-task" in r for r in reasons), reasons


SCRIPT = "#!/bin/bash\n#SBATCH -p short -t 5 -c {cpus} --mem=400M\n{body}\n"
#: how long a run whose hidden step cannot start may take to end: its 5 minutes, then 4 to spare
STARVED_WAIT_S = 540.0


def _script_signature(text: str, name: str) -> str | None:
    from harp_submit import directives
    from harp_submit.request import Request
    from harp_submit.sbatch_options import SBATCH_TABLE

    req = Request(SBATCH_TABLE.parse([]), {}, directives.parse(text), script_path=name, script_text=text)
    return job_signature(req.commands(), req.job_name(), name, None)


def _submit(cluster, sock: str, name: str, *extra: str) -> tuple[str, str]:
    proc = run_harp_submit(
        cluster,
        "--parsable",
        "--harp-explain",
        *extra,
        "-o",
        f"{name}-%j.out",
        name,
        socket_path=sock,
        env={"HARP_TIMEOUT": "30"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0], proc.stderr


def test_a_script_whose_srun_asks_two_cpus_is_never_cut_below_two(slurm_cluster) -> None:
    text = SCRIPT.format(cpus=4, body="srun -c 2 python3 -c 'print(20)'")
    with short_tmpdir("hws-") as d:
        (d / "lib").mkdir()
        _seed(d / "lib" / "harp.db", _script_signature(text, "step2.sh"), 4)
        (slurm_cluster.workdir / "step2.sh").write_text(text)
        with running_harpd(
            d, slurm_conf=slurm_cluster.conf, timeout_s=90, extra_toml="[watch]\nsoft_limits = false\n"
        ) as sock:
            job, err = _submit(slurm_cluster, sock, "step2.sh")
            try:
                info = scontrol_fields(slurm_cluster, job)
                # its runs used a third of a core: harp lowers it, to what the step asks and no further
                assert info["CPUs/Task"] == "2", (err, info)
                assert "its steps ask for 2 CPUs" in err, err
                assert wait_finished(slurm_cluster, job) == "COMPLETED"
                assert (slurm_cluster.workdir / f"step2.sh-{job}.out").read_text().strip().endswith("20")
            finally:
                slurm_cluster.run(["scancel", job], check=False)


def test_a_run_that_failed_after_a_cpu_cut_gets_its_cpus_back(slurm_cluster) -> None:
    text = SCRIPT.format(cpus=2, body="bash hidden_step.sh")
    (slurm_cluster.workdir / "hidden_step.sh").write_text("srun -c 2 python3 -c 'print(30)'\n")
    (slurm_cluster.workdir / "hidden.sh").write_text(text)
    with short_tmpdir("hwr-") as d:
        (d / "lib").mkdir()
        _seed(d / "lib" / "harp.db", _script_signature(text, "hidden.sh"), 2)
        with running_harpd(
            d,
            slurm_conf=slurm_cluster.conf,
            poll_interval_s=2,
            timeout_s=90,
            extra_toml="[watch]\nsoft_limits = false\n",
        ) as sock:
            first, err = _submit(slurm_cluster, sock, "hidden.sh")
            assert scontrol_fields(slurm_cluster, first)["CPUs/Task"] == "1", err  # harp cannot see the step: cut
            # FAILED at once on 22.05; later releases' srun waits out the 5-minute limit (TIMEOUT)
            state = wait_finished(slurm_cluster, first, timeout=STARVED_WAIT_S)
            assert state == slurm_cluster.starved_step_end(), (
                state,
                (slurm_cluster.workdir / f"hidden.sh-{first}.out").read_text(),
            )
            _wait_outcomes(sock, [first])

            # harpd learns the failure (the live history reads the store at a reload, else within a minute)
            def explained() -> str | None:
                client.call(sock, {"op": "reload"}, 60.0)
                proc = run_harp_submit(
                    slurm_cluster,
                    "--harp-dry-run",
                    "--harp-explain",
                    "hidden.sh",
                    socket_path=sock,
                    env={"HARP_TIMEOUT": "30"},
                )
                return proc.stderr if "failed after harp lowered its CPUs" in proc.stderr else None

            wait_for("harp's explanation of the failure after its CPU cut", explained, 120, interval=2)
            again, err = _submit(slurm_cluster, sock, "hidden.sh")
            try:
                assert scontrol_fields(slurm_cluster, again)["CPUs/Task"] == "2", err
                assert wait_finished(slurm_cluster, again) == "COMPLETED"
                assert (slurm_cluster.workdir / f"hidden.sh-{again}.out").read_text().strip().endswith("30")
            finally:
                slurm_cluster.run(["scancel", again], check=False)


RETRY_SNAKEFILE = '''
rule all:
    input: "out/big.txt"

rule big:
    output: "out/big.txt"
    resources: runtime=10, mem_mb=1600
    shell: "python3 -c \\"b = b'x' * (600 << 20); import time; time.sleep(2)\\" && echo ok > {output}"
'''


@pytest.fixture
def retry_workflow(slurm_cluster):
    # harpd never polls here: the retry comes before harp has read how the first attempt ended,
    # and harp's own recovery (which would requeue it) stays out of the way
    yield from _workflow(slurm_cluster, RETRY_SNAKEFILE, "big", poll_interval_s=3600)


def test_the_managers_retry_of_a_task_that_ran_out_gets_at_least_the_escalated_size(retry_workflow) -> None:
    wf = retry_workflow
    c = wf["cluster"]
    # without harp's end-of-job hook (harp-task-epilog), which would requeue the job before the manager saw it end
    start, _ = _run(wf, harp=True, retries=1, env_extra={"HARP_TASK_EPILOG": "0"})
    out = c.run(
        [
            "sacct",
            "-X",
            "-P",
            "-n",
            "-S",
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start - 1)),
            "-o",
            "JobID,State,ReqMem,Comment",
        ]
    ).stdout
    # the rule's jobs (the plugin's comment), not another test's job still ending when this one began
    rows = [line.split("|")[:3] for line in out.splitlines() if "|rule_big" in line]
    assert len(rows) == 2, rows  # the attempt harp sized from the rule's 400 MB runs, and the manager's retry
    (first, state1, mem1), (_, state2, mem2) = rows
    # the job step that ran the rule ran out of what harp gave: killed (OUT_OF_MEMORY, or SIGKILL by the
    # memory enforcement of job accounting, which leaves the step CANCELLED and the job FAILED) above it
    steps = c.run(["sacct", "-P", "-n", "-j", first, "--units=M", "-o", "JobID,State,MaxRSS"]).stdout
    peak = max((float(x.split("|")[2].rstrip("M") or 0) for x in steps.splitlines() if x.count("|") == 2), default=0.0)
    assert state1 in ("OUT_OF_MEMORY", "FAILED") and peak >= 0.9 * _mb(mem1), (rows, steps)
    assert state2 == "COMPLETED", rows
    assert _mb(mem1) < 600 <= _mb(mem2), rows
    assert _mb(mem2) >= min(2 * _mb(mem1), 1600), rows  # min(2 x what failed, the request): the escalation rule
