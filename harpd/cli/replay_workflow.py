"""The workflow-task memory part of ``harp replay``: Sizey's wastage table (harpd.evaluate.workflow_replay).

``harp replay TRACE --resource mem`` on a Nextflow trace adds it under the
usual table (chronological protocol); ``--protocol sizey --seed N`` prints it
alone, measured as the Sizey paper does, so the figures can be set beside
the paper's.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `harp --help` does not load numpy
    from harpd.evaluate.sizey_metric import WastageFigures
    from harpd.evaluate.workflow_replay import WorkflowFigures

NAMES = {
    "harp": "harp",
    "witt-percentile": "Witt percentile",
    "witt-lr": "Witt LR (std)",
    "witt-lr-under": "Witt LR (std of under-predictions)",
    "tovar": "Tovar",
    "request": "users' requests",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--protocol",
        choices=["chronological", "sizey"],
        default="chronological",
        help="--resource mem on a Nextflow trace: chronological (the default: submission order, a task "
        "learnt once finished) or sizey (the Sizey paper's per-type 30/70 split; docs/metrics.md, "
        "'Workflow task memory')",
    )
    p.add_argument(
        "--decide-at",
        choices=["start", "submit"],
        default="start",
        dest="decide_at",
        help="--protocol chronological: a task is sized from its type's tasks that had ended by its start "
        "(the default: harpd re-sizes a pending task as its siblings finish) or by its submission",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=1996,
        metavar="N",
        help="--protocol sizey: the split's random_state (default: %(default)s, the paper's)",
    )


def is_nextflow(path: str) -> bool:
    from harpd.traces import TraceFormatError, detect_format

    try:
        return detect_format(path) == "nextflow"
    except (TraceFormatError, OSError, UnicodeError):
        return False


def check(args: argparse.Namespace) -> str | None:
    """One line saying what is wrong with the workflow options, or None."""
    if args.protocol == "sizey":
        if args.resource != "mem":
            return "--protocol sizey measures memory; add --resource mem"
        if not is_nextflow(args.trace):
            return (
                f"{args.trace}: --protocol sizey needs a Nextflow trace (`nextflow run -with-trace`); "
                "drop --protocol for SWF and sacct exports"
            )
    return None


def report(trace: str, protocol: str, seed: int, at: str = "start") -> WorkflowFigures:
    """The workflow figures (raises WorkflowReplayError / TraceFormatError with one line)."""
    from harpd.evaluate.workflow_replay import replay_workflow

    return replay_workflow(trace, protocol, seed, at).to_dict()


def render(rep: WorkflowFigures) -> str:
    """Sizey's table: wastage GB·h (failures) per predictor, best baseline and harp's ratio to it."""
    rows = rep["rows"]
    proto = rep["protocol"] + (f", seed {rep['seed']}" if rep["seed"] is not None else "")
    if rep.get("decided_at"):
        proto += f", decided at {rep['decided_at']}"
    out = [
        "",
        f"workflow task memory, Sizey's wastage ({proto}): {rep['tasks']} tasks of {rep['types']} types, "
        f"memory used {rows['harp']['used_gbh']:,.1f} GB·h",
    ]
    width = max(len(v) for v in NAMES.values())
    out.append(f"{'predictor'.ljust(width)}  {'wastage GB·h':>12}  {'failures':>8}")
    for key, name in NAMES.items():
        if key in rows:
            r = rows[key]
            out.append(f"{name.ljust(width)}  {r['wastage_gbh']:>12,.1f}  {r['failures']:>8}")
    base = best_baseline(rows)
    if base is not None and rows[base]["wastage_gbh"] > 0:
        ratio = rows["harp"]["wastage_gbh"] / rows[base]["wastage_gbh"]
        out.append(
            f"harp / best baseline ({NAMES[base]}): {ratio:.2f} of its wastage, "
            f"{rows['harp']['failures']} failures against {rows[base]['failures']}"
        )
    if rep["protocol"] == "chronological":
        out.append(
            "this table sizes each task as harpd sizes a workflow task (from its process's siblings) and counts "
            "every failed attempt; the table above sizes the same tasks as general jobs (by user and request) "
            "and counts jobs killed at least once: the two harp rows are different rules, not one counted twice"
        )
    if rep.get("predict_ms_p99") is not None:
        out.append(f"harp's prediction: {rep['predict_ms_p99']:.2f} ms at the 99th percentile")
    return "\n".join(out) + "\n"


def best_baseline(rows: dict[str, WastageFigures]) -> str | None:
    """The history baseline with the least wastage (never harp, never the users' requests)."""
    cands = [k for k in rows if k not in ("harp", "request")]
    return min(cands, key=lambda k: rows[k]["wastage_gbh"]) if cands else None
