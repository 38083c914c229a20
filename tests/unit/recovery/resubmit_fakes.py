"""A fake Slurm for the recovery tests, kept in a JSON file.

The file makes it survive a SIGKILLed harpd: the crash tests
(test_resubmit_crash.py) run recovery in a child process, kill it between two
steps, and start another one on the same "cluster", exactly as a restarted
harpd finds the real one.  That is why it is not the in-memory
tests/helpers/fake_slurm.FakeSlurm: its state is shared by the test and two
processes, so every call reads and writes the file, and a job's runs, script,
environment and sbatch arguments (what a resubmission replays) are part of
that state.  tests/unit/test_fake_slurm.py checks it against the
``SlurmBackend`` Protocol like the in-memory fake.  It behaves like
Slurm 22.05 where recovery depends on it: ``requeuehold`` only on finished
jobs (``Restarts`` + 1, held, ``Reason=job_requeued_in_held_state``), limits in
``scontrol show job`` spelling, jobs purged after MinJobAge (``purge``), and
``sacct`` rows for every run (earlier runs of a requeued job as REQUEUED;
``release="26.05"``: as they ended, as 25.11 and 26.05 keep them).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from harpd.protocol import Decision, Resources
from harpd.records import JobRecord, Outcome
from harpd.slurm.base import (
    Accounting,
    JobInfo,
    JobUnknown,
    NotRecordedYet,
    PartitionInfo,
    QueuedJob,
    SlurmError,
    SlurmUnavailable,
)
from harpd.slurm.scontrol import job_info, update_fields
from harpd.store import Store

#: ``fail_next``'s kinds: the CLI backend's classes of a failure
KINDS: dict[str, type[SlurmError]] = {
    "refused": SlurmError,
    "unknown": JobUnknown,
    "unavailable": SlurmUnavailable,
    "not_recorded": NotRecordedYet,
}

FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL", "PREEMPTED"}
_STATE_OF = {
    Outcome.COMPLETED: "COMPLETED",
    Outcome.TIMEOUT: "TIMEOUT",
    Outcome.OOM: "OUT_OF_MEMORY",
    Outcome.FAILED: "FAILED",
    Outcome.CANCELLED: "CANCELLED",
    Outcome.NODE_FAIL: "NODE_FAIL",
    Outcome.PREEMPTED: "PREEMPTED",
}


def _hms(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}"


class FakeSlurm:
    """SlurmBackend (plus recovery's extras) over a JSON file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        slurm_user: str = "root",
        admin: dict[str, str] | None = None,
        release: str = "22.05",
    ):
        self.path = Path(path)
        if not self.path.exists():
            self._save(
                {
                    "next_id": 1000,
                    "jobs": {},
                    "calls": [],
                    "fail": {},
                    "slurm_user": slurm_user,
                    "admin": admin or {},
                    "users": {},
                    "release": release,
                }
            )

    # ---------------------------------------------------------------- file

    def _load(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())

    def _save(self, st: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(st))
        os.replace(tmp, self.path)

    def _call(self, st: dict[str, Any], name: str, *args: Any) -> None:
        st["calls"].append([name, *args])
        fail = st["fail"].get(name)
        if fail and not fail.get("after"):
            st["fail"][name] = None if fail.get("once") else fail
            self._save(st)
            raise KINDS[fail.get("kind", "refused")](fail["message"])

    def _fail_after(self, st: dict[str, Any], name: str) -> None:
        """A failure reported after the command took effect (sbatch timed out after slurmctld accepted)."""
        fail = st["fail"].get(name)
        if fail and fail.get("after"):
            st["fail"][name] = None if fail.get("once") else fail
            self._save(st)
            raise KINDS[fail.get("kind", "refused")](fail["message"])

    def _job(self, st: dict[str, Any], job_id: str) -> dict[str, Any]:
        j = st["jobs"].get(str(job_id))
        if j is None or j.get("purged"):
            raise JobUnknown(
                f"scontrol show job {job_id} failed (exit 1): slurm_load_jobs error: Invalid job id specified"
            )
        return j

    # ----------------------------------------------------- test controls

    @property
    def state(self) -> dict[str, Any]:
        return self._load()

    def calls(self, name: str | None = None) -> list[list[Any]]:
        return [c for c in self._load()["calls"] if name is None or c[0] == name]

    def fail_next(self, name: str, message: str, once: bool = True, after: bool = False, kind: str = "refused") -> None:
        """The next ``name`` call raises ``KINDS[kind]``(message); ``after``: once it took effect.

        ``kind``: ``refused`` (a plain SlurmError), ``unknown``, ``unavailable``
        (no answer in time), ``not_recorded`` (accounting has no record yet).
        """
        st = self._load()
        st["fail"][name] = {"message": message, "once": once, "after": after, "kind": kind}
        self._save(st)

    def heal(self, name: str) -> None:
        """``name`` answers again (a standing ``fail_next(..., once=False)`` ends)."""
        st = self._load()
        st["fail"][name] = None
        self._save(st)

    def add_job(
        self,
        *,
        user: str = "alice",
        uid: int = 1000,
        time_s: int = 60,
        mem_mb: int | None = 100,
        mem_per_cpu_mb: int | None = None,
        partition: str = "short",
        name: str = "job.sh",
        script: str = "#!/bin/bash\nsleep 90\n",
        workdir: str = "/tmp",
        comment: str | None = None,
        account: str = "harp",
        env: dict[str, str] | None = None,
    ) -> str:
        """A job submitted by the user (not through recovery)."""
        st = self._load()
        jid = str(st["next_id"])
        st["next_id"] += 1
        st["users"][str(uid)] = user
        st["jobs"][jid] = {
            "id": jid,
            "user": user,
            "uid": uid,
            "state": "PENDING",
            "held": False,
            "restarts": 0,
            "time_s": time_s,
            "mem_mb": mem_mb,
            "mem_per_cpu_mb": mem_per_cpu_mb,
            "partition": partition,
            "name": name,
            "script": script,
            "workdir": workdir,
            "comment": comment,
            "account": account,
            "argv": None,
            "runs": [],
            "purged": False,
            "submitted_at": time.time(),
            "env": dict(env)
            if env is not None
            else {"PATH": "/opt/sw/bin:/usr/bin", "DUR": "100", "HOME": "/home/" + user},
        }
        self._save(st)
        return jid

    def end_run(
        self,
        job_id: str,
        outcome: Outcome,
        used_mem_mb: float = 50.0,
        ago_s: float = 30.0,
        *,
        gpus: int | None = None,
        gpumem_mb: float | None = None,
    ) -> None:
        """The job's current run ends with ``outcome``, ``ago_s`` seconds ago (as sacct reports it, later).

        ``gpus``, ``gpumem_mb``: its allocated GPUs and gres/gpumem peak per GPU (a site that gathers them).
        """
        st = self._load()
        j = st["jobs"][str(job_id)]
        assert j["state"] not in FINISHED and not j["held"], f"job {job_id} is {j['state']} (held={j['held']})"
        now = time.time() - ago_s
        start = now - 10 - 100 * len(j["runs"])
        limit = j["time_s"]
        j["runs"].append(
            {
                "state": _STATE_OF[outcome],
                "outcome": outcome.value,
                "start": start,
                "end": now,
                "limit": limit,
                "mem": (j["mem_mb"] or (j["mem_per_cpu_mb"] or 0)),
                "used_time": limit if outcome == Outcome.TIMEOUT else 5.0,
                "used_mem": used_mem_mb,
                "gpus": gpus,
                "gpumem": gpumem_mb,
            }
        )
        j["state"] = _STATE_OF[outcome]
        self._save(st)

    def own_requeue(self, job_id: str, used_mem_mb: float = 50.0, ago_s: float = 30.0) -> None:
        """The job requeues itself (``scontrol requeue $SLURM_JOB_ID``, submitit's checkpoint): its run ends
        REQUEUED, neither out of time nor memory, and the job is pending again under its id."""
        self.end_run(job_id, Outcome.PREEMPTED, used_mem_mb=used_mem_mb, ago_s=ago_s)
        st = self._load()
        j = st["jobs"][str(job_id)]
        j["runs"][-1]["state"] = "REQUEUED"
        j["restarts"] += 1
        j["state"] = "PENDING"
        self._save(st)

    def start_run(self, job_id: str, completing_shows: int = 2) -> None:
        """The job runs now.  Held while it runs (``requeue_hold``), it shows COMPLETING
        ``completing_shows`` times before it is PENDING and held, as slurmctld does while
        slurmd kills its processes."""
        st = self._load()
        j = st["jobs"][str(job_id)]
        j.update(state="RUNNING", held=False, started_at=time.time(), completing_shows=completing_shows)
        self._save(st)

    def purge(self, job_id: str) -> None:
        """slurmctld forgets the job (MinJobAge); accounting keeps it."""
        st = self._load()
        st["jobs"][str(job_id)]["purged"] = True
        self._save(st)

    # ---------------------------------------------------------- backend

    def submit(self, argv, script, cwd, env, as_uid=None) -> str:
        st = self._load()
        self._call(st, "submit", list(argv), None if script is None else script.decode(), str(cwd), as_uid)
        opts: dict[str, str] = {}
        positional: list[str] = []
        for a in argv:
            if a.startswith("--") and not positional:
                k, _, v = a[2:].partition("=")
                opts[k] = v
            else:
                positional.append(a)
        jid = str(st["next_id"])
        st["next_id"] += 1
        mem = opts.get("mem")
        mpc = opts.get("mem-per-cpu")
        owner = as_uid if as_uid is not None else os.geteuid()
        st["jobs"][jid] = {
            "id": jid,
            "user": st["users"].get(str(owner), str(owner)),
            "uid": owner,
            "state": "PENDING",
            "held": False,
            "restarts": 0,
            "time_s": int(opts["time"]) * 60 if "time" in opts else 60,
            "mem_mb": int(mem.rstrip("M")) if mem else None,
            "mem_per_cpu_mb": int(mpc.rstrip("M")) if mpc else None,
            "partition": opts.get("partition", "short"),
            "name": opts.get("job-name", "sbatch"),
            "script": None if script is None else script.decode(),
            "workdir": opts.get("chdir", str(cwd)),
            "comment": opts.get("comment"),
            "account": opts.get("account"),
            "argv": list(argv),
            "runs": [],
            "purged": False,
            "submitted_at": time.time(),
            "env": dict(env or {}),
        }
        self._save(st)
        self._fail_after(st, "submit")
        return jid

    def sacct_jobs(self, job_ids, since, until, all_users) -> list[JobRecord]:
        st = self._load()
        self._call(st, "sacct", None if job_ids is None else list(job_ids))
        self._save(st)
        out = []
        for jid, j in st["jobs"].items():
            if job_ids is not None and jid not in job_ids:
                continue
            n = len(j["runs"])
            for i, r in enumerate(j["runs"]):
                outcome = Outcome(r["outcome"])
                # 22.05's slurmdbd shows a run that was requeued afterwards as REQUEUED;
                # 25.11 and 26.05 keep the state it ended in
                rewritten = j["restarts"] >= i + 1 and st.get("release", "22.05") == "22.05"
                state = "REQUEUED" if rewritten else r["state"]
                out.append(
                    JobRecord(
                        job_id=jid,
                        source="fake",
                        user=j["user"],
                        partition=j["partition"],
                        job_name=j["name"],
                        submit_time=j["submitted_at"],
                        start_time=r["start"],
                        end_time=r["end"],
                        outcome=outcome,
                        state=state,
                        req_time_s=float(r["limit"]),
                        req_mem_mb=float(r["mem"]) if r["mem"] else None,
                        req_cpus=1,
                        req_nodes=1,
                        alloc_cpus=1,
                        alloc_nodes=1,
                        used_time_s=r["used_time"],
                        used_mem_mb=r["used_mem"],
                        censored_time=outcome == Outcome.TIMEOUT,
                        censored_mem=outcome == Outcome.OOM,
                        attempt=i + 1,
                        account=j.get("account"),
                        alloc_gpus=r.get("gpus"),
                        used_gpumem_mb=r.get("gpumem"),
                    )
                )
            if j["state"] not in FINISHED:
                out.append(
                    JobRecord(
                        job_id=jid,
                        source="fake",
                        user=j["user"],
                        partition=j["partition"],
                        outcome=Outcome.RUNNING,
                        state=j["state"],
                        attempt=n + 1,
                        req_time_s=float(j["time_s"]),
                    )
                )
        return out

    def show_job(self, job_id: str) -> JobInfo:
        st = self._load()
        self._call(st, "show_job", str(job_id))
        self._save(st)
        j = self._job(st, job_id)
        reason = "job_requeued_in_held_state" if j["held"] else "None"
        state = j["state"]
        if state == "COMPLETING":
            j["completing_shows"] -= 1
            if j["completing_shows"] <= 0:
                j["state"] = "PENDING"
            self._save(st)
        if state == "RUNNING":  # scontrol's EndTime of a running job: its start plus its limit, in the future
            end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(j["started_at"] + j["time_s"]))
        elif j["runs"] and state in FINISHED:
            end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(j["runs"][-1]["end"]))
        else:
            end = "Unknown"
        info = {
            "JobId": j["id"],
            "JobName": j["name"],
            "UserId": f"{j['user']}({j['uid']})",
            "JobState": state,
            "Reason": reason,
            "Restarts": str(j["restarts"]),
            "Requeue": j.get("requeue", "1"),  # the site's JobRequeue=1 unless the job said --no-requeue
            "TimeLimit": _hms(j["time_s"]),
            "Partition": j["partition"],
            "WorkDir": j["workdir"],
            "Comment": j["comment"] or "(null)",
            "Account": j.get("account") or "(null)",
            "SubmitTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(j.get("submitted_at") or time.time())),
            "EndTime": end,
        }
        if j["mem_per_cpu_mb"]:
            info["MinMemoryCPU"] = f"{j['mem_per_cpu_mb']}M"
        elif j["mem_mb"]:
            info["MinMemoryNode"] = f"{j['mem_mb']}M"
        return job_info(info)

    def partitions(self) -> dict[str, PartitionInfo]:
        st = self._load()
        self._call(st, "partitions")
        self._save(st)
        return {
            "short": PartitionInfo("short", 3600, 8000, 8, 1, default=True),
            "tiny": PartitionInfo("tiny", 180, 8000, 8, 1),
            "long": PartitionInfo("long", 86400, 8000, 8, 1),
        }

    def requeue_hold(self, job_id: str) -> None:
        st = self._load()
        self._call(st, "requeue_hold", str(job_id))
        j = self._job(st, job_id)
        if j["state"] not in FINISHED and j["state"] != "RUNNING":
            self._save(st)
            raise SlurmError(
                f"scontrol requeuehold {job_id} failed (exit 1): Job is pending execution for job {job_id}"
            )
        j["restarts"] += 1
        j["state"] = "COMPLETING" if j["state"] == "RUNNING" else "PENDING"  # a running job's processes die first
        j["held"] = True
        self._save(st)

    def update_job(self, job_id: str, **changes: Any) -> None:
        fields = update_fields(changes)  # recorded as scontrol would get them
        st = self._load()
        self._call(st, "update_job", str(job_id), fields)
        j = self._job(st, job_id)
        if "TimeLimit" in fields:
            j["time_s"] = int(fields["TimeLimit"]) * 60
        if "MinMemoryNode" in fields:
            j["mem_mb"], j["mem_per_cpu_mb"] = int(fields["MinMemoryNode"]), None
        if "MinMemoryCPU" in fields:
            j["mem_per_cpu_mb"], j["mem_mb"] = int(fields["MinMemoryCPU"]), None
        if "Comment" in fields:
            j["comment"] = str(fields["Comment"])
        self._save(st)

    def release(self, job_id: str) -> None:
        st = self._load()
        self._call(st, "release", str(job_id))
        j = self._job(st, job_id)
        j["held"] = False
        self._save(st)

    def cancel(self, job_id: str) -> None:
        st = self._load()
        self._call(st, "cancel", str(job_id))
        j = self._job(st, job_id)
        j["state"] = "CANCELLED"
        self._save(st)

    def signal(self, job_id: str, signal: str) -> None:
        st = self._load()
        self._call(st, "signal", str(job_id), signal)
        j = self._job(st, job_id)
        self._save(st)
        if j["state"] != "RUNNING":
            raise SlurmError(f"scancel --signal={signal} --batch {job_id} failed (exit 1): Job is not running")

    def queue(self) -> list[QueuedJob]:
        return [q for q in self._listing("queue") if q.state in ("RUNNING", "PENDING")]

    def held_jobs(self) -> list[QueuedJob]:
        return self._listing("held_jobs")

    def _listing(self, name: str) -> list[QueuedJob]:
        """Every job slurmctld still holds (purged ones are gone), as squeue lists them."""
        st = self._load()
        self._call(st, name)
        self._save(st)
        return [
            QueuedJob(
                job_id=jid,
                state=j["state"],
                user=j["user"],
                uid=j["uid"],
                time_limit_s=j["time_s"],
                time_used_s=0,
                partition=j["partition"],
                comment=j["comment"],
                mem_mb=j["mem_mb"],
                mem_per_cpu_mb=j["mem_per_cpu_mb"],
            )
            for jid, j in st["jobs"].items()
            if not j.get("purged")
        ]

    def batch_script(self, job_id: str) -> bytes:
        st = self._load()
        self._call(st, "batch_script", str(job_id))
        self._save(st)
        j = st["jobs"].get(str(job_id))
        if j is None or not j.get("script"):
            raise SlurmError(f"Slurm has no batch script for job {job_id}")
        return j["script"].encode()

    def job_env(self, job_id: str) -> dict[str, str]:
        st = self._load()
        self._call(st, "job_env", str(job_id))
        self._save(st)
        j = st["jobs"].get(str(job_id))
        if j is None or not j.get("env") or not st.get("keeps_env", True):
            raise SlurmError(f"Slurm keeps no environment for job {job_id} (AccountingStoreFlags needs job_env)")
        return dict(j["env"])

    def accounting(self) -> Accounting:
        st = self._load()
        return Accounting(script=True, env=st.get("keeps_env", True))

    def set_keeps_env(self, on: bool) -> None:
        """The site's AccountingStoreFlags with (True) or without job_env."""
        st = self._load()
        st["keeps_env"] = on
        self._save(st)

    def jobs_with_comment(self, comment: str, user: str | None, since: float | None) -> list[str]:
        st = self._load()
        self._call(st, "jobs_with_comment", comment, user)
        self._save(st)
        return [
            jid
            for jid, j in st["jobs"].items()
            if (j.get("comment") or "") == comment and (user is None or j["user"] == user)
        ]

    def slurm_user(self) -> str | None:
        return self._load()["slurm_user"]

    def admin_level(self, user: str) -> str | None:
        return self._load()["admin"].get(user)


