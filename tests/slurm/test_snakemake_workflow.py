"""An unmodified Snakemake with its Slurm executor plugin, through harp-submit, on the real cluster.

Snakemake (``snakemake`` and ``snakemake-executor-plugin-slurm`` from the
package index, the test extra) runs a workflow of three rules with generous
requests, two samples each, with harp-submit first on PATH as ``sbatch``
(how a site puts workflows behind harp without changing them) and a real
harpd polling the cluster.  The workflow runs three times:

* every job of every run completes, and the comment the plugin sets
  (``rule_<rule>_wildcards_<sample>``, read back by its efficiency report)
  is still the job's comment;
* the third run's jobs are right-sized per rule from that rule's own runs,
  time and memory (below the request, above what the rule used);
* a rule the third run adds, never seen before, keeps its request: no rule
  inherits another's history.

The Slurm job-step plugin runs ``srun`` inside each job with every
``SLURM_*`` variable removed, ``SLURM_CONF`` included: ``scripts/localslurm``
links the release's default slurm.conf (/etc/slurm/slurm.conf on 22.05,
PREFIX/etc/slurm.conf on a built release) to the cluster where there is none,
and this test needs that link to be its cluster's.

With ``HARP_WORKFLOW_FIGURES=1`` the workflow also runs once with plain
sbatch first, and the figures docs/workflows.md quotes are printed
(per rule: requested, used, harp's third-run allocation; wall times).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harp_submit import client
from tests.helpers.harpd_process import running_harpd
from tests.helpers.processes import short_tmpdir
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
RUN_SUBMIT = "import sys; from harp_submit.cli import main; sys.exit(main())"
SAMPLES = ("s1", "s2")
#: rule -> (runtime minutes, mem_mb, shell): generous requests, as workflows copy them from templates
# The small rules ask 1600 MB so that harp's walk-back floor (a quarter of the request) stays
# above their batch step's sampled peak: jobacct_gather/linux sums the RSS of every process
# of the step, and a fork of Snakemake's ~120 MB job-step process counts it twice until the
# child execs (230 MB sampled once against 133 MB in other runs of the same rule; at 800 MB
# harp's 200 MB floor killed it)
RULES = {
    "quick": (20, 1600, "sleep 2"),
    "hungry": (20, 2000, "python3 -c \"b = b'x' * (600 << 20); import time; time.sleep(3)\""),
    "slow": (30, 1600, "sleep 12"),
}
FRESH = ("fresh", 25, 1800, "sleep 2")  # only in the third run

SNAKEFILE = '''
SAMPLES = {samples!r}
RULES = {rules!r}
if config.get("fresh"):
    RULES = RULES + ["{fresh}"]

rule all:
    input: expand("out/{{r}}_{{s}}.txt", r=RULES, s=SAMPLES)
'''
RULE = '''
rule {name}:
    output: "out/{name}_{{s}}.txt"
    resources: runtime={minutes}, mem_mb={mem}
    shell: "{shell} && echo {{wildcards.s}} > {{output}}"
'''


def _snakefile() -> str:
    text = SNAKEFILE.format(samples=list(SAMPLES), rules=list(RULES), fresh=FRESH[0])
    for name, (minutes, mem, shell) in [*RULES.items(), (FRESH[0], FRESH[1:])]:
        text += RULE.format(name=name, minutes=minutes, mem=mem, shell=shell.replace('"', '\\"'))
    return text


def _snakemake() -> str:
    exe = Path(sys.executable).parent / "snakemake"
    if not exe.exists() or shutil.which("srun") is None:
        pytest.skip("snakemake (the test extra) or Slurm's srun is not installed")
    return str(exe)


def require_system_conf(cluster) -> None:
    """Skip (fail in CI) unless the release's default slurm.conf is ``cluster``'s: Snakemake's job step
    runs srun inside the job, which reads that (/etc/slurm/slurm.conf on 22.05), not the test's SLURM_CONF."""
    sys_conf = cluster.default_conf
    if not (sys_conf.is_symlink() and os.readlink(sys_conf) == str(cluster.conf)):
        msg = (
            f"{sys_conf} is not this cluster's ({cluster.conf}): srun in the jobs would not reach it "
            "(scripts/localslurm links it on a machine with no Slurm config)"
        )
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


def sandbox(d: Path, snakefile: str) -> tuple[Path, Path, Path]:
    """In ``d``: the workflow directory with ``snakefile``, a bin directory whose ``sbatch`` is
    harp-submit, and an empty harpd directory; returns (workflow, bin, harpd)."""
    wf = d / "wf"
    wf.mkdir()
    (wf / "Snakefile").write_text(snakefile)
    bin_dir = d / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{RUN_SUBMIT}' \"$@\"\n")
    sbatch.chmod(0o755)
    harpd_dir = d / "harpd"
    harpd_dir.mkdir()
    return wf, bin_dir, harpd_dir


