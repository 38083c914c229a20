"""Which task of which workflow a job runs, when a workflow manager submitted it.

Snakemake and Nextflow submit thousands of jobs that all run the same
program (``python -m snakemake ...``, Nextflow's ``.command.run``), with job
names that change on every run (Snakemake's run UUID).  By its commands
alone every task of every workflow is one program to harp, so a rule it has
never seen would be sized from other rules' runs.  The task's real identity
is in what the manager sends:

* Snakemake (its Slurm executor's ``--wrap``, a ``--slurm-pass-command-as-script``
  script, or a cluster jobscript): the ``--snakefile`` and the rule
  (``--allowed-rules``, else the rule part of ``--target-jobs rule:wildcards``);
* Nextflow: its ``.command.run`` script with the job name ``nf-<PROCESS>_(<tag>)``, and the launch
  directory above the task's ``work/xx/yyyy…`` directory.

* a Python job library's job (submitit, ``harpd.features.workflow.library_task``):
  its folder and the function harp-submit read from the library's pickle
  without loading it (``harp_submit.library_job``), else the job name.

The identity is workflow + rule (or process).  The wildcards or the tag name
the task's inputs, not its program: they are kept apart (shown, never hashed),
so the samples of a rule share one history.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from harpd.features.signature import signature_of

#: the prefix of a workflow task's signature (``harpd.predict.live`` sizes these from their own runs only)
WORKFLOW_PREFIX = "wf:"

_NF_NAME = re.compile(r"^nf-(?P<process>.+?)(?:_\((?P<tag>.*)\))?$")
_NF_WORKDIR = re.compile(r"^(?P<launch>.*)/work/[0-9a-f]{2}/[0-9a-f]{6,}/?$")
#: the module submitit's jobs run (``python -u -m submitit.core._submit FOLDER``)
SUBMITIT_MODULE = "submitit.core._submit"
_SNAKEMAKE = re.compile(r"(?:^|[\s/])snakemake(?:\s|$)|-m\s+snakemake\b")


@dataclass(frozen=True)
class TaskIdentity:
    """One workflow task: the manager, the workflow, the rule/process and (apart) its inputs."""

    manager: str  # "snakemake" | "nextflow" | "submitit"
    workflow: str  # the Snakefile (absolute), Nextflow's launch directory or submitit's folder
    task: str  # the rule, process or function (module:qualname; else the job name)
    instance: str | None = None  # the wildcards or tag: what it runs on, not what it runs

    @property
    def manager_inside(self) -> bool:
        """Whether the manager itself runs inside the job, beside the task's program, and needs memory there.

        Each Snakemake job runs ``python -m snakemake`` (which then starts the
        rule's program in a job step, so such a job always has a step of its
        own: ``harpd.recovery.ending`` waits for accounting to show it); a
        Nextflow job runs ``.command.run``, a shell script, and the manager
        stays on the login node.
        """
        return self.manager == "snakemake"

    @property
    def manager_retries(self) -> bool:
        """Whether the manager submits a failed task again itself (Snakemake's and Nextflow's retries).

        A job library does not: submitit's user submits a function many times
        at once, and a later job of the same function is no retry of a failed one.
        """
        return self.manager in ("snakemake", "nextflow")

    @property
    def inputs_seen(self) -> bool:
        """Whether the files harp-submit stats at submission are this task's inputs.

        A Nextflow task's work directory holds the files Nextflow staged for
        it, its inputs.  A Snakemake job's command line (``--wrap``) names the
        Snakefile, its config and the manager's options, never the rule's
        input files (Snakemake reads them from the Snakefile inside the job):
        the bytes of the files it names are the Snakefile's, the same for
        every rule and every sample, so they are no input size of the task.
        """
        return self.manager == "nextflow"

    def input_bytes(self, stated: float | None) -> float | None:
        """The input size harp may use for this task: what harp-submit stated, or None where it is not the task's."""
        return stated if self.inputs_seen else None

    def signature(self) -> str:
        """``wf:`` + 16 hex digits of manager, workflow and task (never the instance)."""
        text = "\x1f".join((self.manager, self.workflow, self.task))
        return WORKFLOW_PREFIX + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]

    def explain(self) -> dict[str, str | None]:
        return {
            "manager": self.manager,
            "workflow": self.workflow,
            "task": self.task,
            "instance": self.instance,
            "signature": self.signature(),
        }


def _options(tokens: list[str]) -> dict[str, str]:
    """The first value of each ``--option value`` / ``--option=value`` among ``tokens``."""
    out: dict[str, str] = {}
    for i, t in enumerate(tokens):
        if not t.startswith("--"):
            continue
        name, eq, value = t.partition("=")
        if not eq:
            if i + 1 >= len(tokens) or tokens[i + 1].startswith("--"):
                continue
            value = tokens[i + 1]
        out.setdefault(name, value)
    return out


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # unbalanced quotes (a truncated command): whitespace will do
        return text.split()


