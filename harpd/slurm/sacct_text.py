"""``sacct --parsable2`` (``-P``) text -> ``SacctJob``s.

A header line, then one row per job with its steps as extra rows (``12.batch``,
``12.extern``, ``12.0``) right after the job's row.  Both the live fallback
(``harpd.slurm.cli_backend``) and exported history files
(``harpd.traces.sacct_export``) go through ``iter_parsable2``, so there is one
row parser.  Sizes and durations are read with ``harp_submit.units``'
accounting parsers.

Facts of 22.05 this module relies on (checked on the local cluster, fixtures in
tests/fixtures/sacct/):

* ``ReqMem`` is the whole job's memory (``300M`` for ``-c 2
  --mem-per-cpu=150M``); releases before 21.08 suffix it ``n`` (per node) or
  ``c`` (per CPU), which is converted to the whole job here.
* A step's MaxRSS is the largest single task's RSS (``45824K``).
* ``TRESUsageInMax`` holds the largest task's usage of every tracked TRES;
  its ``gres/gpumem`` (``14486M``), where the site gathers GPU usage, is the
  step's GPU memory peak.  No user writes it, so the live backend asks for it.

Timestamps: ``-P`` prints local time without a zone (or epoch seconds when
run with ``SLURM_TIME_FORMAT=%s``, which the live backend does).  Exported
history files carry no zone at all, so naive timestamps are read as UTC:
durations are exact, absolute times may be off by the exporting site's UTC
offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from harp_submit.units import parse_duration_s, parse_size_mb, parse_size_mb_per
from harpd import access
from harpd.slurm.job_ids import job_of_step
from harpd.slurm.sacct_records import (
    SacctJob,
    SacctParseError,
    SacctStep,
    gpumem_mb,
    normalize_state,
    parse_tres,
)

__all__ = [
    "PARSABLE2_COLUMNS",
    "LIVE_PARSABLE2_COLUMNS",
    "Parsable2Stats",
    "iter_parsable2",
    "parse_parsable2",
    "timestamp",
]

# What the live backend asks ``sacct -P -o`` for.  Comment stays last: it is
# free text and may contain the separator, so extra fields are joined back.
PARSABLE2_COLUMNS = (
    "JobID",
    "JobIDRaw",
    "Cluster",
    "User",
    "Group",
    "Account",
    "Partition",
    "JobName",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "ReqMem",
    "ReqCPUS",
    "ReqNodes",
    "ReqTRES",
    "AllocCPUS",
    "AllocNodes",
    "AllocTRES",
    "MaxRSS",
    "NTasks",
    "TotalCPU",
    "NNodes",
    "TRESUsageInMax",
    "Comment",
)

#: What the live backend asks ``sacct -P`` for when sacct has no JSON: no column a user writes
#: (JobName, Comment), since a line break in one would end its row and make up the next;
#: such runs are stored without name or comment (harpd.slurm.cli_backend says so once)
LIVE_PARSABLE2_COLUMNS = tuple(c for c in PARSABLE2_COLUMNS if c not in ("JobName", "Comment"))


_EPOCH = datetime(1970, 1, 1)
_fromiso = datetime.fromisoformat


def timestamp(text: str | None) -> float | None:
    """``2021-05-01T00:06:13`` (read as UTC) or epoch digits -> epoch seconds."""
    if not text:
        return None
    c = text[0]
    if c.isdigit():
        if len(text) >= 19 and text[4] == "-":
            try:
                dt = _fromiso(text)
            except ValueError:
                return None
            return (dt - _EPOCH).total_seconds() if dt.tzinfo is None else dt.timestamp()
        if text.isdigit():
            v = int(text)
            return float(v) if v > 0 else None
    return None  # Unknown, None, N/A


def _int(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return int(float(text))
        except ValueError:
            return None


def _gpus(tres: dict[str, str]) -> int | None:
    """GPU count of a TRES dict: ``gres/gpu``, else the sum of typed ``gres/gpu:X``."""
    v = tres.get("gres/gpu")
    if v is not None:
        return _int(v)
    total = None
    for k, v in tres.items():
        if k.startswith("gres/gpu:"):
            n = _int(v)
            if n is not None:
                total = (total or 0) + n
    return total


def _exit_pair(text: str | None) -> tuple[int | None, int | None]:
    """``"1:0"`` -> (1, 0): return code and signal."""
    if not text or ":" not in text:
        return _int(text), None
    rc, _, sig = text.partition(":")
    return _int(rc), _int(sig)


@dataclass(slots=True)
class Parsable2Stats:
    """Rows read and rows skipped (with the first few reasons, for the summary)."""

    rows: int = 0
    jobs: int = 0
    skipped: int = 0
    first_errors: list[str] = field(default_factory=list)

    def skip(self, where: str, why: str) -> None:
        self.skipped += 1
        if len(self.first_errors) < 5:
            self.first_errors.append(f"{where}: {why}")


_T = TypeVar("_T")
_TRES_CACHE: dict[str, tuple[float | None, int | None, int | None, int | None]] = {}
_DUR_CACHE: dict[str, float | None] = {}
_MEM_CACHE: dict[str, tuple[float | None, str | None]] = {}
_CACHE_MAX = 50_000


def _cached(cache: dict[str, _T], parse: Callable[[str], _T], text: str) -> _T:
    """``parse(text)``, remembered: a site's rows reuse a few TRES, limit and size strings."""
    try:
        return cache[text]
    except KeyError:
        v = parse(text)
        if len(cache) < _CACHE_MAX:
            cache[text] = v
        return v


