"""A rule whose memory grows 400 -> 1200 MB: harp's hands never undo each other, and the size follows (#45).

An unmodified Snakemake runs three samples of the rule ``grow`` (2000M asked)
through harp-submit; harpd's history of the rule says 400 MB (what two
earlier workflow runs used), then the program grows to 1200 MB.  Three
workflows run in a row without ``--retries``: each must exit 0 (harp's
end-of-job hook requeues what ran out before Snakemake sees it), no task's
later run may have less memory than a run of it that ran out (the re-sizer
once shrank an escalated attempt back to the size that had just failed),
and from the second grown workflow on at most one task per workflow runs
out of memory (a failure of the rule lifts every later size of it above the
failed one: ``harpd.limits.rule``).  Then the rule grows again (1700 MB)
with ``--retries 1`` and harp's end-of-job hook off, so harp's recovery
(from its poll of sacct) races Snakemake's own retry: no retry, harp's or
the manager's, gets a size its task already ran out at, and no task runs
twice at once (sacct's intervals per task).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.slurm.test_snakemake_workflow import _run
from tests.slurm.test_workflow_cpus import _workflow

pytestmark = pytest.mark.slurm

SNAKEFILE = """
SAMPLES = ["s1", "s2", "s3"]

rule all:
    input: expand("out/{s}.txt", s=SAMPLES)

rule grow:
    output: "out/{s}.txt"
    params: mb=int(open("size.txt").read())
    resources: runtime=10, mem_mb=2000
    shell: "python3 -c \\"b = bytearray({params.mb} << 20); import time; time.sleep(2)\\" && echo ok > {output}"
"""


@pytest.fixture(scope="module")
def growing(slurm_cluster):
    gen = _workflow(slurm_cluster, SNAKEFILE, "grow", poll_interval_s=2)
    wf = next(gen)
    yield wf
    gen.close()


def _task_runs(c, start: float) -> dict[str, list[dict]]:
    """Each task's runs since ``start`` (requeues too), in order: state, MB asked, start and end epoch.

    sacct's JSON: the comment (the plugin's ``rule_grow_wildcards_s1``) is user text, never split.
    """
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start - 1))
    out = c.run(["sacct", "-D", "-S", since, "--json"]).stdout
    runs: dict[str, list[dict]] = {}
    for job in json.loads(out).get("jobs", []):
        comment = job.get("comment", {})
        text = comment.get("job", "") if isinstance(comment, dict) else str(comment or "")
        if not text.startswith("rule_grow_"):
            continue
        task = text.split(";")[0]
        state = job["state"]["current"]
        state = state[0] if isinstance(state, list) else state
        mem = next((t["count"] for t in job["tres"]["requested"] if t["type"] == "mem"), 0)
        t = job["time"]
        runs.setdefault(task, []).append(
            {"job": job["job_id"], "state": state, "mem": float(mem), "start": t["start"], "end": t["end"]}
        )
    for rs in runs.values():
        rs.sort(key=lambda r: (r["start"] or 0, r["end"] or 0))
    return runs


def _ran_out(r: dict) -> bool:
    # a run held and requeued by harp's end-of-job hook is REQUEUED; one the manager saw end is OUT_OF_MEMORY
    # or FAILED (the step killed by the memory enforcement)
    return r["state"] in ("OUT_OF_MEMORY", "REQUEUED", "FAILED")


def _check_sizes(runs: dict[str, list[dict]], failed: dict[str, float]) -> int:
    """No run of a task has less than a size the task ran out at before it; returns how many tasks ran out."""
    out = 0
    for task, rs in runs.items():
        any_out = False
        for r in rs:
            worst = failed.get(task)
            assert worst is None or r["mem"] > worst, (task, rs, failed)
            if _ran_out(r):
                failed[task] = max(failed.get(task, 0.0), r["mem"])
                any_out = True
        out += any_out
    return out


def _no_overlap(runs: dict[str, list[dict]]) -> None:
    for task, rs in runs.items():
        for a, b in zip(rs, rs[1:], strict=False):
            assert a["end"] and b["start"] and a["end"] <= b["start"], (task, rs)


def test_a_growing_rule_never_runs_below_a_failed_size_and_follows_the_growth(growing) -> None:
    wf = growing
    c = wf["cluster"]
    failed: dict[str, float] = {}
    seen = []
    # three grown workflows without --retries, then the rule grows again with --retries 1 and harp's end-of-job
    # hook off: harp recovers from its poll of sacct, racing the manager's own retry of the task
    plan = [(1200, 0, {}), (1200, 0, {}), (1200, 0, {}), (1700, 1, {"HARP_TASK_EPILOG": "0"})]
    for n, (mb, retries, env) in enumerate(plan):
        (wf["dir"] / "size.txt").write_text(str(mb))  # the fixture's history of the rule: 400 MB of 1600M asked
        start, _ = _run(wf, harp=True, retries=retries, env_extra=env)  # asserts Snakemake exits 0
        runs = _task_runs(c, start)
        assert len(runs) == 3 and all(rs[-1]["state"] == "COMPLETED" for rs in runs.values()), runs
        _no_overlap(runs)  # no task twice at once: harp's requeue and the manager's retry never both ran
        out = _check_sizes(runs, failed)  # no run of a task below a size it (or an earlier run) ran out at
        seen.append((mb, retries, out, {t: [(r["state"], r["mem"]) for r in rs] for t, rs in runs.items()}))
        if n in (1, 2):
            assert out <= 1, seen  # the rule's failures lifted its later sizes
        assert all(r["mem"] <= 2000 for rs in runs.values() for r in rs), runs  # never above the ask
    print("\n" + "\n".join(f"{mb} MB, --retries {r}: {o} task(s) ran out; {t}" for mb, r, o, t in seen))
