"""Turn what ``sacct`` prints into ``SacctJob``s: one per job run, steps folded in.

Three inputs, one result shape, so classification (``harpd.slurm.classify``) and the
history importer never care where a job came from:

* ``sacct --json`` in the 22.05 layout (openapi/dbv0.0.38): ``state.current``
  a string, ``time.limit`` minutes, plain integers;
* ``sacct --json`` in the 23.11+ layout (data_parser v0.0.40 and later):
  ``state.current`` a list, numbers wrapped as ``{set, infinite, number}``,
  ``required.memory_per_cpu``/``memory_per_node``, step ids like ``"12.batch"``;
* ``sacct --parsable2`` (``-P``) text with a header line, steps as extra rows
  (``12.batch``, ``12.extern``, ``12.0``) right after their job's row.  Both the
  live fallback and exported history files (``harpd.traces.sacct_export``) go
  through ``iter_parsable2``, so there is one row parser.

Facts of 22.05 this module relies on (checked on the local cluster, fixtures in
tests/fixtures/sacct/):

* ``required.memory`` in 22.05's JSON is the low 32 bits of ``req_mem``: the
  per-node *or* per-CPU value with the per-CPU flag bit dropped (``--mem=100M``
  and ``--mem-per-cpu=100M`` both print 100).  The job's ``tres.requested``
  ``mem`` (MiB, whole job) is unambiguous, so memory comes from there.
* 22.05's JSON exit code reports every normal exit as ``SUCCESS`` with
  ``return_code`` 0 (its dumper tests WIFEXITED only), so a FAILED job's real
  return code is lost there; harp records it as unknown.
* Job-level CPU totals in the JSON are zero; the sum over steps is the truth.
* ``ReqMem`` in ``-P`` output is the whole job's memory (``300M`` for
  ``-c 2 --mem-per-cpu=150M``); releases before 21.08 suffix it ``n`` (per
  node) or ``c`` (per CPU), which is converted to the whole job here.
* A step's MaxRSS is the largest single task's RSS (``tres.requested.max``
  ``mem`` in bytes in JSON; ``45824K`` in ``-P``).

Timestamps: JSON carries epoch seconds.  ``-P`` prints local time without a
zone (or epoch seconds when run with ``SLURM_TIME_FORMAT=%s``, which the live
backend does).  Exported history files carry no zone at all, so naive
timestamps are read as UTC: durations are exact, absolute times may be off by
the exporting site's UTC offset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "PARSABLE2_COLUMNS",
    "SacctJob",
    "SacctStep",
    "SacctParseError",
    "parse_json",
    "json_layout",
    "iter_parsable2",
    "parse_parsable2",
    "Parsable2Stats",
    "mem_to_mb",
    "duration_s",
    "timestamp",
    "parse_tres",
    "normalize_state",
]

# What the live backend asks ``sacct -P -o`` for.  Comment stays last: it is
# free text and may contain the separator, so extra fields are joined back.
PARSABLE2_COLUMNS = (
    "JobID", "JobIDRaw", "Cluster", "User", "Group", "Account", "Partition", "JobName",
    "State", "ExitCode", "DerivedExitCode", "Submit", "Start", "End", "ElapsedRaw",
    "TimelimitRaw", "ReqMem", "ReqCPUS", "ReqNodes", "ReqTRES", "AllocCPUS", "AllocNodes",
    "AllocTRES", "MaxRSS", "NTasks", "TotalCPU", "NNodes", "Comment",
)

# Slurm's 32-bit "not set" / "infinite" markers, as the 22.05 JSON prints them
_NO_VAL32 = {0xFFFFFFFE, 0xFFFFFFFF}
_NO_VAL64 = {0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF}

# base job states (flags like REQUEUED in a 23.11 state list come after these)
BASE_STATES = frozenset(
    {
        "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
        "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED",
        "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "REVOKED", "SPECIAL_EXIT", "STOPPED",
        "SIGNALING", "STAGE_OUT", "COMPLETING", "CONFIGURING",
    }
)


class SacctParseError(ValueError):
    """sacct output harp cannot read; the message names what and where."""


@dataclass(slots=True)
class SacctStep:
    """One job step as accounting saw it.  ``max_rss_mb`` is the largest task's."""

    step_id: str  # "batch", "extern", "0", ...
    state: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    max_rss_mb: float | None = None
    tot_rss_mb: float | None = None  # sum over tasks (JSON only)
    ntasks: int | None = None
    nnodes: int | None = None
    elapsed_s: float | None = None
    cpu_s: float | None = None


