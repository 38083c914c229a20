"""Ingest against the real local Slurm 22.05: classification, latency, crash safety.

* A completed, a TIMEOUT and an OOM-killed job, submitted and registered the way
  harp-submit does it, are each stored with the right outcome (and censoring)
  by a scheduled Ingestor within two poll intervals of the job's end.
* An ingest killed with SIGKILL in the middle of its write (a subprocess made
  slow with many extra records) leaves nothing half-written; run again, it
  ends with every outcome recorded exactly once, the cursor moved and the
  submissions closed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harpd.config import HarpSettings
from harpd.ingest.poller import CURSOR_KEY, Ingestor
from harpd.protocol import Resources
from harpd.records import Outcome
from harpd.slurm.cli_backend import CliBackend
from harpd.store import Store
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
POLL_S = 6.0
EXTRA = 60_000  # copies of real records that make the write last long enough to be killed in


def _end_epoch(cluster, job_id: str) -> float:
    env = dict(cluster.env, SLURM_TIME_FORMAT="%s")
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "End"], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return float(out[0])


def test_outcomes_ingested_within_two_poll_intervals(slurm_cluster, tmp_path):
    from harpd.daemon.scheduler import Scheduler

    c = slurm_cluster
    settings = HarpSettings(ingest={"poll_interval_s": POLL_S, "max_backoff_s": 30})
    store = Store.open(tmp_path / "harp.db")
    ids = {
        "completed": c.sbatch("--time=2", "--mem=100M", "--job-name=ing-ok", script="sleep 2\n"),
        "timeout": c.sbatch("-p", "tiny", "--time=1", "--mem=100M", "--job-name=ing-timeout", script="sleep 600\n"),
        "oom": c.sbatch(
            "--time=2",
            "--mem=100M",
            "--job-name=ing-oom",
            script="python3 -c \"s = b'x' * (300 << 20); import time; time.sleep(15)\"\n",
        ),
    }
    for kind, jid in ids.items():
        store.add_submission(
            jid, 0, "root", {"job_name": f"ing-{kind}", "signature": f"sig-{kind}"}, Resources(), Resources(), None
        )
    ingestor = Ingestor(store, CliBackend(settings), settings)
    heard: dict[str, tuple[float, object]] = {}
    lock = threading.Lock()

    def listen(rec):
        with lock:
            heard.setdefault(rec.job_id, (time.time(), rec))

    ingestor.on_outcome.append(listen)
    sched = Scheduler()
    ingestor.schedule(sched)
    sched.start()
    try:
        for jid in ids.values():
            c.wait_job(jid, timeout=240)
        # two polls after the last job ended are enough on an idle host; generous for a busy one
        wait_for(
            "every job's outcome heard",
            lambda: len(heard) >= len(ids),
            120,
            interval=0.2,
            log=lambda: f"not ingested: {set(ids.values()) - set(heard)}; last error {ingestor.last_error}",
        )
    finally:
        sched.shutdown()  # waits for a poll under way
    assert set(heard) == set(ids.values()), (
        f"not ingested: {set(ids.values()) - set(heard)}; last error {ingestor.last_error}"
    )

    expected = {
        "completed": (Outcome.COMPLETED, False, False),
        "timeout": (Outcome.TIMEOUT, True, False),
        "oom": (Outcome.OOM, False, True),
    }
    for kind, jid in ids.items():
        seen_at, announced = heard[jid]
        rec = store.get_job(jid)
        assert rec is not None and rec.attempt == 1
        assert (rec.outcome, rec.censored_time, rec.censored_mem) == expected[kind], (kind, rec)
        assert announced.outcome is rec.outcome
        assert rec.signature == f"sig-{kind}" and rec.source == "harptest"
        sub = store.get_submission(jid)
        assert sub.state == "done" and sub.outcome == expected[kind][0].value
        # latency from the end Slurm recorded (whole seconds) to harp knowing it
        latency = seen_at - _end_epoch(c, jid)
        assert latency <= 2 * POLL_S + 1.5, f"{kind} job {jid} ingested {latency:.1f} s after its end"
    timeout = store.get_job(ids["timeout"])
    assert timeout.used_time_s >= 60 and timeout.req_time_s == 60
    oom = store.get_job(ids["oom"])
    assert oom.req_mem_mb == 100 and oom.used_mem_mb >= 95
    assert store.count_jobs() == 3
    store.close()


CHILD = textwrap.dedent(
    """\
    import json, sys, time
    from harpd.config import HarpSettings
    from harpd.ingest.poller import Ingestor, _settled
    from harpd.records import JobRecord
    from harpd.slurm.cli_backend import CliBackend
    from harpd.store import Store

    db, extra, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    settings = HarpSettings(ingest={"learn_all_jobs": True, "lookback_s": 7 * 86400, "poll_interval_s": 5})

    class Amplified(CliBackend):
        # the real cluster's records plus many copies, so the write takes seconds
        def sacct_jobs(self, job_ids, since, until, all_users):
            recs = super().sacct_jobs(job_ids, since, until, all_users)
            if job_ids is None:
                done = [r for r in recs if r.outcome.finished]
                for i in range(extra):
                    d = done[i % len(done)].to_dict()
                    d["job_id"] = f"{d['job_id']}-copy{i}"
                    recs.append(JobRecord.from_dict(d))
                keep = {(r.source, r.job_id, r.attempt) for r in recs if r.outcome.finished and _settled(r, NOW)}
                with open(out_dir + "/returned.json", "w") as fh:
                    json.dump(sorted(keep), fh)
            return recs

    NOW = time.time()  # one clock for the ingestor and the expected keys
    store = Store.open(db)
    ing = Ingestor(store, Amplified(settings), settings, clock=lambda: NOW)
    log = open(out_dir + "/announced.log", "a")
    ing.on_outcome.append(lambda r: (log.write(f"{r.source}|{r.job_id}|{r.attempt}\\n"), log.flush()))
    print(ing.poll_once(), flush=True)
    """
)


def _child(db: Path, extra: int, out: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(extra), str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_mid_ingest_loses_and_duplicates_nothing(slurm_cluster, tmp_path):
    c = slurm_cluster
    db = tmp_path / "harp.db"
    # long enough for an accounting sample: their records are complete at once
    ok = c.sbatch("--time=2", "--job-name=ing-kill-ok", script="sleep 3\n")
    bad = c.sbatch("--time=2", "--job-name=ing-kill-fail", script="sleep 3; exit 3\n")
    assert c.wait_job(ok) == "COMPLETED" and c.wait_job(bad) == "FAILED"
    with Store.open(db) as s:
        for jid in (ok, bad):
            s.add_submission(jid, 0, "root", {"signature": "kill-test"}, Resources(), Resources(), None)

    # run 1: killed while its transaction is being written
    child = _child(db, EXTRA, tmp_path)
    wal = Path(str(db) + "-wal")
    start_size = wal.stat().st_size if wal.exists() else 0
    deadline = time.time() + 180
    killed_mid_write = False
    while time.time() < deadline and child.poll() is None:
        if (tmp_path / "returned.json").exists() and wal.exists() and wal.stat().st_size > start_size + (4 << 20):
            os.kill(child.pid, signal.SIGKILL)  # pages of the open transaction are spilling into the WAL
            killed_mid_write = True
            break
        time.sleep(0.02)
    child.wait(timeout=60)
    assert killed_mid_write, f"ingest finished before it could be killed: {child.stdout.read()} {child.stderr.read()}"
    assert child.returncode == -signal.SIGKILL
    with Store.open(db) as s:
        assert s.count_jobs(finished_only=False) == 0  # the open transaction is gone, nothing half-written
        assert s.get_meta(CURSOR_KEY) is None  # the cursor did not move past uncommitted records
        assert s.get_submission(ok).state == "pending"
    log = tmp_path / "announced.log"
    assert not log.exists() or log.read_text() == ""  # nothing announced before its commit

    # run 2: restarted, runs to the end
    child = _child(db, EXTRA, tmp_path)
    out, err = child.communicate(timeout=600)
    assert child.returncode == 0, err
    returned = {tuple(k) for k in json.loads((tmp_path / "returned.json").read_text())}
    assert int(out.strip()) == len(returned)
    with Store.open(db) as s:
        keys = [(r.source, r.job_id, r.attempt) for r in s.iter_jobs(finished_only=False, order=None)]
        assert len(keys) == len(set(keys)) == len(returned)  # exactly once each
        assert set(keys) == returned
        assert s.get_meta(CURSOR_KEY) is not None
        assert s.get_job(ok).outcome is Outcome.COMPLETED and s.get_job(bad).outcome is Outcome.FAILED
        assert s.get_job(bad).signature == "kill-test"
        assert s.get_submission(ok).outcome == "completed" and s.get_submission(bad).outcome == "failed"
    announced = (tmp_path / "announced.log").read_text().splitlines()
    assert {tuple(a.split("|")[:2]) for a in announced} == {k[:2] for k in returned}

    # run 3: nothing new, nothing duplicated
    child = _child(db, EXTRA, tmp_path)
    out, err = child.communicate(timeout=600)
    assert child.returncode == 0, err
    with Store.open(db) as s:
        assert s.count_jobs(finished_only=False) >= len(returned)
        keys = [(r.source, r.job_id, r.attempt) for r in s.iter_jobs(finished_only=False, order=None)]
        assert len(keys) == len(set(keys))
        assert returned <= set(keys)


def test_job_requeued_in_place_keeps_both_runs(slurm_cluster, tmp_path):
    """Recovery's requeue path: same job id, a second run; sacct rewrites run 1 as REQUEUED (22.05)
    or keeps it TIMEOUT (25.11, 26.05): either way run 1 is learnt once, as the timeout it was."""
    c = slurm_cluster
    settings = HarpSettings(ingest={"poll_interval_s": 5})
    backend = CliBackend(settings)
    store = Store.open(tmp_path / "harp.db")
    # the first run outlives its 1-minute limit; the rerun ($SLURM_RESTART_COUNT=1) ends at once
    jid = c.sbatch(
        "-p",
        "tiny",
        "--time=1",
        "--mem=100M",
        "--job-name=ing-requeue",
        script='[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0\nsleep 600\n',
    )
    store.add_submission(jid, 0, "root", {"signature": "rq"}, Resources(), Resources(), None)
    ing = Ingestor(store, backend, settings)
    assert c.wait_job(jid, timeout=240) == "TIMEOUT"

    def polled(n: int):
        return lambda: (ing.poll_once(), store.count_jobs() >= n)[1]

    wait_for("the first run in the store", polled(1), 120, interval=1)
    assert store.get_job(jid).outcome is Outcome.TIMEOUT
    backend.requeue_hold(jid)
    backend.update_job(jid, time_limit_s=3 * 60)
    backend.release(jid)
    backend.update_job(jid, start_now=True)
    ing.watch(jid)
    wait_for("the second run in the store", polled(2), 240, interval=2)
    runs = {r.attempt: r for r in store.iter_jobs(finished_only=False, order=None)}
    assert set(runs) == {1, 2}, runs
    assert runs[1].outcome is Outcome.TIMEOUT and runs[1].censored_time and runs[1].req_time_s == 60
    assert runs[2].outcome is Outcome.COMPLETED and runs[2].req_time_s == 180
    assert runs[2].signature == "rq" and runs[2].harp_sized
    rows = c.sacct(jid, "JobID,State", steps=False, duplicates=True)
    # what sacct says now: 22.05 rewrites run 1 as REQUEUED, 25.11 and 26.05 keep it TIMEOUT
    assert [r["State"].split()[0] for r in rows] == [c.requeued_state("TIMEOUT"), "COMPLETED"]
    ing.poll_once()  # neither wording of run 1 changes the store or the job's latest run
    assert store.get_job(jid).attempt == 2
    assert {r.attempt: r.outcome for r in store.iter_jobs(finished_only=False, order=None)} == {
        1: Outcome.TIMEOUT,
        2: Outcome.COMPLETED,
    }
    store.close()
