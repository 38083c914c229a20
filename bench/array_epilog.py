"""How long a registered array's tasks wait at their end for harp's TaskEpilog (target <= 2 s).

#51: the last task of an array submitted through harp-submit waited ~20 s at
its end: its TaskEpilog asked harpd about the array's id (that task's
SLURM_JOB_ID), accounting named the task ``ID_N``, and harpd waited out its
evidence window for a run it never found.  The hook now names an array task
as accounting does (``harp_submit.task_epilog.job_name``).

On the local cluster (``scripts/localslurm``: ``HARP_SLURM_DIR``, or
``SLURM_CONF``; its slurm.conf sets harp's TaskEpilog) with a real harpd,
this submits an array of ``--tasks`` tasks through harp-submit, each running
one ``srun`` step, and reads from accounting each task's end minus its
step's end (whole seconds, as sacct prints them).  The figure: the largest
over the tasks, the last task included.

    python bench/array_epilog.py [--tasks 4]
"""
# bench: timeout=300

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from load_submit import Harpd, slurm_conf  # noqa: E402

TARGET_S = 2.0
RUN_SUBMIT = "import sys; from harp_submit.cli import main; sys.exit(main())"


def _epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def _gaps(env: dict[str, str], job_id: str) -> dict[str, float] | None:
    """Task -> its end minus its step 0's end, once every task and step has ended; else None."""
    out = subprocess.run(
        ["sacct", "-P", "-n", "-j", job_id, "-o", "JobID,State,End"], env=env, capture_output=True, text=True
    ).stdout
    ends: dict[str, str] = {}
    for line in out.splitlines():
        jid, state, end = line.split("|")[:3]
        if state in ("PENDING", "RUNNING", "REQUEUED") or end in ("", "Unknown"):
            return None
        ends[jid] = end
    tasks = [j for j in ends if "." not in j and "_" in j and "[" not in j]
    if not tasks or any(f"{t}.0" not in ends for t in tasks):
        return None
    return {t: _epoch(ends[t]) - _epoch(ends[f"{t}.0"]) for t in tasks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=4)
    args = ap.parse_args()
    conf = slurm_conf()
    if conf is None:
        print("no Slurm cluster: start one with scripts/localslurm start (or set SLURM_CONF)", file=sys.stderr)
        print(f"FIGURE array_task_epilog_wait: nan s (target <= {TARGET_S:g}) FAIL")
        return 1
    with tempfile.TemporaryDirectory(prefix="harp-bench-array-") as tmp:
        d = Path(tmp)
        os.chmod(d, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SBATCH_"))}
        env["SLURM_CONF"] = conf
        harpd = Harpd(d, env, log_level="info")
        # recovery on (the hook asks it), as a site runs harpd
        harpd.config.write_text(harpd.config.read_text().replace("[recovery]\nenabled = false\n", ""))
        try:
            harpd.start()
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            print(f"FIGURE array_task_epilog_wait: nan s (target <= {TARGET_S:g}) FAIL")
            return 1
        sock = harpd.socket
        try:
            script = d / "array.sh"
            script.write_text(
                f"#!/bin/bash\n#SBATCH --array=0-{args.tasks - 1}\n#SBATCH -p short\n#SBATCH -t 5\n"
                f"#SBATCH --mem=100M\n#SBATCH -o {d}/%A_%a.out\nsrun sleep 1\n"
            )
            submit_env = {**env, "HARP_SOCKET": sock, "HARP_CONFIG": "/nonexistent", "PYTHONPATH": str(REPO)}
            sub = subprocess.run(
                [sys.executable, "-c", RUN_SUBMIT, "--parsable", str(script)],
                env=submit_env,
                cwd=d,
                capture_output=True,
                text=True,
                timeout=60,
            )
            job_id = sub.stdout.strip().split(";")[0]
            if sub.returncode != 0 or not job_id.isdigit():
                print(f"harp-submit failed: {sub.stderr}", file=sys.stderr)
                print(f"FIGURE array_task_epilog_wait: nan s (target <= {TARGET_S:g}) FAIL")
                return 1
            gaps = None
            deadline = time.monotonic() + 240
            while gaps is None and time.monotonic() < deadline:
                time.sleep(1)
                gaps = _gaps(env, job_id)
        finally:
            harpd.stop()
    if gaps is None:
        print(f"FIGURE array_task_epilog_wait: nan s (target <= {TARGET_S:g}) FAIL")
        return 1
    for task, gap in sorted(gaps.items()):
        print(f"task {task}: ended {gap:.0f} s after its step")
    worst = max(gaps.values())
    verdict = "PASS" if worst <= TARGET_S else "FAIL"
    print(f"FIGURE array_task_epilog_wait: {worst:.0f} s (target <= {TARGET_S:g}) {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
