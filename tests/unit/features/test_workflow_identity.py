"""Workflow tasks: harp tells Snakemake rules and Nextflow processes apart.

Every Snakemake job runs ``python -m snakemake``: by its commands alone each
rule of each workflow is one program.  These are the forms the managers
really send (snakemake-executor-plugin-slurm 2.8.0's --wrap, its
--slurm-pass-command-as-script script, a cluster jobscript; Nextflow's
``.command.run`` under ``nf-PROCESS_(tag)``).
"""

from __future__ import annotations

from harpd.features.signature import signature_of
from harpd.features.workflow import identify, is_workflow_signature, job_signature

WRAP = (
    "python3.11 -m snakemake --snakefile Snakefile --target-jobs 'work:sample=s2' --allowed-rules work "
    "--cores all --attempt 1 --force-use-threads --resources mem_mb=2000 --wait-for-files "
    "/w/.snakemake/tmp.x3 --force --target-files-omit-workdir-adjustment --max-inventory-time 0 "
    "--executor slurm-jobstep --jobs 1 --mode remote"
)


def _wrap(rule: str, wildcards: str, snakefile: str = "Snakefile") -> list[str]:
    return [
        WRAP.replace("work:sample=s2", f"{rule}:{wildcards}")
        .replace("--allowed-rules work", f"--allowed-rules {rule}")
        .replace("--snakefile Snakefile", f"--snakefile {snakefile}")
    ]


def test_the_plugins_wrap_names_workflow_rule_and_wildcards() -> None:
    task = identify(_wrap("work", "sample=s2"), "0c5e2f7a-uuid", None, "/home/u/wf")
    assert task is not None
    assert (task.manager, task.workflow, task.task, task.instance) == (
        "snakemake",
        "/home/u/wf/Snakefile",
        "work",
        "sample=s2",
    )


def test_rules_differ_wildcards_and_run_ids_do_not() -> None:
    s1 = job_signature(_wrap("work", "sample=s1"), "uuid-run-1", None, "/home/u/wf")
    s2 = job_signature(_wrap("work", "sample=s2"), "uuid-run-2", None, "/home/u/wf")
    other = job_signature(_wrap("slow", "sample=s1"), "uuid-run-1", None, "/home/u/wf")
    elsewhere = job_signature(_wrap("work", "sample=s1"), "uuid-run-1", None, "/home/v/other")
    assert s1 == s2 and is_workflow_signature(s1)
    assert other != s1 and elsewhere != s1
    # by their commands alone every rule was one program: the bug the identity fixes
    assert signature_of(_wrap("work", "s=1")) == signature_of(_wrap("slow", "s=1"))


def test_an_absolute_snakefile_needs_no_working_directory() -> None:
    a = identify(_wrap("work", "", "/abs/Snakefile"), None, None, "/x")
    b = identify(_wrap("work", "", "/abs/Snakefile"), None, None, "/y")
    assert a == b and a.workflow == "/abs/Snakefile" and a.instance is None


def test_a_script_on_stdin_and_a_jobscript_carry_the_same_rule() -> None:
    stdin_script = [
        "python -m snakemake --snakefile Snakefile --target-jobs 'align:s=1' --allowed-rules align --mode remote",
        "--slurm-jobstep-array-execs",
        "'eyIyIjogIi4uLiJ9'",
    ]
    jobscript = [
        "cd /home/u/wf && /usr/bin/python3 -m snakemake --snakefile '/home/u/wf/Snakefile' "
        "--target-jobs 'align:s=1' --allowed-rules 'align' --nocolor --notemp --mode remote"
    ]
    a = identify(stdin_script, "uuid", "stdin", "/home/u/wf")
    b = identify(jobscript, "snakejob.align.3.sh", "snakejob.align.3.sh", "/home/u/wf")
    assert a is not None and b is not None
    assert a.signature() == b.signature() and a.task == "align"


def test_target_jobs_alone_give_the_rule() -> None:
    task = identify(["snakemake --target-jobs 'qc:sample=a,lane=2' --mode remote"], None, None, "/w")
    assert task is not None and task.task == "qc" and task.instance == "sample=a,lane=2"


def test_nextflow_tasks_by_process_with_the_tag_apart() -> None:
    a = identify(["nxf_main"], "nf-NFCORE_RNASEQ:FASTQC_(s1)", ".command.run", "/data/run/work/ab/cdef0123456789abcdef")
    b = identify(["nxf_main"], "nf-NFCORE_RNASEQ:FASTQC_(s2)", ".command.run", "/data/run/work/01/99887766554433")
    c = identify(["nxf_main"], "nf-NFCORE_RNASEQ:TRIM_(s1)", ".command.run", "/data/run/work/ab/cdef0123456789abcdef")
    assert a is not None and (a.manager, a.workflow, a.task, a.instance) == (
        "nextflow",
        "/data/run",
        "NFCORE_RNASEQ:FASTQC",
        "s1",
    )
    assert a.signature() == b.signature() != c.signature()


def test_ordinary_jobs_keep_their_command_signature() -> None:
    assert identify(["python train.py --epochs 3"], "train", "run.sh", "/w") is None
    # a job merely named like a Nextflow task, without Nextflow's script, is not one
    assert identify(["python train.py"], "nf-test", "run.sh", "/w") is None
    assert job_signature(["python train.py --epochs 3"], "train") == signature_of(["python train.py --epochs 3"])
    assert job_signature([], "train") is None
    # snakemake mentioned without a rule (a user running a whole workflow in one job)
    assert identify(["snakemake --cores 4"], None, None, "/w") is None
