"""``harp dnn plan KEY=VALUE ...``: the deadline, search and batch plan harpd would make, printed.

The same ``plan_dnn_job`` harpd runs on a ``#HARP dnn deadline=... `` line, so
what a user sees here is what their job gets: the configuration, its
predicted time and billed GPU-hours, the plan per successive-halving stage,
the static single-pool alternative, and the sbatch changes.  ``--run
N[xTYPE]:ELAPSED`` adds an earlier run for the scaling fit (as ``runs=``).
``--slurm`` reads the partitions and their TRESBillingWeights from Slurm.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from harpd.cli.main import CliError, settings_of


def json_or_error(plan: Any, fmt: str) -> int | None:
    """What `harp dnn plan` and `harp dnn choose` share: the plan as JSON when asked for (exit 1 on a
    plan error), else its error as a CliError; None when the caller goes on to print the plan."""
    if fmt == "json":
        json.dump(
            {"changes": [c.model_dump() for c in plan.changes], "explain": plan.explain, "error": plan.error},
            sys.stdout,
            indent=2,
        )
        print()
        return 1 if plan.error else 0
    if plan.error:
        raise CliError(plan.error)
    return None


def add_arguments(p: argparse.ArgumentParser, keys_help: str, nargs: str) -> None:
    p.add_argument("keys", nargs=nargs, metavar="KEY=VALUE", help=keys_help)
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="N[xTYPE]:ELAPSED",
        help="an earlier run of this job for the scaling fit, e.g. --run 4xa100:3h (repeatable)",
    )
    p.add_argument(
        "--slurm",
        action="store_true",
        help="check GPU types and read TRESBillingWeights from Slurm (scontrol show partition)",
    )
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--cwd", default=None, help="directory config= paths are relative to (default: here)")


def _slurm_view(settings: Any) -> tuple[dict[str, Any] | None, dict[str, dict[str, float]] | None]:
    from harpd.slurm import SlurmError, get_backend
    from harpd.slurm.billing import billing_weights

    try:
        backend = get_backend(settings)
        return backend.partitions(), billing_weights(backend)
    except SlurmError as exc:
        raise CliError(f"cannot read Slurm's partitions: {exc}") from None


def _table(goals: dict[str, Any]) -> list[str]:
    out = []
    stages = goals.get("stages") or []
    if len(stages) > 1:
        out.append(
            f"  {'stage':>5} {'trials':>6} {'tokens/trial':>13} {'per trial':<28} {'waves':>5} "
            f"{'hours':>7} {'billed GPU-h':>12}"
        )
        for s in stages:
            cfg = f"{s['n_gpus']} x {s['gpu_type']} ({s['nodes']}x{s['gpus_per_node']}) z{s['zero']}"
            out.append(
                f"  {s['stage']:>5} {s['trials']:>6} {s['tokens_per_trial']:>13.3g} {cfg:<28} "
                f"{s['waves']:>5} {s['time_h']:>7.2f} {s['billed_gpu_hours']:>12.1f}"
            )
    static = goals.get("static")
    if static:
        out.append(
            f"  static alternative: one pool of {static['pool_gpus']} x {static['gpu_type']} for the whole "
            f"search, {static['time_h']:.2f} h, {static['billed_gpu_hours']:.1f} billed GPU-hours "
            f"({static['cost_ratio_static_over_plan']}x the plan)"
        )
    return out


def run(args: argparse.Namespace) -> int:
    from harpd.dnn.plan import plan_dnn_job

    if not args.keys:
        raise CliError(
            "harp dnn plan needs KEY=VALUE words, e.g. config=config.json seq_len=2048 "
            "tokens=20e9 deadline=8h (or trials=27 eta=3, or batch=256..2048)"
        )
    settings = settings_of(args)
    words = list(args.keys)
    if args.run:
        if any(w.lower().startswith("runs=") for w in words):
            raise CliError("give earlier runs either as runs= or as --run, not both")
        words.append("runs=" + ",".join(args.run))
    line = "#HARP dnn " + " ".join(shlex.quote(w) for w in words)
    partitions, billing = _slurm_view(settings) if args.slurm else (None, None)
    import os

    plan = plan_dnn_job([line], {}, args.cwd or os.getcwd(), settings, partitions=partitions, billing=billing)
    dnn = plan.explain.get("dnn", {})
    if (rc := json_or_error(plan, args.format)) is not None:
        return rc
    goals = dnn.get("goals") or {}
    print(f"harp dnn plan: {goals.get('summary') or 'no deadline, search or batch range: the cheapest fit'}")
    for row in _table(goals):
        print(row)
    opts = [f"--{ch.option}={ch.value}" for ch in plan.changes]
    width = max((len(o) for o in opts), default=0)
    for opt, ch in zip(opts, plan.changes):
        print(f"  {opt:<{width}}  {ch.reason}")
    for note in dnn.get("notes", []):
        if note != goals.get("summary"):
            print(f"note: {note}")
    return 0