@dataclass(slots=True)
class SacctJob:
    """One run of one job, as parsed; ``harpd.slurm.classify`` turns it into a JobRecord."""

    job_id: str  # "12", "12_3" (array task), "12+0" (het component)
    cluster: str | None = None
    user: str | None = None
    group: str | None = None
    account: str | None = None
    partition: str | None = None
    job_name: str | None = None
    state: str | None = None  # normalised base state: "CANCELLED", not "CANCELLED by 0"
    exit_code: int | None = None
    exit_signal: int | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    elapsed_s: float | None = None
    limit_s: float | None = None  # None: unlimited or unknown
    req_mem_mb: float | None = None  # whole job
    req_cpus: int | None = None
    req_nodes: int | None = None
    req_gpus: int | None = None
    alloc_cpus: int | None = None
    alloc_nodes: int | None = None
    alloc_gpus: int | None = None
    cpu_s: float | None = None
    comment: str | None = None
    steps: list[SacctStep] = field(default_factory=list)
    run: int = 1  # 1 + earlier runs of the same job id (requeues), in this output


# ---------------------------------------------------------------------------
# scalar helpers (shared by the JSON and the text paths)

_UNKNOWN_TEXT = frozenset({"", "Unknown", "None", "N/A", "(null)", "INVALID"})
_UNITS = {"K": 1.0 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3, "E": 1024.0**4}
_MEM_RE = re.compile(r"^([0-9]+(?:\.[0-9]*)?)([KMGTPE]?)([nc]?)$")


def mem_to_mb(text: str | None, bare_unit: str = "M") -> tuple[float | None, str | None]:
    """``"4Gc"`` -> ``(4096.0, "c")``; bare numbers are in ``bare_unit``.

    The second item is the old per-node (``n``) / per-CPU (``c``) suffix, or
    None.  Unparseable text gives ``(None, None)``.
    """
    if not text or text in _UNKNOWN_TEXT:
        return None, None
    m = _MEM_RE.match(text)
    if m is None:
        return None, None
    num, unit, per = m.groups()
    u = unit or bare_unit
    factor = _UNITS[u] if u else 1.0 / (1024 * 1024)  # bare_unit "": bytes
    return float(num) * factor, (per or None)


def duration_s(text: str | None) -> float | None:
    """Slurm durations: ``[D-]HH:MM:SS``, ``MM:SS``, ``MM:SS.mmm`` -> seconds.

    ``UNLIMITED``/``Partition_Limit``/unknown -> None.
    """
    if not text or text in _UNKNOWN_TEXT or text[0].isalpha():
        return None
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        days = int(d)
    parts = text.split(":")
    try:
        if len(parts) == 3:
            secs = int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2])
        elif len(parts) == 2:
            secs = int(parts[0]) * 60 + float(parts[1])
        elif len(parts) == 1:
            secs = float(parts[0])
        else:
            return None
    except ValueError:
        return None
    return days * 86400 + secs


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