@pytest.fixture(scope="module")
def workflow(slurm_cluster):
    """A workflow directory, a bin directory with harp-submit as ``sbatch``, and a harpd."""
    require_system_conf(slurm_cluster)
    snakemake = _snakemake()
    with short_tmpdir("hwf-") as d:
        wf, bin_dir, harpd_dir = sandbox(d, _snakefile())
        toml = "[predict]\nmin_history = 4\n"  # two runs of two samples: each rule's own four runs
        with running_harpd(harpd_dir, slurm_conf=slurm_cluster.conf, extra_toml=toml, poll_interval_s=2) as sock:
            yield {"dir": wf, "bin": bin_dir, "socket": sock, "snakemake": snakemake, "cluster": slurm_cluster}


def _run(
    wf: dict,
    *,
    harp: bool,
    fresh: bool = False,
    retries: int = 0,
    env_extra: dict[str, str] | None = None,
    log: list[str] | None = None,
) -> tuple[float, float]:
    """One Snakemake run of the whole workflow; (start epoch, wall seconds); its stderr appended to ``log``."""
    c = wf["cluster"]
    real_sbatch = shutil.which("sbatch", path=os.environ.get("PATH", "")) or "/usr/bin/sbatch"
    env = {k: v for k, v in c.env.items() if not k.startswith(("HARP_", "SBATCH_"))}
    env.update(
        {
            "SLURM_CONF": str(c.conf),
            "PYTHONPATH": str(REPO),
            "HARP_SOCKET": wf["socket"],
            "HARP_CONFIG": "/nonexistent/harpd.toml",
            "HARP_SBATCH": real_sbatch,
            "HARP_TIMEOUT": "10",
            "PATH": (f"{wf['bin']}:" if harp else "")
            + f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        }
    )
    env.update(env_extra or {})
    argv = [
        wf["snakemake"],
        "--executor",
        "slurm",
        "--jobs",
        "10",
        "--forceall",
        "--nolock",
        "--default-resources",
        "slurm_account=harp",
        "slurm_partition=short",
        "--slurm-init-seconds-before-status-checks",
        "5",
        "--seconds-between-status-checks",
        "3",
        "--latency-wait",
        "10",
        "--retries",
        str(retries),
        "--config",
        f"fresh={int(fresh)}",
    ]
    start, t0 = time.time(), time.monotonic()
    proc = subprocess.run(
        argv, cwd=wf["dir"], env=env, capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL
    )
    wall = time.monotonic() - t0
    if log is not None:
        log.append(proc.stderr)
    assert proc.returncode == 0, f"snakemake failed:\n{proc.stderr[-4000:]}"
    return start, wall


#: the plugin's comment of each of this workflow's jobs (``rule_<rule>_wildcards_<sample>``); the
#: other workflow tests import ``_jobs`` and ``_ids`` and pick theirs by submit time and "rule_" alone
OWN_COMMENTS = frozenset(f"rule_{r}_wildcards_{s}" for r in (*RULES, FRESH[0]) for s in SAMPLES)


def _ours(comment: str, submit: str, since: float, own: frozenset[str] | None) -> bool:
    """A job of the workflow run started at ``since``: a rule's comment (one of ``own``), submitted since then.

    ``sacct -S`` also lists older jobs that were still pending in the
    window (another workflow's cancelled retry, say), so the submit time
    and the rule name both decide, not the window alone.
    """
    plugin_comment = comment.split("; ")[0]
    if not plugin_comment.startswith("rule_") or (own is not None and plugin_comment not in own):
        return False
    try:
        submitted = time.mktime(time.strptime(submit, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return False
    return submitted >= since - 1


def _jobs(c, since: float, own: frozenset[str] | None = None) -> dict[str, dict[str, str | float]]:
    """The jobs submitted since ``since`` by rule_sample: limit, request, state, comment, MaxRSS (MB), elapsed (s).

    ``own``: the plugin comments of the workflow's rules (every rule's when None).
    """
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 1))
    fields = "JobID,Comment,Timelimit,ReqMem,State,ElapsedRaw,MaxRSS,Submit"
    out = c.run(["sacct", "-P", "-n", "-S", start, "--units=M", "-o", fields]).stdout
    jobs: dict[str, dict] = {}
    rss: dict[str, float] = {}
    for line in out.splitlines():
        jid, comment, limit, reqmem, state, elapsed, maxrss, submit = line.split("|")
        base = jid.split(".")[0]
        if maxrss:
            rss[base] = max(rss.get(base, 0.0), float(maxrss.rstrip("M") or 0))
        if "." not in jid and _ours(comment, submit, since, own):
            jobs[base] = {
                "comment": comment,
                "limit": limit,
                "reqmem": reqmem,
                "state": state,
                "elapsed": float(elapsed or 0),
            }
    by_task = {}
    for base, j in jobs.items():
        j["maxrss_mb"] = rss.get(base, 0.0)
        # the plugin's own comment first; harp only ever appends its notes ("; harp extended ...")
        task = j["comment"].split("; ")[0].removeprefix("rule_").replace("_wildcards_", "_")
        by_task[task] = j
    return by_task