def _tres_summary(text: str) -> tuple[float | None, int | None, int | None, int | None]:
    """(mem MiB, gpus, cpus, nodes) of a TRES string."""
    t = parse_tres(text)
    return parse_size_mb(t.get("mem")), _gpus(t), _int(t.get("cpu")), _int(t.get("node"))


_duration = partial(_cached, _DUR_CACHE, parse_duration_s)
_req_mem = partial(_cached, _MEM_CACHE, parse_size_mb_per)
_tres = partial(_cached, _TRES_CACHE, _tres_summary)


def _row_parsers(header: list[str]) -> tuple[Any, Any]:
    """(job row -> SacctJob, step row -> SacctStep) for one header.

    Column positions are resolved once per file; a column the header lacks
    reads as "" (index -1 of a row padded with one empty field), so exports
    with any subset of sacct's columns go through the same code.
    """
    pos = {name: i for i, name in enumerate(header)}

    def ix(name: str) -> int:
        return pos.get(name, -1)

    i_jobid, i_raw, i_cluster, i_user, i_group = ix("JobID"), ix("JobIDRaw"), ix("Cluster"), ix("User"), ix("Group")
    i_account, i_part, i_name, i_state, i_exit = (
        ix("Account"),
        ix("Partition"),
        ix("JobName"),
        ix("State"),
        ix("ExitCode"),
    )
    i_submit, i_start, i_end = ix("Submit"), ix("Start"), ix("End")
    i_elraw, i_el, i_limraw, i_lim = ix("ElapsedRaw"), ix("Elapsed"), ix("TimelimitRaw"), ix("Timelimit")
    i_reqmem, i_reqcpus, i_reqnodes, i_reqtres = ix("ReqMem"), ix("ReqCPUS"), ix("ReqNodes"), ix("ReqTRES")
    i_alloccpus, i_allocnodes, i_alloctres = ix("AllocCPUS"), ix("AllocNodes"), ix("AllocTRES")
    i_maxrss, i_ntasks, i_totcpu, i_nnodes, i_comment = (
        ix("MaxRSS"),
        ix("NTasks"),
        ix("TotalCPU"),
        ix("NNodes"),
        ix("Comment"),
    )
    i_usage_max = ix("TRESUsageInMax")
    ts = timestamp

    def job(f: list[str]) -> SacctJob:
        state = normalize_state(f[i_state])
        ec = f[i_exit]
        if ec == "0:0":
            rc: int | None = 0
            sig: int | None = 0
        else:
            rc, sig = _exit_pair(ec)
        el = f[i_elraw]
        elapsed_s = float(el) if el.isdigit() else _duration(f[i_el])
        lim = f[i_limraw]
        if lim.isdigit():
            limit_s: float | None = int(lim) * 60.0
        elif lim:
            limit_s = None  # UNLIMITED, Partition_Limit
        else:
            limit_s = _duration(f[i_lim])
        rq = f[i_reqtres]
        req_mem, req_gpus, tres_cpus, tres_nodes = _tres(rq) if rq else (None, None, None, None)
        al = f[i_alloctres]
        _, alloc_gpus, alloc_tres_cpus, _ = _tres(al) if al else (None, None, None, None)
        req_cpus = _int(f[i_reqcpus]) or tres_cpus
        nnodes = _int(f[i_nnodes])
        req_nodes = _int(f[i_reqnodes]) or tres_nodes or nnodes
        alloc_nodes = _int(f[i_allocnodes])
        if alloc_nodes is None and nnodes is not None and state not in ("PENDING", None):
            alloc_nodes = nnodes
        if req_mem is None:
            # no mem in the TRES: ReqMem, with its pre-21.08 per-node/per-CPU suffix
            req_mem, per = _req_mem(f[i_reqmem])
            if req_mem is not None:
                if per == "n":
                    req_mem *= req_nodes or 1
                elif per == "c":
                    req_mem *= req_cpus or 1
        if req_mem is not None and req_mem <= 0:
            req_mem = None  # --mem=0: "all of the node", not a size
        return SacctJob(
            job_id=f[i_jobid] or f[i_raw],
            cluster=f[i_cluster] or None,
            user=f[i_user] or None,
            group=f[i_group] or None,
            account=f[i_account] or None,
            partition=f[i_part] or None,
            job_name=f[i_name] or None,
            state=state,
            exit_code=rc,
            exit_signal=sig,
            submit_time=ts(f[i_submit]),
            start_time=ts(f[i_start]),
            end_time=ts(f[i_end]),
            elapsed_s=elapsed_s,
            limit_s=limit_s,
            req_mem_mb=req_mem,
            req_cpus=req_cpus,
            req_nodes=req_nodes,
            req_gpus=req_gpus,
            alloc_cpus=_int(f[i_alloccpus]) or alloc_tres_cpus,
            alloc_nodes=alloc_nodes,
            alloc_gpus=alloc_gpus,
            cpu_s=_duration(f[i_totcpu]) if f[i_totcpu] else None,
            comment=f[i_comment] or None,
        )

    def step(job_id: str, f: list[str]) -> SacctStep:
        rc, sig = _exit_pair(f[i_exit])
        el = f[i_elraw]
        rss = parse_size_mb(f[i_maxrss], bare_unit="")
        return SacctStep(
            step_id=job_id.split(".", 1)[1],
            state=normalize_state(f[i_state]),
            exit_code=rc,
            exit_signal=sig,
            max_rss_mb=rss,
            ntasks=_int(f[i_ntasks]),
            nnodes=_int(f[i_nnodes]),
            elapsed_s=float(el) if el.isdigit() else parse_duration_s(f[i_el]),
            cpu_s=parse_duration_s(f[i_totcpu]),
            max_gpumem_mb=gpumem_mb(f[i_usage_max]),
        )

    return job, step


