"""The sbatch command line of a resubmission: the user's own, with new limits.

Recovery's resubmit mode runs sbatch again with the options and script
arguments harp-submit registered (``JobRequest.argv``: what sbatch got) and
the script Slurm stored for the failed job (``scontrol write batch_script``),
read on standard input as ``/dev/stdin`` so the script arguments survive.
The user's options are read with harp-submit's own getopt table and written
back in long form; a few are dropped because they made sense once only or
are set explicitly here:

* one-time or blocking: ``--wrap`` (its script is the stored one now),
  ``--wait``, ``--hold``, ``--dependency`` (the failed run had it satisfied),
  ``--begin``, ``--array``, ``--test-only``, ``--parsable``, ``--quiet``,
  ``--uid``/``--gid`` (harpd submits as the owner);
* set from the failed job: ``--job-name``, ``--partition``, ``--account``,
  ``--chdir`` (absolute), ``--comment`` (the marker that makes a resubmission
  findable after a crash);
* a larger GPU configuration after a GPU out-of-memory (``gpu_escalation``):
  ``--gres`` or ``--gpus``, ``--nodes``, ``--ntasks-per-node``;
* the limits: ``--time`` and, when recovery knows the memory, the memory
  option in the unit the job used (``--mem`` or ``--mem-per-cpu``); the other
  memory options go, since sbatch refuses two of them.
"""

from __future__ import annotations

from collections.abc import Mapping

from harp_submit.sbatch_options import SBATCH_TABLE, GetoptError
from harpd.recovery.attempts import AttemptLimits
from harpd.slurm.base import whole_minutes

__all__ = ["resubmit_argv", "ArgvError"]

_DROP = frozenset(
    {
        "wrap",
        "wait",
        "hold",
        "dependency",
        "begin",
        "array",
        "test-only",
        "parsable",
        "quiet",
        "uid",
        "gid",
        "job-name",
        "partition",
        "account",
        "chdir",
        "comment",
        "time",
    }
)
_MEM = frozenset({"mem", "mem-per-cpu", "mem-per-gpu"})


class ArgvError(ValueError):
    """The registered argv cannot be turned into a resubmission (one line)."""


def resubmit_argv(
    argv: list[str],
    limits: AttemptLimits,
    *,
    job_name: str | None,
    workdir: str,
    comment: str,
    account: str | None = None,
    options: Mapping[str, str] | None = None,
) -> list[str]:
    """sbatch's arguments for the resubmission (the script comes on stdin).

    ``options``: more options to set (a larger GPU configuration's ``gres`` or
    ``gpus``, ``nodes``, ``ntasks-per-node``); the user's own of those names go,
    and the command line wins over the script's ``#SBATCH`` lines and ``SBATCH_*``.
    """
    options = dict(options or {})
    try:
        parsed = SBATCH_TABLE.parse(list(argv))
    except GetoptError as exc:
        raise ArgvError(f"the registered sbatch arguments do not parse: {exc}") from None
    sets_mem = bool(limits.mem)
    out: list[str] = []
    for o in parsed.options:
        if o.name in _DROP or (sets_mem and o.name in _MEM) or o.name in options:
            continue
        out.append(f"--{o.name}" if o.value is None else f"--{o.name}={o.value}")
    rest = list(argv[parsed.end :])
    script_args = rest[1:] if rest else []
    if job_name:
        out.append(f"--job-name={job_name}")
    if limits.partition:
        out.append(f"--partition={limits.partition}")
    if account:
        out.append(f"--account={account}")
    out.append(f"--chdir={workdir}")
    out.append(f"--comment={comment}")
    if limits.time_s:
        out.append(f"--time={whole_minutes(limits.time_s)}")
    if limits.mem_per_cpu_mb:
        out.append(f"--mem-per-cpu={int(limits.mem_per_cpu_mb)}M")
    elif limits.mem_mb:
        out.append(f"--mem={int(limits.mem_mb)}M")
    out += [f"--{name}={value}" for name, value in options.items()]
    if script_args:
        # sbatch takes script arguments only after a script file name
        out += ["/dev/stdin", *script_args]
    return out
