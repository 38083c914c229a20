"""``sacct --json`` -> ``SacctJob``s, in both layouts Slurm has printed.

* the 22.05 layout (openapi/dbv0.0.38): ``state.current`` a string,
  ``time.limit`` minutes, plain integers;
* the 23.11+ layout (data_parser v0.0.40 and later): ``state.current`` a list,
  numbers wrapped as ``{set, infinite, number}``,
  ``required.memory_per_cpu``/``memory_per_node``, step ids like ``"12.batch"``.

``json_layout`` tells them apart by the data itself; one reader handles both,
since they differ only in how values are wrapped.

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
* A step's MaxRSS is the largest single task's RSS (``tres.requested.max``
  ``mem``, in bytes).  Its GPU memory peak, where Slurm gathers it, is the
  ``gres``/``gpumem`` item of the same list, in bytes as well (TRESUsageInMax
  in the text output).
* Timestamps are epoch seconds.
"""

from __future__ import annotations

import json
from typing import Any

from harpd import access
from harpd.slurm.sacct_records import SacctJob, SacctParseError, SacctStep, normalize_state

__all__ = ["parse_json", "json_layout"]

# Slurm's 32-bit "not set" / "infinite" markers, as the 22.05 JSON prints them
_NO_VAL32 = {0xFFFFFFFE, 0xFFFFFFFF}
_NO_VAL64 = {0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF}


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
    gpumem_b = mx.get("gres/gpumem")
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
        max_gpumem_mb=None if gpumem_b is None else gpumem_b / (1024 * 1024),
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


def owner_name(j: dict[str, Any]) -> str | None:
    """The job's owner: ``user``, else the association's user, else the passwd name of ``uid``.

    22.05 prints ``"user": null`` for a user without an association; its
    uid (where the JSON has one) still names them.  None only when nothing
    does: the backend then asks ``sacct -P`` (``CliBackend``).
    """
    for name in (j.get("user"), _path(j, "association", "user")):
        if isinstance(name, str) and name:
            return name
    uid = j.get("uid", j.get("user_id"))
    if isinstance(uid, int) and not isinstance(uid, bool) and uid >= 0:
        return access.user_of(uid) or str(uid)
    return None


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
        user=owner_name(j),
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
        msgs = [str((e.get("description") or e.get("error")) if isinstance(e, dict) else e) for e in errors]
        if all("nothing found" in m.lower() for m in msgs):
            return []  # no run matches (a job accounting has not recorded yet): an answer, not a failure
        raise SacctParseError(f"{where}: sacct reported an error: {msgs[0]}")
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
