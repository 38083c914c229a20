"""Successive halving holds a pending trial, on the real Slurm; another user's trial is never touched.

A root harpd (privileged, so its watch runs) lists the queue every 2 s.
Trials are plain jobs of one study (``HARP_STUDY="study=hold-live stop=sha
eta=2 rung=4s"``) that report their loss with the real ``harp progress``
every 2 s:

* trial B (root, loss 0.9) runs past the rung and is then put back to
  pending by the test (``scontrol requeuehold``, a start time an hour ahead,
  ``release``): a pending trial with reports, as a requeued trial is;
* trial O (harptest1, the same study name, loss 0.95) the same: its study
  is harptest1's, not root's, so nothing root's trials do may touch it;
* trial A (root, loss 0.2) runs past the rung: two of root's trials have
  reached it, B's 0.9 is clearly not among the best half, and B is pending,
  so harpd holds it (``scontrol hold``: Priority=0, JobHeldAdmin) and
  ``harp status`` says why.  A runs on; O stays pending, unheld, with no
  action recorded.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from test_recovery import REPO, Daemon

from harp_submit import client
from tests.helpers.users import ensure_user
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

DEADLINE_S = 300
OTHER = "harptest1"
STUDY = "study=hold-live stop=sha eta=2 rung=4s"
RUNG_S = 4


def script(conf: Path) -> str:
    harp = f"env PYTHONPATH={REPO} {sys.executable} -m harpd.cli.main --config {conf} progress"
    return (
        "#!/bin/bash\n"
        "# $1: the trial's loss; $2: the study words\n"
        'export HARP_STUDY="$2"\n'
        f'for i in $(seq 150); do {harp} --metric loss="$1"; sleep 2; done\n'
        "sleep 600\n"
    )


def fields(c, jid: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", c.scontrol("show", "job", jid)))


@pytest.fixture(scope="module")
def trials(slurm_cluster):
    c = slurm_cluster
    ensure_user(OTHER)
    base = Path(tempfile.mkdtemp(prefix="hth-", dir="/tmp"))
    base.chmod(0o777)
    d = Daemon("trials-hold", base / "d", None, sys.executable, str(REPO), str(c.conf))
    d.dir.mkdir()
    d.dir.chmod(0o755)
    d.write_config()
    with open(d.dir / "harpd.toml", "a") as fh:
        fh.write("[watch]\ninterval_s = 2.0\n")
    (base / "trial.sh").write_text(script(d.dir / "harpd.toml"))
    (base / "trial.sh").chmod(0o755)
    jobs: list[str] = []

    def sbatch(loss: str, user: str | None = None) -> str:
        out = c.run(
            ["sbatch", "--parsable", "--time=10", "--mem=50M", "-c", "1", "-p", "short"]
            + [f"--output={base}/%j.out", str(base / "trial.sh"), loss, STUDY],
            user=user,
            cwd=base,
        ).stdout
        jid = out.strip().split(";")[0]
        assert jid.isdigit(), out
        jobs.append(jid)
        return jid

    try:
        d.start()
        yield c, d, sbatch
    finally:
        d.stop()
        if jobs:
            c.run(["scancel", *jobs], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _trial(d: Daemon, jid: str) -> dict:
    try:
        answer = client.call(d.socket, {"op": "status", "job_id": jid}, 10.0)
    except client.HarpdUnavailable as exc:
        if "knows no job" in str(exc):
            return {}  # not reported yet
        raise
    return (answer.get("job") or {}).get("trial") or {}


def _past_rung(d: Daemon, jid: str) -> bool:
    last = _trial(d, jid).get("last_report") or {}
    return float(last.get("elapsed_s") or 0) >= RUNG_S * 2  # past the rung, and past the next one too


def _back_to_pending(c, jid: str) -> None:
    """As a requeued trial waiting for its next start: pending, not held."""
    c.scontrol("requeuehold", jid)
    c.scontrol("update", f"JobId={jid}", "StartTime=now+3600")
    c.scontrol("release", jid)


def test_a_pending_trial_that_halving_stops_is_held_and_another_users_is_not(trials):
    c, d, sbatch = trials
    worse = sbatch("0.9")
    other = sbatch("0.95", user=OTHER)
    for jid in (worse, other):
        wait_for(
            f"trial {jid} reporting past the rung",
            lambda j=jid: _past_rung(d, j),
            DEADLINE_S,
            interval=1,
            log=d.log_tail,
        )
    for jid in (worse, other):
        _back_to_pending(c, jid)
        wait_for(
            f"trial {jid} pending, not held",
            lambda j=jid: fields(c, j).get("JobState") == "PENDING" and fields(c, j).get("Priority") != "0",
            DEADLINE_S,
            interval=1,
        )
    assert not (_trial(d, worse).get("action") or {}), _trial(d, worse)  # one trial at the rung: nobody stopped

    better = sbatch("0.2")
    wait_for(
        "the worse pending trial held",
        lambda: fields(c, worse).get("Priority") == "0",
        DEADLINE_S,
        interval=1,
        log=lambda: d.log_tail(60),
    )
    f = fields(c, worse)
    assert f["JobState"] == "PENDING" and f["Reason"] in ("JobHeldAdmin", "JobHeldUser"), f
    action = _trial(d, worse).get("action") or {}
    assert action.get("reason", "").startswith("held: successive halving"), action
    assert "loss=0.9 is not among the best 1 of 2" in action["reason"], action
    # the better trial runs on, untouched
    assert fields(c, better).get("JobState") == "RUNNING"
    assert not (_trial(d, better).get("action") or {}), _trial(d, better)
    # another user's trial of a study with the same name: never held, no action recorded
    o = fields(c, other)
    assert o["JobState"] == "PENDING" and o.get("Priority") != "0" and "JobHeld" not in o.get("Reason", ""), o
    assert not (_trial(d, other).get("action") or {}), _trial(d, other)
    c.run(["scancel", worse, other, better], check=False)