def _minutes(limit: str) -> float:
    parts = [float(x) for x in limit.replace("-", ":").split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return parts[-3] * 60 + parts[-2] + parts[-1] / 60


def _mb(reqmem: str) -> float:
    value = reqmem.rstrip("nc")
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[value[-1]] if value[-1].isalpha() else 1
    return float(value.rstrip("KMGT")) * scale


def _wait_outcomes(sock: str, job_ids: list[str], timeout: float = 180) -> None:
    """Until harpd has the outcome of every job (its submission closed)."""
    left = set(job_ids)

    def all_closed() -> bool:
        for jid in sorted(left):
            if client.call(sock, {"op": "status", "job_id": jid}, 10.0)["job"].get("state") == "done":
                left.discard(jid)
        return not left

    wait_for(
        "harpd to have every job's outcome",
        all_closed,
        timeout,
        interval=1,
        log=lambda: f"still without an outcome: {sorted(left)}",
    )


def test_snakemake_through_harp_right_sizes_each_rule_from_its_own_runs(workflow) -> None:
    c = workflow["cluster"]
    figures = os.environ.get("HARP_WORKFLOW_FIGURES") == "1"
    plain_wall = _run(workflow, harp=False)[1] if figures else None
    walls = []
    runs = []
    for n in range(3):
        if n == 2:
            # an admin's reload between the runs: the live history read afresh from the store
            client.call(workflow["socket"], {"op": "reload"}, 60.0)
        start, wall = _run(workflow, harp=True, fresh=(n == 2))
        walls.append(wall)
        jobs = _jobs(c, start, OWN_COMMENTS)
        runs.append(jobs)
        expected = {f"{r}_{s}" for r in RULES for s in SAMPLES} | ({f"fresh_{s}" for s in SAMPLES} if n == 2 else set())
        assert set(jobs) == expected, jobs
        for task, j in jobs.items():
            assert j["state"] == "COMPLETED", (task, j)
            # the comment the plugin reads back is kept: harp's notes (an extension) are appended
            rule, sample = task.rsplit("_", 1)
            own, *notes = j["comment"].split("; ")
            assert own == f"rule_{rule}_wildcards_{sample}" and all(x.startswith("harp ") for x in notes), j
        if n < 2:
            ids = _ids(c, start, OWN_COMMENTS)
            _wait_outcomes(workflow["socket"], ids)

    first, third = runs[0], runs[2]
    rows = []
    for rule, (minutes, mem, _) in RULES.items():
        for s in SAMPLES:
            j1, j3 = first[f"{rule}_{s}"], third[f"{rule}_{s}"]
            assert _minutes(j1["limit"]) == minutes and _mb(j1["reqmem"]) == mem  # run 1: nothing to learn from
            used_s = max(r[f"{rule}_{x}"]["elapsed"] for r in runs[:2] for x in SAMPLES)
            used_mb = max(r[f"{rule}_{x}"]["maxrss_mb"] for r in runs[:2] for x in SAMPLES)
            # right-sized per rule: below the request, above what the rule's own runs used
            assert used_s / 60 < _minutes(j3["limit"]) < minutes, (rule, j3, used_s)
            assert used_mb < _mb(j3["reqmem"]) < mem, (rule, j3, used_mb)
            # Snakemake's own process runs in the job: never below the manager's floor (300 MiB by default)
            assert _mb(j3["reqmem"]) >= 300, (rule, j3)
        rows.append((rule, minutes, mem, used_s, used_mb, j3["limit"], j3["reqmem"]))
    hungry, quick = third["hungry_s1"], third["quick_s1"]
    assert _mb(hungry["reqmem"]) > _mb(quick["reqmem"])  # each rule from its own runs, not one pool
    for s in SAMPLES:  # never seen: its request stands, whatever the other rules taught harp
        j = third[f"fresh_{s}"]
        assert _minutes(j["limit"]) == FRESH[1] and _mb(j["reqmem"]) == FRESH[2], j

    print("\nrule    requested          used (max of runs 1-2)   harp, run 3")
    for rule, minutes, mem, used_s, used_mb, lim, req in rows:
        print(f"{rule:7} {minutes:3d} min {mem:5d} MB   {used_s:5.0f} s {used_mb:6.0f} MB       {lim} {req}")
    print(
        "fresh   "
        + f"{FRESH[1]} min {FRESH[2]} MB   (never seen)            "
        + f"{third['fresh_s1']['limit']} {third['fresh_s1']['reqmem']}"
    )
    if plain_wall is not None:
        print(f"wall time: plain sbatch {plain_wall:.0f} s")
    print("wall time: harp run 1 {:.0f} s, run 2 {:.0f} s, run 3 {:.0f} s".format(*walls))


def _ids(c, since: float, own: frozenset[str] | None = None) -> list[str]:
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 1))
    out = c.run(["sacct", "-P", "-n", "-X", "-S", start, "-o", "JobID,Comment,Submit"]).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return [jid for jid, comment, submit in rows if _ours(comment, submit, since, own)]
