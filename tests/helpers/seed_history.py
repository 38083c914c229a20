"""The history a real-cluster test's harpd starts from: earlier runs of one script, in its store.

harpd sizes a job from the finished runs of its signature, so a test that
wants harp to change a request seeds those runs first, with the signature
harpd will compute for the script it then submits.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harpd.records import JobRecord, Outcome
from harpd.store import Store


def script_signature(script: str, name: str) -> str | None:
    """The signature harpd computes for ``script`` submitted as ``name``, as the poller would store it."""
    from harp_submit import directives
    from harp_submit.request import Request
    from harp_submit.sbatch_options import SBATCH_TABLE
    from harpd.features.workflow import job_signature

    req = Request(SBATCH_TABLE.parse([]), {}, directives.parse(script), script_path=name, script_text=script)
    return job_signature(req.commands(), req.job_name(), name, None)


def seed_runs(
    store_path: str | Path,
    signature: str | None,
    n: int,
    *,
    used_time_s: float,
    gap_s: float = 60.0,
    ago_s: float = 7200.0,
    **fields: Any,
) -> None:
    """``n`` COMPLETED runs of ``signature`` by root, one every ``gap_s``, the first ``ago_s`` ago.

    ``fields`` are the rest of each ``JobRecord`` (request, usage, job name).
    """
    now = time.time()
    rec: dict[str, Any] = {
        "source": "seed",
        "user": "root",
        "account": "harp",
        "partition": "short",
        "outcome": Outcome.COMPLETED,
    }
    rec.update(fields)
    runs = []
    for i in range(n):
        start = now - ago_s + i * gap_s
        runs.append(
            JobRecord(
                job_id=f"seed{i}",
                signature=signature,
                submit_time=start,
                start_time=start,
                end_time=start + used_time_s,
                used_time_s=used_time_s,
                **rec,
            )
        )
    with Store.open(store_path) as st:
        st.insert_jobs(runs)
