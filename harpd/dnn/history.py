"""The job's own earlier runs, from harpd's history, for the scaling fit of deadline and batch plans.

"The same job" is the same ``#HARP dnn`` description apart from what only
says where or how to run it (GPU count and type, ZeRO stage, launcher) and
the goals themselves (deadline, stage, batch, runs): ``goal_signature``.  An
earlier run counts when the submitter is the same user, harpd recorded the
submission (its ``#HARP`` lines and the GPUs it was submitted with), and
Slurm says it COMPLETED (a failed or killed run is never learnt as usage).
Only the store's existing queries are used (submissions of one uid since a
time, then each job's record), and at most ``MAX_SCAN`` submissions are read,
so a user with a long history cannot slow a decision down.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from harpd.dnn.goals import MAX_RUNS, RunTime
from harpd.dnn.site_check import parse_gres
from harpd.dnn.spec import dnn_tokens
from harpd.records import Resources

LOOKBACK_S = 90 * 86400
MAX_SCAN = 2000
_NOT_IN_SIGNATURE = frozenset(
    {"gpus", "gpu_type", "zero", "launcher", "deadline", "stage", "batch", "runs", "accounting"}
)


def goal_signature(tokens: dict[str, str]) -> str:
    key = {k: v for k, v in sorted(tokens.items()) if k not in _NOT_IN_SIGNATURE}
    return "dnnrun:" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _gpus_of(submitted: Resources) -> tuple[int, int, str | None] | None:
    """(GPUs, nodes, type) of a submitted request: --gres per node x nodes, or --gpus in all."""
    nodes = int(submitted.nodes or 1)
    for name, typ, count in parse_gres(submitted.gres):
        if name == "gpu":
            return count * nodes, nodes, typ
    gpus = submitted.gpus
    if gpus:
        typ, _, n = str(gpus).rpartition(":")
        if n.isdigit():
            return int(n), nodes, typ or None
    return None


def runs_from_store(store: Any, uid: int, tokens: dict[str, str], *, now: float | None = None) -> tuple[RunTime, ...]:
    """COMPLETED earlier runs of the same description by ``uid``, newest first, at most MAX_RUNS."""
    want = goal_signature(tokens)
    since = (time.time() if now is None else now) - LOOKBACK_S
    subs = store.submissions_since(int(uid), since)[-MAX_SCAN:]
    runs: list[RunTime] = []
    for sub in reversed(subs):
        job = sub.job
        try:
            theirs = dnn_tokens(list(job.get("harp_lines") or []))
        except Exception:  # a line that no longer parses is not this job
            continue
        if not theirs or goal_signature(theirs) != want:
            continue
        gpus = _gpus_of(sub.submitted)
        if gpus is None:
            continue
        rec = store.get_job(str(sub.job_id))
        if rec is None or not rec.used_time_s or getattr(rec.outcome, "value", rec.outcome) != "completed":
            continue
        n, nodes, typ = gpus
        runs.append(RunTime(n, float(rec.used_time_s), typ, max(1, min(nodes, n))))
        if len(runs) >= MAX_RUNS:
            break
    return tuple(runs)
