"""SlurmBackend over the stable commands: sbatch, sacct, scontrol, scancel.

The command-line tools are the one Slurm interface that stays compatible
across releases and needs no build against the site's libslurm, so this is
the default backend.  Every call is an argv list (never a shell: job names,
paths and environments come from users), bounded by
``slurm.command_timeout_s``, and every failure becomes one ``SlurmError`` line
that names the command and quotes the first line of its stderr.
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from harp_submit.units import parse_duration_s as duration_s
from harpd.config import HarpSettings, SlurmSettings
from harpd.records import JobRecord
from harpd.slurm.base import (
    Accounting,
    JobChanges,
    JobInfo,
    JobUnknown,
    NotRecordedYet,
    PartitionInfo,
    QueuedJob,
    SlurmError,
    SlurmUnavailable,
)
from harpd.slurm.classify import to_records
from harpd.slurm.cli_errors import failure, unavailable
from harpd.slurm.sacct_json import parse_json
from harpd.slurm.sacct_records import SacctJob, SacctParseError
from harpd.slurm.sacct_text import LIVE_PARSABLE2_COLUMNS, owners_of_parsable, parse_parsable2
from harpd.slurm.scontrol import AmbiguousRecord, job_info, job_record, parse_kv_line, queued_job, update_fields
from harpd.slurm.squeue_json import SqueueParseError, asked_by, find, parse_squeue_json
from harpd.slurm.squeue_json import job_info as json_job_info
from harpd.slurm.squeue_json import queued_jobs as json_queued_jobs

log = logging.getLogger("harpd.slurm")

__all__ = ["CliBackend"]

_JOB_ID_RE = re.compile(r"^\d+(?:_\d+)?$")
_IDS_PER_CALL = 500
#: a Slurm without JSON: records read again alone per listing, at most (each is two commands)
_REREAD_MAX = 32
#: what a squeue without JSON says (an old release, or no serializer/data_parser plugin)
#: 22.05's squeue answers --json with every job whatever --jobs says: one such listing serves the
#: single-job reads (a registration each) that come within this many seconds of it
_LISTING_MAX_AGE_S = 1.0
#: the commands (and scontrol verbs) that change jobs: each makes that shared listing stale
_ACTIONS = ("sbatch", "scancel")
_SCONTROL_ACTIONS = ("requeuehold", "update", "release", "hold", "requeue")
_NO_JSON_RE = re.compile(r"unrecognized option|invalid option|unknown option|serializer|data_parser|plugin")


def _first_line(text: str) -> str:
    for ln in text.splitlines():
        ln = ln.strip()
        if ln:
            return ln[:300]
    return ""


def _after_banner(out: str, banner: str, jid: str, what: str) -> str:
    """sacct's ``--batch-script``/``--env-vars`` text: a banner line, a line of dashes, then the text.

    Nothing at all: accounting has no record of the job, which under load
    is often "not yet" (slurmdbd lags slurmctld), so NotRecordedYet, not an
    answer that the job is gone.
    """
    lines = out.split("\n")
    if not out.strip():
        raise NotRecordedYet(f"no {what} of job {jid}: accounting has no record of the job (yet)")
    if len(lines) < 3 or not lines[0].startswith(banner) or set(lines[1]) != {"-"}:
        raise SlurmError(f"no {what} of job {jid} in slurmctld or accounting: {_first_line(out) or 'empty'}")
    return "\n".join(lines[2:])


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:%%)?=")


def parse_env_lines(text: str) -> dict[str, str]:
    """``NAME=value`` lines (sacct ``--env-vars``) -> dict; ``NONE`` -> {}.

    A line that does not start a name continues the previous value (exported
    shell functions, ``BASH_FUNC_module%%=() {``, span lines); the trailing
    line break sacct prints is not part of the last value.
    """
    if text.strip() == "NONE":
        return {}
    env: dict[str, str] = {}
    last: str | None = None
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    for ln in lines:
        if _ENV_NAME_RE.match(ln):
            name, _, value = ln.partition("=")
            env[name] = value
            last = name
        elif last is not None:
            env[last] += "\n" + ln
    return env


def _limit_number(v: str | None) -> int | None:
    """scontrol's numeric limits: ``UNLIMITED``/``0``/missing -> None."""
    if not v:
        return None
    v = v.strip()
    if not v[:1].isdigit():
        return None
    try:
        n = int(float(v.rstrip("M")))
    except ValueError:
        return None
    return n if n > 0 else None


def _gpus_in_gres(gres: str | None) -> int:
    """``gpu:a100:4(S:0-1),nic:1`` -> 4."""
    if not gres or gres == "(null)":
        return 0
    total = 0
    for item in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        n = parts[-1] if len(parts) > 1 else "1"
        try:
            total += int(n)
        except ValueError:
            total += 1
    return total


class CliBackend:
    """``SlurmBackend`` implemented with the Slurm commands."""

    def __init__(self, settings: HarpSettings | SlurmSettings | None = None) -> None:
        if settings is None:
            settings = SlurmSettings()
        s = settings.slurm if isinstance(settings, HarpSettings) else settings
        self.settings = s
        self.timeout_s = float(s.command_timeout_s)
        self.bin_dir = Path(s.bin_dir) if s.bin_dir else None
        self._paths: dict[str, str] = {}
        self._json_ok: bool | None = None  # None: not tried; False: fall back to -P
        self._squeue_json_ok: bool | None = None  # None: not tried; False: this squeue has no --json
        self._left_out: dict[str, str] = {}  # job id -> why its text record was left out (logged once)
        self._filters_ignored: bool | None = None  # squeue --json ignores --jobs (22.05)
        self._listing: tuple[float, list[dict[str, Any]]] | None = None  # (when, jobs): 22.05's shared listing
        self._listing_lock = threading.Lock()

    # ------------------------------------------------------------ plumbing

    def _which(self, name: str) -> str:
        path = self._paths.get(name)
        if path:
            return path
        if self.bin_dir is not None:
            p = self.bin_dir / name
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise SlurmError(f"{name} not found in slurm.bin_dir {self.bin_dir}; fix slurm.bin_dir")
            path = str(p)
        else:
            found = shutil.which(name)
            if not found:
                raise SlurmError(f"{name} not found on PATH; install the Slurm client or set slurm.bin_dir")
            path = found
        self._paths[name] = path
        return path

    def _run(
        self,
        name: str,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        as_uid: int | None = None,
    ) -> str:
        argv = [self._which(name), *args]
        if name in _ACTIONS or (name == "scontrol" and args and args[0] in _SCONTROL_ACTIONS):
            self._listing = None  # what harpd reads of a job after changing it is Slurm's answer since
        kw: dict[str, Any] = {}
        if as_uid is not None and as_uid != os.geteuid():
            if os.geteuid() != 0:
                raise SlurmError(f"cannot run {name} as uid {as_uid}: harpd is not running as root")
            try:
                pw = pwd.getpwuid(as_uid)
            except KeyError:
                raise SlurmError(f"cannot run {name} as uid {as_uid}: no such user") from None
            kw.update(user=as_uid, group=pw.pw_gid, extra_groups=os.getgrouplist(pw.pw_name, pw.pw_gid))
        if cwd is not None and not os.path.isdir(cwd):
            raise SlurmError(f"{name}: working directory {cwd} does not exist")
        what = " ".join([name, *args[:2]])
        try:
            proc = subprocess.run(
                argv,
                input=stdin,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                capture_output=True,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                timeout=self.timeout_s,
                check=False,
                **kw,
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(
                f"{what} gave no answer within {self.timeout_s:g} s (slurm.command_timeout_s); "
                "is slurmctld/slurmdbd up?"
            ) from None
        except OSError as exc:
            # no process to spare on a loaded host is a wait, a missing or broken binary is not
            kind = SlurmUnavailable if exc.errno in (errno.EAGAIN, errno.ENOMEM) else SlurmError
            raise kind(f"{what}: cannot run {argv[0]} ({exc.strerror})") from None
        out = proc.stdout.decode("utf-8", "replace")
        stderr = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0:
            err = _first_line(stderr) or _first_line(out) or "no message"
            raise failure(f"{what} failed (exit {proc.returncode}): {err}", stderr or out)
        if not out.strip() and unavailable(stderr):
            # exit 0 and nothing said (scontrol write batch_script of a stopped slurmctld): no answer, not "none"
            raise SlurmUnavailable(f"{what} got no answer: {_first_line(stderr)}")
        return out

    @staticmethod
    def _check_job_id(job_id: str) -> str:
        jid = str(job_id).strip()
        if not _JOB_ID_RE.match(jid):
            raise SlurmError(f"invalid job id {job_id!r}: expected digits (or ARRAYID_TASK)")
        return jid

    # --------------------------------------------------------------- submit

    def submit(
        self,
        argv: list[str],
        script: bytes | None,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        as_uid: int | None = None,
    ) -> str:
        job_env: dict[str, str] | None = None
        if env is not None:
            job_env = dict(env)
            # address the same cluster harpd uses unless the user chose one
            if "SLURM_CONF" not in job_env and "SLURM_CONF" in os.environ:
                job_env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        for a in argv:
            if "\x00" in a:
                raise SlurmError("sbatch argument contains a NUL byte")
        out = self._run("sbatch", ["--parsable", *argv], stdin=script, cwd=cwd, env=job_env, as_uid=as_uid)
        first = _first_line(out)
        job_id = first.split(";", 1)[0]
        if not _JOB_ID_RE.match(job_id):
            raise SlurmError(f"sbatch --parsable printed {first!r}, not a job id")
        return job_id

    # ---------------------------------------------------------------- sacct

    @staticmethod
    def _sacct_time(t: float) -> str:
        # sacct reads -S/-E in the local time zone of the process
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))

    def _sacct_selection(
        self, job_ids: list[str] | None, since: float | None, until: float | None, all_users: bool
    ) -> list[str]:
        args = ["--duplicates"]
        if all_users:
            args.append("--allusers")
        if job_ids is not None:
            args += ["--jobs", ",".join(job_ids)]
        if since is not None:
            args += ["--starttime", self._sacct_time(since)]
        if until is not None:
            args += ["--endtime", self._sacct_time(until)]
        elif since is not None:
            args += ["--endtime", "now"]
        return args

    def _sacct_json(self, sel: list[str]) -> list[SacctJob]:
        out = self._run("sacct", ["--json", *sel])
        jobs = parse_json(out, where="sacct --json")
        missing = sorted({j.job_id for j in jobs if j.user is None})
        if missing:  # 22.05: "user": null without an association; -P still names them
            owners = self._owners(missing)
            for j in jobs:
                if j.user is None:
                    j.user = owners.get(j.job_id)
        return jobs

    def _owners(self, job_ids: list[str]) -> dict[str, str]:
        """Job id -> owner name from ``sacct -P`` (User, else the passwd name of UID, else the uid)."""
        out: dict[str, str] = {}
        for i in range(0, len(job_ids), _IDS_PER_CALL):
            chunk = [self._check_job_id(j) for j in job_ids[i : i + _IDS_PER_CALL]]
            try:
                text = self._run(
                    "sacct",
                    [
                        "--parsable2",
                        "--noheader",
                        "--allusers",
                        "--duplicates",
                        "--format",
                        "JobIDRaw,User,UID",
                        "--jobs",
                        ",".join(chunk),
                    ],
                )
            except SlurmError:
                continue  # the records keep no owner rather than none at all
            out.update(owners_of_parsable(text))
        return out

    def _sacct_p(self, sel: list[str]) -> list[SacctJob]:
        env = dict(os.environ)
        env["SLURM_TIME_FORMAT"] = "%s"  # epoch seconds: no time zone guessing
        # no column a user writes (LIVE_PARSABLE2_COLUMNS): -P's rows are split by lines and '|'
        out = self._run("sacct", ["--parsable2", "--format", ",".join(LIVE_PARSABLE2_COLUMNS), *sel], env=env)
        return parse_parsable2(out, where="sacct --parsable2")

    def sacct_raw(
        self,
        job_ids: list[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        all_users: bool = True,
    ) -> list[SacctJob]:
        """Parsed but unclassified runs (what ``sacct_jobs`` classifies)."""
        if job_ids is not None:
            ids = [self._check_job_id(j) for j in job_ids]
            if not ids:
                return []
            out: list[SacctJob] = []
            for i in range(0, len(ids), _IDS_PER_CALL):
                out += self._sacct_once(self._sacct_selection(ids[i : i + _IDS_PER_CALL], since, until, all_users))
            return out
        if since is None:
            raise SlurmError("sacct_jobs needs job ids or a start time")
        return self._sacct_once(self._sacct_selection(None, since, until, all_users))

    def _sacct_once(self, sel: list[str]) -> list[SacctJob]:
        if self._json_ok is not False:
            try:
                jobs = self._sacct_json(sel)
                self._json_ok = True
                return jobs
            except SlurmUnavailable:
                raise  # slurmdbd did not answer: says nothing about sacct's JSON (#50)
            except (SlurmError, SacctParseError) as json_exc:
                # JSON unsupported here (old sacct, no data_parser plugin) or
                # slurmdbd down: -P tells which
                try:
                    jobs = self._sacct_p(sel)
                except SacctParseError as exc:
                    raise SlurmError(str(exc)) from None
                except SlurmError as exc:
                    raise type(exc)(str(json_exc)) from None  # the kind -P's failure tells (no answer, refusal)
                self._json_ok = False
                log.warning(
                    "sacct has no JSON here (%s): harpd reads accounting from sacct -P without job names "
                    "and comments (users' text cannot be read safely there); upgrade Slurm or install its "
                    "JSON plugin",
                    json_exc,
                )
                return jobs
        try:
            return self._sacct_p(sel)
        except SacctParseError as exc:
            raise SlurmError(str(exc)) from None

    def sacct_jobs(
        self,
        job_ids: list[str] | None,
        since: float | None,
        until: float | None,
        all_users: bool,
    ) -> list[JobRecord]:
        jobs = self.sacct_raw(job_ids, since, until, all_users)
        return list(to_records(jobs, self.settings.cluster))

    # ------------------------------------------------------------- scontrol

    def show_job(self, job_id: str) -> JobInfo:
        """The controller's view of one job, from ``squeue --json`` (a text record only without JSON).

        JobUnknown "Invalid job id specified" (scontrol's words, which callers
        test for) when slurmctld does not hold the job.
        """
        jid = self._check_job_id(job_id)
        if self._filters_ignored:
            found = self._from_listing(jid)
        else:
            started = time.monotonic()
            jobs = self._squeue_jobs(jid)
            if jobs is None:
                return job_info(self._job_record(jid))
            found = find(jobs, jid)
            if found is not None and any(jid not in asked_by(j) for j in jobs):
                self._filters_ignored = True  # 22.05: every job for one asked; share such listings from now on
                with self._listing_lock:
                    self._listing = (started, jobs)
        if found is None:
            raise JobUnknown(f"squeue --json --jobs {jid} failed: Invalid job id specified")
        return json_job_info(found)

    def _from_listing(self, jid: str) -> Mapping[str, Any] | None:
        """One job from a listing of every job, shared by the reads of the next second (22.05).

        22.05's ``squeue --json`` lists every job whatever ``--jobs`` asks, so
        a hundred registrations at once would list the whole queue a hundred
        times: they share one listing instead, taken again when it is over a
        second old, when it lacks the job (submitted since), and after any
        change harpd made (``_run``).  A listing begun after a read was asked
        for answers that read whatever it holds: reads that queued behind one
        listing share it instead of listing again one after another (a burst
        of registrations on a loaded host would otherwise take a listing each).
        """
        asked = time.monotonic()
        with self._listing_lock:
            cached = self._listing
            if cached is not None and cached[0] >= asked:  # begun since this read was asked for: Slurm's word
                return find(cached[1], jid)
            if cached is not None and asked - cached[0] < _LISTING_MAX_AGE_S:
                found = find(cached[1], jid)
                if found is not None:
                    return found
            started = time.monotonic()
            jobs = self._squeue_jobs() or []
            self._listing = (started, jobs)
            return find(jobs, jid)

    def _squeue_jobs(self, job_id: str | None = None) -> list[dict[str, Any]] | None:
        """Every job slurmctld holds (finished ones too), from ``squeue --json``; None when this squeue has none.

        The one way harpd reads jobs whose text (name, comment, paths) users
        wrote (``harpd.slurm.squeue_json``).  ``--jobs`` narrows the answer
        where the release honours it (23.02+); 22.05 answers with every job,
        and ``find`` picks the one asked for either way.
        """
        if self._squeue_json_ok is False:
            return None
        args = ["--json", "--states=all"] + ([] if job_id is None else ["--jobs", job_id])
        try:
            out = self._run("squeue", args)
        except SlurmError as exc:
            text = str(exc).lower()
            if isinstance(exc, SlurmUnavailable):
                raise  # a stopped slurmctld says nothing about what squeue supports (#50)
            # an old squeue, or one without its JSON plugin; a controller that does not answer is not that
            if self._squeue_json_ok is None and _NO_JSON_RE.search(text.split("failed", 1)[-1]):
                self._no_squeue_json(str(exc))
                return None
            if job_id is not None and "invalid job id" in text:
                return []  # 23.02+: asked for one job slurmctld does not hold
            raise
        try:
            jobs = parse_squeue_json(out)
        except SqueueParseError as exc:
            if self._squeue_json_ok:
                raise
            self._no_squeue_json(str(exc))
            return None
        self._squeue_json_ok = True
        return jobs

    def _no_squeue_json(self, why: str) -> None:
        self._squeue_json_ok = False
        log.warning(
            "squeue has no JSON here (%s): harpd reads jobs from scontrol's text, leaving out any record "
            "whose text reads as Slurm's; upgrade Slurm or install its JSON plugin",
            why,
        )
        return None

    def _record_ids(self, job_id: str | None = None) -> list[str]:
        """slurmctld's records (job ids, one per record), from squeue: no user text in the answer."""
        args = ["-h", "-t", "all", "-o", "%A"] + ([] if job_id is None else ["-j", job_id])
        return [ln.strip() for ln in self._run("squeue", args).splitlines() if ln.strip()]

    def _job_record(self, job_id: str) -> dict[str, str]:
        """The job's own text record (a Slurm without JSON), read only when its text cannot pass for Slurm's.

        scontrol prints a record's text unquoted, newlines too, so a job name
        can end its line early and make up the rest of it: the answer is
        taken only when it has as many lines as squeue (whose answer holds no
        user text) counts records for the id, each a whole record
        (``job_record``).
        """
        jid = self._check_job_id(job_id)
        out = self._run("scontrol", ["show", "job", "--oneliner", jid])
        lines = [ln for ln in out.splitlines() if ln.strip()]
        if not lines:
            raise SlurmError(f"scontrol show job {jid}: empty answer")
        records = [job_record(ln, jid) for ln in lines]  # AmbiguousRecord for a line that is not one whole record
        if len(lines) != len(self._record_ids(jid)):
            raise AmbiguousRecord(
                f"Slurm's record of job {jid} cannot be read safely (its text holds a line break); "
                "harp leaves this job alone"
            )
        return records[0]

    def partitions(self) -> dict[str, PartitionInfo]:
        parts = [
            parse_kv_line(ln)
            for ln in self._run("scontrol", ["show", "partition", "--oneliner"]).splitlines()
            if ln.strip()
        ]
        nodes = [
            parse_kv_line(ln) for ln in self._run("scontrol", ["show", "node", "--oneliner"]).splitlines() if ln.strip()
        ]
        by_part: dict[str, list[dict[str, str]]] = {}
        for n in nodes:
            for p in (n.get("Partitions") or "").split(","):
                if p:
                    by_part.setdefault(p, []).append(n)
        out: dict[str, PartitionInfo] = {}
        for part in parts:
            name = part.get("PartitionName")
            if not name:
                continue
            members = by_part.get(name, [])
            mems = []
            cpus = []
            for n in members:
                real = _limit_number(n.get("RealMemory"))
                if real is not None:
                    spec = _limit_number(n.get("MemSpecLimit")) or 0
                    mems.append(real - spec)
                c = _limit_number(n.get("CPUTot"))
                if c is not None:
                    cpus.append(c)
            max_mem = max(mems) if mems else None
            part_mem = _limit_number(part.get("MaxMemPerNode"))
            if part_mem is not None:
                max_mem = part_mem if max_mem is None else min(max_mem, part_mem)
            max_cpus = max(cpus) if cpus else None
            part_cpus = _limit_number(part.get("MaxCPUsPerNode"))
            if part_cpus is not None:
                max_cpus = part_cpus if max_cpus is None else min(max_cpus, part_cpus)
            gres_list = [
                g for g in (re.sub(r"\([^)]*\)", "", n.get("Gres") or "") for n in members) if g and g != "(null)"
            ]
            gres = max(gres_list, key=_gpus_in_gres) if gres_list else None
            max_time = part.get("MaxTime")
            max_time_s = duration_s(max_time) if max_time and max_time != "UNLIMITED" else None
            total_nodes = _limit_number(part.get("TotalNodes"))
            out[name] = PartitionInfo(
                name=name,
                max_time_s=None if max_time_s is None else int(max_time_s),
                max_mem_mb_per_node=max_mem,
                max_cpus_per_node=max_cpus,
                nodes=total_nodes if total_nodes is not None else len(members),
                gres=gres,
                gpus_per_node=_gpus_in_gres(gres),
                default=(part.get("Default") == "YES"),
                max_nodes=_limit_number(part.get("MaxNodes")),
                node_names=tuple(n.get("NodeName", "") for n in members),
            )
        return out

    def requeue_hold(self, job_id: str) -> None:
        self._run("scontrol", ["requeuehold", self._check_job_id(job_id)])

    def update_job(self, job_id: str, **changes: Unpack[JobChanges]) -> None:
        fields = update_fields(changes)
        args = ["update", f"JobId={self._check_job_id(job_id)}"]
        args += [f"{k}={v}" for k, v in fields.items()]
        self._run("scontrol", args)

    def held_jobs(self) -> list[QueuedJob]:
        """Every job slurmctld holds, finished ones too (for MinJobAge), in one ``squeue --json`` call.

        Without JSON: one ``scontrol show job`` listing, of which only the
        records that read as exactly one whole record of a job squeue lists,
        once, are taken; a job whose text makes up or breaks a record is left
        out (logged once) while every other job is still read in that one
        call, so one user's text never makes the listing cost more.
        """
        jobs = self._squeue_jobs()
        if jobs is not None:
            return json_queued_jobs(jobs)
        out = self._run("scontrol", ["show", "job", "--oneliner"])
        ids = set(self._record_ids())
        lines = [ln for ln in out.splitlines() if ln.strip()]
        records: list[dict[str, str] | None] = []
        for ln in lines:
            try:
                records.append(job_record(ln))
            except AmbiguousRecord:
                records.append(None)
        seen: dict[str, int] = {}
        for kv in records:
            if kv is not None:
                seen[kv.get("JobId") or ""] = seen.get(kv.get("JobId") or "", 0) + 1
        # A line that does not start a record continues the one before it (a line break in that
        # job's text): that job is left out.  A record whose id is listed twice, or is no job squeue
        # lists, may have been made up by the text of the job printed before it: that job and the
        # id's own job are read again alone (at most _REREAD_MAX per listing), the made-up record never.
        suspects: set[str] = set()
        again: set[str] = set()
        for i, (ln, kv) in enumerate(zip(lines, records)):
            prev = records[i - 1] if i else None
            prev_id = (prev or {}).get("JobId") or ""
            if not ln.startswith("JobId="):
                if prev is not None:
                    suspects.add(prev_id)
                continue
            jid = (kv or {}).get("JobId") or ""
            if kv is not None and (jid not in ids or seen.get(jid) != 1):
                again.update(x for x in (prev_id, jid if jid in ids else "") if x)
        good = {(kv.get("JobId") or ""): kv for kv in records if kv is not None}
        good = {j: kv for j, kv in good.items() if j in ids and seen[j] == 1 and j not in suspects | again}
        reread = sorted(again - suspects, key=lambda j: (len(j), j))
        for n, jid in enumerate(reread):
            try:
                if n >= _REREAD_MAX:
                    raise SlurmError(f"more than {_REREAD_MAX} records to read alone in one listing")
                good[jid] = self._job_record(jid)
            except SlurmError as exc:
                self._leave_out(jid, str(exc))
        for jid in sorted(ids - set(good) - set(self._left_out)):
            self._leave_out(jid, "its record is missing or breaks scontrol's listing (a line break in its text)")
        self._left_out = {j: w for j, w in self._left_out.items() if j in ids}
        return [queued_job(good[jid]) for jid in sorted(good, key=lambda j: (len(j), j))]

    def _leave_out(self, job_id: str, why: str) -> None:
        """Log once per job and reason that a job is left out of the listing (the watcher asks every few seconds)."""
        if self._left_out.get(job_id) != why:
            self._left_out[job_id] = why
            log.warning("job %s left out of the queue listing: %s", job_id, why)

    def queue(self) -> list[QueuedJob]:
        return [j for j in self.held_jobs() if j.running or j.pending]

    def release(self, job_id: str) -> None:
        self._run("scontrol", ["release", self._check_job_id(job_id)])

    def set_nice(self, job_id: str, nice: int) -> None:
        """``scontrol update JobId=JOB Nice=N`` (harpd.watch.trials: the order of a study's pending trials)."""
        if not -2147483645 <= int(nice) <= 2147483645:
            raise SlurmError(f"nice {nice} is out of Slurm's range")
        self._run("scontrol", ["update", f"JobId={self._check_job_id(job_id)}", f"Nice={int(nice)}"])

    def hold(self, job_id: str) -> None:
        """``scontrol hold JOB``: a pending job waits until released."""
        self._run("scontrol", ["hold", self._check_job_id(job_id)])

    def cancel(self, job_id: str) -> None:
        self._run("scancel", [self._check_job_id(job_id)])

    def signal(self, job_id: str, signal: str) -> None:
        """``scancel --signal=SIG --batch JOB``: to the batch shell only, where a script's ``trap`` runs
        (harpd.watch.checkpoint_signal: a resumable job is asked to checkpoint before its limit)."""
        name = str(signal).upper().removeprefix("SIG")
        if not (name.isalnum() and 1 <= len(name) <= 8):
            raise SlurmError(f"signal {signal!r} is not a signal name (e.g. USR1)")
        self._run("scancel", [f"--signal={name}", "--batch", self._check_job_id(job_id)])

    # ------------------------------------------- recovery (harpd.recovery)

    def batch_script(self, job_id: str) -> bytes:
        """The job's batch script as Slurm keeps it, for a resubmission.

        slurmctld's copy while it holds the job (``MinJobAge``), else the
        accounting copy (``AccountingStoreFlags=job_script``).  ``scontrol
        write batch_script`` of a job slurmctld no longer holds exits 0 with
        nothing on stdout on 22.05 (the error goes to stderr only), so an
        empty answer means "not in slurmctld", exactly as a failure does.  A
        script that is not UTF-8 is refused rather than resubmitted altered.
        """
        jid = self._check_job_id(job_id)
        first: SlurmError | None = None
        try:
            text = self._run("scontrol", ["write", "batch_script", jid, "-"])
        except SlurmError as exc:
            first, text = exc, ""
        if not text.strip():
            try:
                out = self._run("sacct", ["--batch-script", "--jobs", jid])
            except SlurmUnavailable:
                raise
            except SlurmError:
                if first is None:
                    raise
                raise first from None
            try:
                text = _after_banner(out, "Batch Script for", jid, "batch script")
            except NotRecordedYet:
                if isinstance(first, SlurmUnavailable):
                    raise first from None  # slurmctld did not answer: it may hold the script
                raise
            if text.endswith("\n\n"):
                text = text[:-1]  # sacct adds a line break after the script
        if not text.strip() or text.strip() == "NONE":
            raise SlurmError(
                f"Slurm has no batch script for job {jid} (in slurmctld or accounting: "
                "AccountingStoreFlags needs job_script)"
            )
        if "\ufffd" in text:
            raise SlurmError(f"the batch script of job {jid} is not UTF-8; it cannot be resubmitted unaltered")
        return text.encode("utf-8")

    def job_env(self, job_id: str) -> dict[str, str]:
        """The environment the job was submitted with, as accounting keeps it (``job_env``).

        ``sacct --env-vars`` prints it on 22.05 to 26.05 (one ``NAME=value``
        a line; a value with line breaks, an exported shell function, runs on
        over the following lines).  slurmctld offers no copy of its own to
        clients, so this is the only source; SlurmError when accounting has
        none (the flag is off, or the job is not a batch job).
        """
        jid = self._check_job_id(job_id)
        out = self._run("sacct", ["--env-vars", "--jobs", jid])
        text = _after_banner(out, "Environment used for", jid, "environment")
        env = parse_env_lines(text)
        if not env:
            raise SlurmError(f"Slurm keeps no environment for job {jid} (AccountingStoreFlags needs job_env)")
        return env

    def accounting(self) -> Accounting:
        """What the site's accounting keeps of a job beyond its usage (``scontrol show config``)."""
        flags = self._config().get("AccountingStoreFlags", "")
        words = frozenset(w.strip().lower() for w in flags.split(",") if w.strip() and w.strip() != "(null)")
        return Accounting(script="job_script" in words, env="job_env" in words, flags=",".join(sorted(words)))

    def jobs_with_comment(self, comment: str, user: str | None, since: float | None) -> list[str]:
        """Ids of the jobs (of ``user``; None: everyone's) whose comment is ``comment``, alone or
        followed by ``;``: slurmctld's jobs (any state) and accounting's since ``since``.  How
        recovery finds a resubmission it made before a crash (and checks it, ``resubmit``).

        Comments are users' text: they are read from Slurm's JSON, each inside its
        own job's field; without JSON, job ids are listed from output that holds
        no user text and each job's comment is read alone, whole.
        """
        if not comment or any(c in comment for c in "|\n\r\x00"):
            raise SlurmError(f"invalid comment to search for: {comment!r}")

        def hit(c: str | None) -> bool:
            c = (c or "").strip()
            return c == comment or c.startswith(comment + ";")

        found: list[str] = []
        jobs = self._squeue_jobs()
        if jobs is not None:
            for info in map(json_job_info, jobs):
                if (user is None or info.user == user) and hit(info.comment) and info.job_id not in found:
                    found.append(info.job_id)
        else:
            args = ["-h", "-t", "all", "-o", "%A"] + (["--user", user] if user else [])
            for jid in [ln.strip() for ln in self._run("squeue", args).splitlines() if ln.strip()]:
                if hit(self._one_text("squeue", ["-h", "-t", "all", "-o", "%k", "-j", jid])) and jid not in found:
                    found.append(jid)
        sel = ["--allocations", "--duplicates"] + (["--user", user] if user else ["--allusers"])
        if since is not None:
            sel += ["--starttime", self._sacct_time(since), "--endtime", "now"]
        try:
            runs = self._sacct_json(sel)
        except (SlurmError, SacctParseError):
            runs = None
        if runs is not None:
            for r in runs:
                if (user is None or r.user == user) and hit(r.comment) and r.job_id not in found:
                    found.append(r.job_id)
            return found
        ids = self._run("sacct", ["--noheader", "--parsable2", "--format=JobIDRaw", *sel])
        for jid in dict.fromkeys(ln.strip() for ln in ids.splitlines() if ln.strip()):
            if not _JOB_ID_RE.match(jid) or jid in found:
                continue
            text = self._one_text(
                "sacct", ["--noheader", "--parsable2", "--allocations", "--format=Comment", "-j", jid]
            )
            if hit(text):
                found.append(jid)
        return found

    def _one_text(self, name: str, args: list[str]) -> str:
        """One job's one text field, as the command printed it: the whole answer, line breaks and all.

        Asked of a single job, the answer is that job's text and nothing else,
        so it is taken whole (less the line break that ends it), never split.
        """
        out = self._run(name, args)
        return out[:-1] if out.endswith("\n") else out

    def _config(self) -> dict[str, str]:
        """``scontrol show config`` as key -> value (``SlurmUser = slurm(64030)``)."""
        out: dict[str, str] = {}
        for ln in self._run("scontrol", ["show", "config"]).splitlines():
            key, sep, value = ln.partition("=")
            if sep and key.strip() and " " not in key.strip():
                out.setdefault(key.strip(), value.strip())
        return out

    def slurm_user(self) -> str | None:
        """``SlurmUser`` of the cluster (``scontrol show config``), without the uid."""
        return self._config().get("SlurmUser", "").split("(", 1)[0] or None

    def admin_level(self, user: str) -> str | None:
        """The user's Slurm ``AdminLevel`` (None, Operator, Administrator) from sacctmgr."""
        out = self._run("sacctmgr", ["--noheader", "--parsable2", "show", "user", user, "format=AdminLevel"])
        line = _first_line(out)
        return line.rstrip("|") or None