def submission(
    fake: FakeSlurm,
    store: Any,
    job_id: str,
    *,
    harp_lines=("#HARP retry",),
    changes=None,
    original: dict | None = None,
    argv: list[str] | None = None,
    uid: int | None = None,
    user: str | None = None,
    sbatch_env: dict | None = None,
) -> None:
    """Register ``job_id`` as harp-submit does."""
    j = fake.state["jobs"][job_id]
    res = {
        "time_s": j["time_s"],
        "mem_mb": j["mem_mb"],
        "mem_per_cpu_mb": j["mem_per_cpu_mb"],
        "partition": j["partition"],
    }
    job = {
        "partition": j["partition"],
        "job_name": j["name"],
        "signature": "sig-" + j["name"],
        "cwd": j["workdir"],
        "harp_lines": list(harp_lines),
        "commands": ["sleep 90"],
        "argv": argv if argv is not None else [f"--time={j['time_s'] // 60}", "--mem=100M", "job.sh", "a b", "c"],
        "sbatch_env": sbatch_env or {},
    }
    decision = {"changes": list(changes or []), "limits": {}, "model": None, "explain": {}}
    store.add_submission(
        job_id,
        j["uid"] if uid is None else uid,
        user or j["user"],
        job,
        Resources.model_validate(original or res),
        Resources.model_validate(res),
        (None if decision is None else Decision.model_validate(decision)),
    )


def registered_again(store: Store, job_id: str, job: dict) -> None:
    """``job_id``'s registration written again with ``job`` (its resources and decision as they were):
    what an older harp-submit, or a workflow manager's own job script, would have registered."""
    sub = store.get_submission(job_id)
    assert sub is not None
    decision = sub.stored["decision"]
    store.add_submission(
        job_id,
        sub.uid,
        sub.user,
        job,
        sub.original,
        sub.submitted,
        None if decision is None else Decision.model_validate(decision),
    )


# Fixtures shared by the recovery and hostile tests: import them by name
# (``from resubmit_fakes import fake, store``) so both build the same store and fake Slurm.


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "harp.db")
    yield s
    s.close()


@pytest.fixture
def fake(tmp_path):
    return FakeSlurm(tmp_path / "slurm.json")


@pytest.fixture(params=["22.05", "26.05"])
def fake_of_each_release(tmp_path, request):
    """The fake as each release words a requeued run in sacct (REQUEUED, or its own state)."""
    return FakeSlurm(tmp_path / "slurm.json", release=request.param)