def parse_tres(text: str | None) -> dict[str, str]:
    """``billing=1,cpu=2,gres/gpu=1,mem=3800M,node=1`` -> ``{"cpu": "2", ...}``."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        k, sep, v = item.partition("=")
        if sep:
            out[k] = v
    return out


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


def normalize_state(state: Any) -> str | None:
    """``"CANCELLED by 0"`` / ``["CANCELLED"]`` / ``"CANCELLED+"`` -> ``"CANCELLED"``."""
    if state is None:
        return None
    if isinstance(state, list):
        words = [str(s) for s in state if s]
        for w in words:
            if w in BASE_STATES:
                return w
        return words[0] if words else None
    s = str(state).strip()
    if not s:
        return None
    s = s.split(" ", 1)[0].rstrip("+")
    return s.upper()


def _exit_pair(text: str | None) -> tuple[int | None, int | None]:
    """``"1:0"`` -> (1, 0): return code and signal."""
    if not text or ":" not in text:
        return _int(text), None
    rc, _, sig = text.partition(":")
    return _int(rc), _int(sig)


# ---------------------------------------------------------------------------
# --parsable2


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


def _base_id(job_id: str) -> str:
    return job_id.split(".", 1)[0]


_TRES_CACHE: dict[str, tuple[float | None, int | None, int | None, int | None]] = {}
_DUR_CACHE: dict[str, float | None] = {}
_MEM_CACHE: dict[str, tuple[float | None, str | None]] = {}
_CACHE_MAX = 50_000


def _tres_summary(text: str) -> tuple[float | None, int | None, int | None, int | None]:
    """(mem MiB, gpus, cpus, nodes) of a TRES string; cached: sites reuse a few shapes."""
    hit = _TRES_CACHE.get(text)
    if hit is not None:
        return hit
    t = parse_tres(text)
    mem, _ = mem_to_mb(t.get("mem"))
    out = (mem, _gpus(t), _int(t.get("cpu")), _int(t.get("node")))
    if len(_TRES_CACHE) < _CACHE_MAX:
        _TRES_CACHE[text] = out
    return out


def _cached_duration(text: str) -> float | None:
    try:
        return _DUR_CACHE[text]
    except KeyError:
        v = duration_s(text)
        if len(_DUR_CACHE) < _CACHE_MAX:
            _DUR_CACHE[text] = v
        return v


def _cached_mem(text: str) -> tuple[float | None, str | None]:
    try:
        return _MEM_CACHE[text]
    except KeyError:
        v = mem_to_mb(text)
        if len(_MEM_CACHE) < _CACHE_MAX:
            _MEM_CACHE[text] = v
        return v


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
    i_account, i_part, i_name, i_state, i_exit = ix("Account"), ix("Partition"), ix("JobName"), ix("State"), ix("ExitCode")
    i_submit, i_start, i_end = ix("Submit"), ix("Start"), ix("End")
    i_elraw, i_el, i_limraw, i_lim = ix("ElapsedRaw"), ix("Elapsed"), ix("TimelimitRaw"), ix("Timelimit")
    i_reqmem, i_reqcpus, i_reqnodes, i_reqtres = ix("ReqMem"), ix("ReqCPUS"), ix("ReqNodes"), ix("ReqTRES")
    i_alloccpus, i_allocnodes, i_alloctres = ix("AllocCPUS"), ix("AllocNodes"), ix("AllocTRES")
    i_maxrss, i_ntasks, i_totcpu, i_nnodes, i_comment = ix("MaxRSS"), ix("NTasks"), ix("TotalCPU"), ix("NNodes"), ix("Comment")
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
        elapsed_s = float(el) if el.isdigit() else _cached_duration(f[i_el])
        lim = f[i_limraw]
        if lim.isdigit():
            limit_s: float | None = int(lim) * 60.0
        elif lim:
            limit_s = None  # UNLIMITED, Partition_Limit
        else:
            limit_s = _cached_duration(f[i_lim])
        rq = f[i_reqtres]
        req_mem, req_gpus, tres_cpus, tres_nodes = _tres_summary(rq) if rq else (None, None, None, None)
        al = f[i_alloctres]
        _, alloc_gpus, alloc_tres_cpus, _ = _tres_summary(al) if al else (None, None, None, None)
        req_cpus = _int(f[i_reqcpus]) or tres_cpus
        nnodes = _int(f[i_nnodes])
        req_nodes = _int(f[i_reqnodes]) or tres_nodes or nnodes
        alloc_nodes = _int(f[i_allocnodes])
        if alloc_nodes is None and nnodes is not None and state not in ("PENDING", None):
            alloc_nodes = nnodes
        if req_mem is None:
            # no mem in the TRES: ReqMem, with its pre-21.08 per-node/per-CPU suffix
            req_mem, per = _cached_mem(f[i_reqmem])
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
            cpu_s=_cached_duration(f[i_totcpu]) if f[i_totcpu] else None,
            comment=f[i_comment] or None,
        )

    def step(job_id: str, f: list[str]) -> SacctStep:
        rc, sig = _exit_pair(f[i_exit])
        el = f[i_elraw]
        rss, _ = mem_to_mb(f[i_maxrss], bare_unit="")
        return SacctStep(
            step_id=job_id.split(".", 1)[1],
            state=normalize_state(f[i_state]),
            exit_code=rc,
            exit_signal=sig,
            max_rss_mb=rss,
            ntasks=_int(f[i_ntasks]),
            nnodes=_int(f[i_nnodes]),
            elapsed_s=float(el) if el.isdigit() else duration_s(f[i_el]),
            cpu_s=duration_s(f[i_totcpu]),
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
        raise SacctParseError(
            f"{where}:{lineno}: not sacct --parsable2 output (no JobID column in the header line)"
        )
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
                if current is None or _base_id(jid) != current_id:
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


# ---------------------------------------------------------------------------
# --json (22.05 and 23.11+ layouts)


def _num(v: Any) -> float | None:
    """A JSON number in either layout: plain, or ``{set, infinite, number}``.

    Unset, infinite and Slurm's NO_VAL/INFINITE sentinels are None.
    """
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite", False):
            return None
        v = v.get("number")
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        iv = int(v)
        if iv in _NO_VAL32 or iv in _NO_VAL64:
            return None
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _inum(v: Any) -> int | None:
    f = _num(v)
    return None if f is None else int(f)


def _path(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _epoch(v: Any) -> float | None:
    t = _num(v)
    return t if t is not None and t > 0 else None


def _tres_list(items: Any) -> dict[str, float]:
    """``[{"type": "gres", "name": "gpu", "count": 1}, ...]`` -> ``{"gres/gpu": 1}``."""
    out: dict[str, float] = {}
    if not isinstance(items, list):
        return out
    for t in items:
        if not isinstance(t, dict):
            continue
        typ = t.get("type")
        if not typ:
            continue
        name = t.get("name")
        key = f"{typ}/{name}" if name else str(typ)
        c = _num(t.get("count"))
        if c is not None:
            out[key] = c
    return out


def _json_gpus(tres: dict[str, float]) -> int | None:
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    typed = [v for k, v in tres.items() if k.startswith("gres/gpu:")]
    if typed:
        return int(sum(typed))
    if "gres" in tres:  # 22.05 sometimes drops the gres name: only GPUs are accounted here
        return int(tres["gres"])
    return None


def _json_exit(ec: Any, state: str | None) -> tuple[int | None, int | None]:
    """(return code, signal) from either layout's exit_code object."""
    if not isinstance(ec, dict):
        return None, None
    status = ec.get("status")
    if isinstance(status, list):
        status = status[0] if status else None
    sig = _path(ec, "signal", "signal_id")
    if sig is None:
        sig = _path(ec, "signal", "id")
    signal = _inum(sig)
    rc_raw = ec.get("return_code")
    rc = _inum(rc_raw)
    if status == "SIGNALED":
        return (rc if rc is not None else 0), signal
    if status == "PENDING":
        return None, None
    if signal is None:
        signal = 0  # exited normally, as -P prints it ("1:0")
    if status == "SUCCESS" and not isinstance(rc_raw, dict) and state not in ("COMPLETED", None):
        # 22.05 prints every normal exit as SUCCESS/0: the real code is lost
        return None, signal
    return rc, signal


