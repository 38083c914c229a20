"""The queue rule in a real root harpd (soft limits, ``predict.queue_rule`` on by default), against the real Slurm.

harpd's model is trained on 1500 runs of about 100 s (test_soft_limits_live's
``train``).  A job of that signature asking 3 minutes gets a shallow soft
cut (1 or 2 minutes, more than a quarter of its request).  Behind a queue that
would keep every processor busy for longer than those 3 minutes (one job holding every
processor, one as wide waiting with 30 minutes), harpd plans it with its
request and says why; once the queue has drained, the same question gets the
cut again.  harpd reads the queue from its watcher's listing (every 2 s
here), never from an squeue of its own, so each answer is awaited, not timed.
A held job as wide and as long does not count: it is not in line.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_recovery import REPO
from test_soft_limits_live import SIGNATURE, SoftDaemon, train

from harp_submit import client
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

ASK = {
    "op": "predict",
    "job": {
        "partition": "short",
        "job_name": "soft.sh",
        "signature": SIGNATURE,
        "request": {"time_s": 180, "mem_mb": 100, "partition": "short"},
    },
}
QUEUE_REASON = "waiting work fills the machine"


def _time(ans: dict[str, Any]) -> tuple[str | None, str]:
    """(harp's new time limit or None, the reason harp gives for its time decision)."""
    assert ans.get("ok"), ans
    decision = ans.get("decision") or {}
    change = next((c for c in decision.get("changes") or [] if c["option"] == "time"), None)
    reason = str(((decision.get("explain") or {}).get("time") or {}).get("reason", ""))
    return (None if change is None else change["value"]), reason


@pytest.fixture(scope="module")
def harpd(slurm_cluster):
    c = slurm_cluster
    base = Path(tempfile.mkdtemp(prefix="hqr-", dir="/tmp"))
    base.chmod(0o755)
    d = SoftDaemon("queue", base / "d", None, sys.executable, str(REPO), str(c.conf))
    d.dir.mkdir()
    d.write_config()
    train(d)
    d.start()
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_a_shallow_soft_cut_keeps_its_request_while_the_queue_outlasts_it(slurm_cluster, harpd) -> None:
    c = slurm_cluster
    ask = lambda: _time(client.call(harpd.socket, ASK, 30.0))  # noqa: E731
    health = client.call(harpd.socket, {"op": "health"}, 10.0)
    assert health["limits"]["mode"] == "soft", health["limits"]
    show = lambda: f"{client.call(harpd.socket, ASK, 30.0)}\n{harpd.log_tail()}"  # noqa: E731 - when a wait fails
    cut, why = wait_for("a soft time cut on an empty queue", lambda: (a := ask())[0] and a, 120, 1.0, show)
    assert cut in ("00:01:00", "00:02:00"), why  # whole minutes above a quarter of the 3-minute request: shallow
    assert QUEUE_REASON not in why
    cpus = c.node_cpus()
    wide = (f"--ntasks={cpus}", "--mem=100M", "-p", "short", "-o", "/dev/null")
    jobs: list[str] = []
    try:
        # a held job as wide and as long is not in line: the cut stands
        jobs.append(c.sbatch(*wide, "--hold", "--time=30", "--job-name=q held", script="sleep 1\n"))
        jobs.append(c.sbatch(*wide, "--time=30", "--job-name=q all", script="sleep 900\n"))
        wait_for(
            "the job holding every processor to run",
            lambda: c.run(["squeue", "-h", "-j", jobs[-1], "-o", "%T"], check=False).stdout.strip() == "RUNNING",
            180,
            1.0,
        )
        # the watcher lists the queue every 2 s: a few listings later the cut still stands
        seen = client.call(harpd.socket, {"op": "health"}, 10.0)["watch"]["at"]
        wait_for(
            "two more watcher listings",
            lambda: (client.call(harpd.socket, {"op": "health"}, 10.0)["watch"]["at"] or 0) > (seen or 0) + 2,
            120,
            0.5,
            harpd.log_tail,
        )
        assert ask()[0] == cut, "a running job and a held one are no queue to weigh a cut against"
        # now one as wide waits 30 minutes: the machine is busy longer than the 3-minute request
        jobs.append(c.sbatch(*wide, "--time=30", "--job-name=q|wait;1", script="sleep 1\n"))
        kept = wait_for("the request kept behind the queue", lambda: (a := ask())[0] is None and a, 120, 1.0, show)
        assert QUEUE_REASON in kept[1], kept
    finally:
        c.run(["scancel", *jobs], check=False)
    again = wait_for("the cut back once the queue drained", lambda: (a := ask())[0] and a, 180, 1.0, show)
    assert again[0] == cut and QUEUE_REASON not in again[1]
