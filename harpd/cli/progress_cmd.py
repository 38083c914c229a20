"""``harp progress --metric loss=0.31``: a running trial tells harpd how it converges (Hermes, harpd.dnn.trials).

Run from inside the job: the job id comes from Slurm's environment (an array
task as ``ARRAYID_TASK``), the study from ``--study`` or ``HARP_STUDY`` (the
``#HARP study=...`` words), else the array.  harpd takes the report only from
Slurm's owner of the job while it runs.  harpd being down is a note on stderr
and exit 0, so a training script under ``set -e`` never stops for it; a refused
report (not your job, a bad study line) is exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from harpd.cli.ask import Refused, Unreachable, ask
from harpd.cli.main import CliError

NAME = "progress"
HELP = "report a running trial's metric (from inside the job) so harpd can favour fast-converging studies"


class NotRecorded(CliError):
    exit_code = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric", required=True, metavar="NAME=VALUE", help="e.g. loss=0.31 (the study's metric)")
    parser.add_argument(
        "--study",
        metavar="WORDS",
        help="the study: 'study=NAME [metric=loss] [mode=min|max] [stop=sha] [eta=3] [rung=30m]' "
        "(default: HARP_STUDY, else the job's array)",
    )
    parser.add_argument(
        "--job", metavar="JOBID", help="the job (default: from SLURM_ARRAY_JOB_ID/TASK_ID, SLURM_JOB_ID)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait for harpd (default 5)")


def job_of_env(env: dict[str, str]) -> str | None:
    """The job id harpd and scontrol use for this job: ``ARRAY_TASK`` for an array task, else SLURM_JOB_ID."""
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return env.get("SLURM_JOB_ID")


def run(args: argparse.Namespace) -> int:
    from harpd.dnn.errors import DnnError
    from harpd.dnn.trials import parse_metric

    try:
        metric, value = parse_metric(args.metric)
    except DnnError as exc:
        raise CliError(str(exc)) from None
    job = args.job or job_of_env(dict(os.environ))
    if not job:
        raise CliError("no job: run harp progress inside a Slurm job (SLURM_JOB_ID unset), or give --job")
    if args.timeout <= 0:
        raise CliError("--timeout must be positive")
    message = {"op": "progress", "job_id": job, "metric": metric, "value": value}
    study = args.study if args.study is not None else os.environ.get("HARP_STUDY")
    if study:
        message["study"] = study
    try:
        answer = ask(args, message, args.timeout)
    except Refused as exc:
        raise NotRecorded(f"progress not recorded: {exc}") from None
    except Unreachable as exc:
        print(f"harp: progress not recorded: {exc}", file=sys.stderr)
        return 0
    print(
        f"job {job}: {metric}={value:g} recorded for study {answer.get('study')} "
        f"at {float(answer.get('elapsed_s') or 0) / 60:.1f} min of its run"
    )
    return 0