def _cpu_seconds(t: Any) -> float | None:
    if not isinstance(t, dict):
        return None
    s = _num(t.get("seconds"))
    us = _num(t.get("microseconds"))
    if s is None and us is None:
        return None
    return (s or 0.0) + (us or 0.0) / 1e6


def _step_name(step: dict[str, Any]) -> str:
    sid = _path(step, "step", "id")
    if isinstance(sid, dict):  # 23.02: {"job_id":..., "step_id": ...}
        sid = sid.get("step_id", sid.get("id"))
    if isinstance(sid, str):
        return sid.rsplit(".", 1)[-1] if "." in sid else sid
    if isinstance(sid, (int, float)):
        return str(int(sid))
    name = _path(step, "step", "name")
    return str(name) if name else "?"


def _json_step(step: dict[str, Any]) -> SacctStep:
    state = normalize_state(step.get("state"))
    rc, sig = _json_exit(step.get("exit_code"), state)
    req = _path(step, "tres", "requested") or {}
    mx = _tres_list(req.get("max"))
    tot = _tres_list(req.get("total"))
    max_b = mx.get("mem")
    tot_b = tot.get("mem")
    return SacctStep(
        step_id=_step_name(step),
        state=state,
        exit_code=rc,
        exit_signal=sig,
        max_rss_mb=None if max_b is None else max_b / (1024 * 1024),
        tot_rss_mb=None if tot_b is None else tot_b / (1024 * 1024),
        ntasks=_inum(_path(step, "tasks", "count")),
        nnodes=_inum(_path(step, "nodes", "count")),
        elapsed_s=_num(_path(step, "time", "elapsed")),
        cpu_s=_cpu_seconds(_path(step, "time", "total")),
    )


def _json_job_id(j: dict[str, Any]) -> str:
    raw = _inum(j.get("job_id"))
    arr_job = _inum(_path(j, "array", "job_id"))
    het_job = _inum(_path(j, "het", "job_id"))
    if arr_job:
        task = _inum(_path(j, "array", "task_id"))
        if task is not None:
            return f"{arr_job}_{task}"
        spec = _path(j, "array", "task")
        if spec:
            return f"{arr_job}_[{spec}]"
    if het_job:
        off = _inum(_path(j, "het", "job_offset"))
        if off is not None:
            return f"{het_job}+{off}"
    if raw is None:
        raise SacctParseError("a job without job_id")
    return str(raw)