def iter_parsable2(
    lines: Iterable[str],
    *,
    where: str = "sacct",
    stats: Parsable2Stats | None = None,
    header: list[str] | None = None,
) -> Iterator[SacctJob]:
    """Stream jobs from ``sacct -P`` text, folding step rows into their job.

    The first line is the header (sacct's default) unless ``header`` is
    given.  Bad rows are skipped and counted in ``stats`` with their line
    number (``where`` names the file); a missing or alien header raises
    SacctParseError.  Runs of the same job id (``--duplicates``) get
    ``run`` 1, 2, ... in the order printed.
    """
    st = stats if stats is not None else Parsable2Stats()
    it = iter(lines)
    lineno = 0
    if header is None:
        for raw in it:
            lineno += 1
            if raw.strip():
                header = raw.rstrip("\r\n").split("|")
                break
        else:
            return
    if "JobID" not in header and "JobIDRaw" not in header:
        raise SacctParseError(f"{where}:{lineno}: not sacct --parsable2 output (no JobID column in the header line)")
    ncols = len(header)
    comment_last = header[-1] == "Comment"
    i_id = header.index("JobID") if "JobID" in header else header.index("JobIDRaw")
    parse_job, parse_step = _row_parsers(header)
    current: SacctJob | None = None
    current_id = ""
    runs: dict[str, int] = {}
    for raw in it:
        lineno += 1
        line = raw.rstrip("\r\n")
        if not line:
            continue
        st.rows += 1
        f = line.split("|")
        if len(f) != ncols:
            if len(f) > ncols and comment_last:
                f[ncols - 1] = "|".join(f[ncols - 1 :])
                del f[ncols:]
            else:
                st.skip(f"{where}:{lineno}", f"{len(f)} fields, header has {ncols}")
                continue
        jid = f[i_id]
        if not jid:
            st.skip(f"{where}:{lineno}", "empty JobID")
            continue
        f.append("")  # index -1: the columns this header lacks
        try:
            if "." in jid:
                if current is None or job_of_step(jid) != current_id:
                    st.skip(f"{where}:{lineno}", f"step {jid} without its job row")
                    continue
                current.steps.append(parse_step(jid, f))
                continue
            job = parse_job(f)
        except (ValueError, IndexError) as exc:
            st.skip(f"{where}:{lineno}", f"unreadable row ({exc})")
            continue
        if current is not None:
            st.jobs += 1
            yield current
        n = runs.get(jid)
        if n is not None:
            job.run = n + 1
            runs[jid] = n + 1
        else:
            if len(runs) >= 200_000:
                runs.clear()  # sacct prints the runs of a job close together
            runs[jid] = 1
        current = job
        current_id = jid
    if current is not None:
        st.jobs += 1
        yield current


def parse_parsable2(text: str, where: str = "sacct") -> list[SacctJob]:
    """All jobs of a ``sacct -P`` output held in memory (the live fallback)."""
    return list(iter_parsable2(text.splitlines(), where=where))


def owners_of_parsable(text: str) -> dict[str, str]:
    """``JobIDRaw|User|UID`` lines (``sacct -P --noheader``) -> job id -> owner name.

    The User column, else the passwd name of the UID, else the uid itself:
    a job always has an owner when Slurm knows its uid.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0] or "." in parts[0]:
            continue
        user, uid = parts[1].strip(), parts[2].strip()
        if not user and uid.isdigit():
            user = access.user_of(int(uid)) or uid
        if user:
            out.setdefault(parts[0], user)
    return out