def snakemake_task(commands: list[str], cwd: str | None) -> TaskIdentity | None:
    """The Snakemake rule a job runs, from the command Snakemake's executor built; None when none."""
    text = "\n".join(commands)
    if not _SNAKEMAKE.search(text):
        return None
    opts = _options(_tokens(text.replace("\n", " ")))
    target = opts.get("--target-jobs", "")
    rule, _, wildcards = target.partition(":")
    allowed = opts.get("--allowed-rules", "").replace(",", " ").split()
    if allowed:
        rule = allowed[0]
    if not rule:
        return None
    snakefile = opts.get("--snakefile") or opts.get("-s") or "Snakefile"
    if cwd and not os.path.isabs(snakefile):
        snakefile = os.path.normpath(os.path.join(cwd, snakefile))
    return TaskIdentity("snakemake", snakefile, rule, wildcards or None)


def nextflow_task(job_name: str | None, script_name: str | None, cwd: str | None) -> TaskIdentity | None:
    """The Nextflow process a job runs: its ``.command.run`` script and ``nf-`` job name; None otherwise.

    Both are needed: a user's own job may well be called ``nf-something``.
    """
    if script_name != ".command.run":
        return None
    m = _NF_NAME.match(job_name or "")
    if m is None:
        return None
    launch = cwd or ""
    w = _NF_WORKDIR.match(launch)
    if w is not None:
        launch = w.group("launch")
    return TaskIdentity("nextflow", launch or "?", m.group("process"), m.group("tag"))


def library_task(commands: list[str], job_name: str | None, function: str | None) -> TaskIdentity | None:
    """A submitit job's function: its folder and the function (else the job name); None when not submitit's.

    The folder is the word after ``-m submitit.core._submit`` in its srun line
    (submitit writes it absolute, ``%j`` and all).  Without a function (the
    pickle was unreadable, or another client) the job name stands for it:
    submitit names every job ``submitit`` unless its user names it.

    dask-jobqueue and parsl submit pilot jobs (``python -m distributed.cli.dask_worker``,
    ``process_worker_pool.py``) that each run many functions for as long as
    the pool lives: their program and name are their identity (the launcher
    parser's ``python -m MODULE``), and no function is.
    """
    for line in commands:
        words = _tokens(line)
        for i in range(len(words) - 2):
            if words[i] == "-m" and words[i + 1] == SUBMITIT_MODULE:
                task = function or job_name or "submitit"
                return TaskIdentity("submitit", words[i + 2], task, None)
    return None


def identify(
    commands: list[str] | None,
    job_name: str | None = None,
    script_name: str | None = None,
    cwd: str | None = None,
    function: str | None = None,
) -> TaskIdentity | None:
    """The workflow task (or job library's function) a job is, or None for a job no manager submitted."""
    cmds = [str(c) for c in commands or []]
    return (
        snakemake_task(cmds, cwd) or nextflow_task(job_name, script_name, cwd) or library_task(cmds, job_name, function)
    )


def registered_signature(job: Any) -> str | None:
    """The signature of a registered job (its ``job`` object): the one it carries, else ``job_signature``
    of its commands, as harp-submit sends commands and never a signature."""
    if not isinstance(job, dict):
        return None
    if job.get("signature"):
        return str(job["signature"])
    commands = job.get("commands")
    if not commands:
        return None

    def text(key: str) -> str | None:
        value = job.get(key)
        return None if value is None else str(value)

    return job_signature(
        [str(c) for c in commands], text("job_name"), text("script_name"), text("cwd"), text("function")
    )


def job_signature(
    commands: list[str] | None,
    job_name: str | None = None,
    script_name: str | None = None,
    cwd: str | None = None,
    function: str | None = None,
) -> str | None:
    """The signature harpd groups a job by: its workflow task's, else its commands' (None without either).

    The one function both the request path (``harpd.predict.live``) and the
    outcome path (``harpd.ingest.poller``) use, so a task's runs meet its history.
    """
    ident = identify(commands, job_name, script_name, cwd, function)
    if ident is not None:
        return ident.signature()
    return signature_of(commands) if commands else None


def registered_input_bytes(job: Any) -> float | None:
    """The input bytes harp-submit stated for a registered job (its ``job`` object), None where they are
    not its inputs (a Snakemake task: ``TaskIdentity.inputs_seen``) or were not stated."""
    if not isinstance(job, dict) or not isinstance(job.get("input_bytes"), (int, float)):
        return None
    commands = job.get("commands")
    ident = None
    if isinstance(commands, list):
        name, script, cwd = (job.get(k) for k in ("job_name", "script_name", "cwd"))
        ident = identify(
            [str(c) for c in commands],
            None if name is None else str(name),
            None if script is None else str(script),
            None if cwd is None else str(cwd),
        )
    stated = float(job["input_bytes"])
    return stated if ident is None else ident.input_bytes(stated)


def is_workflow_signature(signature: str | None) -> bool:
    return bool(signature) and str(signature).startswith(WORKFLOW_PREFIX)