def _json_job(j: dict[str, Any]) -> SacctJob:
    state = normalize_state(_path(j, "state", "current"))
    rc, sig = _json_exit(j.get("exit_code"), state)
    steps = [_json_step(s) for s in j.get("steps") or [] if isinstance(s, dict)]
    req_tres = _tres_list(_path(j, "tres", "requested"))
    alloc_tres = _tres_list(_path(j, "tres", "allocated"))
    req_cpus = _inum(_path(j, "required", "CPUs"))
    req_nodes = _inum(req_tres.get("node"))
    alloc_nodes = _inum(j.get("allocation_nodes")) or _inum(alloc_tres.get("node"))
    if state == "PENDING":
        alloc_nodes = None
    req_mem = req_tres.get("mem")
    if req_mem is None:
        per_cpu = _num(_path(j, "required", "memory_per_cpu"))
        per_node = _num(_path(j, "required", "memory_per_node"))
        if per_cpu:
            req_mem = per_cpu * (req_cpus or 1)
        elif per_node:
            req_mem = per_node * (req_nodes or 1)
        else:
            # 22.05: ambiguous (per node or per CPU); per node is --mem, the common case
            legacy = _num(_path(j, "required", "memory"))
            if legacy:
                req_mem = legacy * (req_nodes or 1)
    if req_mem is not None and req_mem <= 0:
        req_mem = None
    limit_min = _num(_path(j, "time", "limit"))
    step_cpu = [s.cpu_s for s in steps if s.cpu_s is not None]
    job_cpu = _cpu_seconds(_path(j, "time", "total"))
    cpu_s = sum(step_cpu) if step_cpu else job_cpu
    if job_cpu and (cpu_s is None or job_cpu > cpu_s):
        cpu_s = job_cpu
    comment = _path(j, "comment", "job")
    return SacctJob(
        job_id=_json_job_id(j),
        cluster=j.get("cluster") or None,
        user=j.get("user") or None,
        group=j.get("group") or None,
        account=j.get("account") or None,
        partition=j.get("partition") or None,
        job_name=j.get("name") or None,
        state=state,
        exit_code=rc,
        exit_signal=sig,
        submit_time=_epoch(_path(j, "time", "submission")),
        start_time=_epoch(_path(j, "time", "start")),
        end_time=_epoch(_path(j, "time", "end")),
        elapsed_s=_num(_path(j, "time", "elapsed")),
        limit_s=None if limit_min is None else limit_min * 60.0,
        req_mem_mb=req_mem,
        req_cpus=req_cpus,
        req_nodes=req_nodes,
        req_gpus=_json_gpus(req_tres),
        alloc_cpus=_inum(alloc_tres.get("cpu")),
        alloc_nodes=alloc_nodes,
        alloc_gpus=_json_gpus(alloc_tres),
        cpu_s=cpu_s,
        comment=comment if isinstance(comment, str) and comment else None,
        steps=steps,
    )


def json_layout(doc: dict[str, Any]) -> str:
    """Which layout a ``sacct --json`` document uses: ``"22.05"`` or ``"23.11+"``.

    Decided by the data itself (``state.current`` string vs list), falling
    back to the plugin name in ``meta`` for an empty job list.
    """
    for j in doc.get("jobs") or []:
        cur = _path(j, "state", "current")
        if isinstance(cur, list):
            return "23.11+"
        if isinstance(cur, str):
            return "22.05"
    plugin = json.dumps(doc.get("meta", {}))
    return "22.05" if "v0.0.38" in plugin or "v0.0.37" in plugin else "23.11+"


def parse_json(text: str | bytes | dict[str, Any], where: str = "sacct --json") -> list[SacctJob]:
    """Every job run of a ``sacct --json`` document (either layout).

    Raises SacctParseError when the text is not JSON or has no job list;
    sacct's own ``errors`` entries are reported the same way.
    """
    if isinstance(text, dict):
        doc = text
    else:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise SacctParseError(f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SacctParseError(f"{where}: no 'jobs' list in the JSON document")
    errors = [e for e in doc.get("errors") or [] if e]
    if errors and not doc["jobs"]:
        first = errors[0]
        msg = first.get("description") or first.get("error") if isinstance(first, dict) else str(first)
        raise SacctParseError(f"{where}: sacct reported an error: {msg}")
    out: list[SacctJob] = []
    runs: dict[str, int] = {}
    for i, j in enumerate(doc["jobs"]):
        if not isinstance(j, dict):
            raise SacctParseError(f"{where}: jobs[{i}] is not an object")
        try:
            job = _json_job(j)
        except SacctParseError as exc:
            raise SacctParseError(f"{where}: jobs[{i}]: {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise SacctParseError(f"{where}: jobs[{i}] unreadable ({exc})") from None
        n = runs.get(job.job_id, 0) + 1
        runs[job.job_id] = n
        job.run = n
        out.append(job)
    return out
