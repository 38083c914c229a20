"""The daemon's predictor: champion models + live history → Decision.

Kept apart from the guard rails (``allocation``) so that replay and training,
which need only the rails, never pull in the daemon's request path.

A workflow task (``harpd.features.workflow``: a Snakemake rule, a Nextflow
process) is never sized by the models, whose features mix the user's other
rules.  Its memory is sized by ``task_memory`` (its type's own model once a
run of it has finished, before that a calibrated share of its own request
learnt across the other types: what wins ``harp replay``, which calls this
predictor); its time by the history rule from its own rule's runs.

Before a resource has a trained model, its live history is kept all the
same and the history rule sizes a program from its own runs: ``MARGIN`` ×
the most its last five finished runs used, through the same guard rails
(``min_history``, the floor, the leave-alone ratio, the walk-back floor,
never above the request), and never while a recent run hit its limit or did
not complete (``harpd.features.usage``: such a run is a lower bound).  A
site that has just started harpd thus right-sizes a repeated program after
a handful of runs instead of a day later.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time as _time
from typing import TYPE_CHECKING, Any

from harp_submit.units import format_mem
from harpd.features.history import COL, KEEP, History, JobKeys, conformal_group, keys_of, keys_of_record
from harpd.features.resources import gpu_count
from harpd.features.signature import normalise_commands
from harpd.features.usage import RecentRuns, usage_of
from harpd.features.workflow import TaskIdentity, identify, is_workflow_signature, job_signature
from harpd.models.base import float32_row, predict_row
from harpd.models.envelope import ModelEnvelope
from harpd.predict.allocation import MARGIN, Guard
from harpd.predict.cores import CoresHistory, cut_bounds, run_cores, slowdown, time_share
from harpd.predict.decide import BoundSource, KernelInput, RetryLeast, rule_of, shape_of
from harpd.predict.decide import decide as decide_resource
from harpd.predict.queue_policy import view_of
from harpd.predict.queue_view import QueueView
from harpd.predict.restore import Restored, cut_resources, restored_by, restoring_outcome
from harpd.predict.retry_floor import Floor, RetryFloors
from harpd.predict.soft import SoftPolicy, recent_bound, running_bound, soft_guard, stake_of, tilt
from harpd.predict.soft_state import SoftState
from harpd.predict.task_memory import TaskMemory
from harpd.predict.time_options import kept_under_soft_limits
from harpd.protocol import Change, Decision, JobRequest, Limits, Resources
from harpd.records import JobRecord, ModelRow, Submission
from harpd.slurm.job_ids import submitted_id
from harpd.slurm.partitions import LimitsLookup, cached_partitions, limits_for, limits_from_partitions

if TYPE_CHECKING:
    from collections.abc import Callable

    from harpd.config import HarpSettings
    from harpd.slurm.base import PartitionInfo, SlurmBackend
    from harpd.store import Store

log = logging.getLogger("harpd.decide")


HISTORY_JOBS = 200_000  # finished jobs replayed into the live history at load
LEARNT_KEEP_S = 86400.0  # how long a run handed over by ``learn`` is remembered, so a repeated poll learns it once
HISTORY_RULE = "history"  # the name decisions carry where no model is trained (the history rule)
NO_MODEL = "no trained model yet"


def _history_rule(resource: str) -> ModelEnvelope:
    """The envelope of a resource with no trained model: the history rule sizes it from its own runs."""
    return ModelEnvelope(model=None, name=HISTORY_RULE, resource=resource, relative=True)


class _Champion:
    """One resource's champion (``model`` None: none yet, the history rule) and its live history.

    ``log_bound`` in the decision code is the upper bound it gives, on a log scale (of need / request
    where ``relative``).
    """

    def __init__(self, env: ModelEnvelope, row: ModelRow | None) -> None:

        self.model = env.model
        self.name = env.name
        self.relative = env.relative
        self.resource = env.resource
        self.row = row
        self.history = History()
        self.recent = RecentRuns(KEEP)  # the history rule's own evidence, per signature group (no cancelled runs)


@dataclasses.dataclass(frozen=True, slots=True)
class _RecentEvidence:
    """What the history rule reads of a group's last runs, copied under the predictor's lock."""

    ran_out: bool
    stopped: bool
    most: float | None

    @classmethod
    def of(cls, recent: RecentRuns, key: str) -> _RecentEvidence:
        return cls(recent.ran_out(key), recent.stopped(key), recent.most(key))


@dataclasses.dataclass(frozen=True, slots=True)
class _Seen:
    """What one resource's decision read of the job and its history (gathered under the lock)."""

    x: list[float]  # the job's history features
    keys: JobKeys
    n_hist: int
    recent: _RecentEvidence
    req: float | None
    cores: int
    task: bool  # a workflow task: sized from its own rule's runs
    mem_task: bool  # a workflow task's memory: sized by task_memory
    soft: bool  # its time under soft limits
    policy: SoftPolicy | None  # the soft policy when soft (built once per decision)
    sig: str | None  # the job's signature


@dataclasses.dataclass(frozen=True, slots=True)
class _Ask:
    """One submission as every resource's decision sees it: the same for time and memory."""

    job: JobRequest
    user: str
    limits: Limits
    now: float
    sig: str | None  # the job's signature, once per request
    retry: Floor | None  # a workflow manager's retry or a failure's floor
    dry_run: bool  # the same answer, the submission not counted
    manager_inside: bool  # a workflow manager runs inside this job (Snakemake)


class ModelPredictor:
    """``decide(job, user, uid) -> Decision`` from the store's champion models.

    Fast path (every sbatch): a few dict look-ups for the history features,
    one tree-ensemble prediction per resource, the guard rails.  Slow work
    (loading models, replaying history from the store) happens at
    ``reload()``, never in a request.  After that, outcomes reach the live
    history one way: the ingest poller hands each poll's new ones to ``learn``.
    Thread-safe: history updates are under a lock; models are read-only.
    """

    name = "harp"

    def __init__(
        self,
        settings: HarpSettings,
        store: Store | None = None,
        limits: LimitsLookup | None = None,
        models: dict[str, ModelEnvelope] | None = None,
        soft_limits: bool = False,
    ) -> None:
        self.settings = settings
        # under soft limits with predict.queue_rule on, the kernel weighs each time cut against the queue
        # (harpd.predict.queue_policy) as the watcher last listed it (soft_state.queue)
        self._queue_rule = bool(soft_limits and settings.predict.queue_rule)
        # soft limits (a privileged harpd extends jobs up to the user's request,
        # harpd.watch): the time limit is cut deeper, by harpd.predict.soft's policy
        self.soft_limits = bool(soft_limits)
        self.store = store
        # the budget scale, siblings in flight and usual stake the soft policy
        # reads (fed by harpd.watch); None without soft limits
        self.soft_state: SoftState | None = (
            SoftState(SoftPolicy.from_settings(settings.predict, settings.watch), store) if self.soft_limits else None
        )
        self._limits = limits
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # one history load at a time (``load_history``)
        self._loaded: dict[str, _Champion] = {}
        self._cores = CoresHistory()  # per signature, the cores its last runs used (harpd.predict.cores)
        self._restored = Restored()  # per signature, what a failed run after a cut gave back (harpd.predict.restore)
        self._tasks = TaskMemory()  # workflow task types' memory (harpd.predict.task_memory)
        self._retries = RetryFloors(store, settings.recovery.max_attempts)  # a manager's retry's floor
        # runs ``learn`` added (source, job id, attempt) -> when: a load skips them, a repeat is not learnt again
        self._learnt: dict[tuple[str, str, int], float] = {}
        if models is not None:  # tests and benchmarks: envelopes given directly
            for res, env in models.items():
                self._loaded[res] = _Champion(env, None)
        elif store is not None:
            self.reload()

    # -- loading ---------------------------------------------------------------
    def reload(self) -> dict[str, Any]:
        """Load the champions and rebuild the live history from the store."""
        from harpd.models.persistence import ModelFileError, load_model

        loaded: dict[str, _Champion] = {}
        want = self.settings.predict.predictor
        for res in ("time", "mem"):
            row = self._pick(res, want)
            if row is None:
                continue
            try:
                env = load_model(row.path)
            except ModelFileError as exc:
                log.warning("%s model not loaded: %s", res, exc)
                continue
            loaded[res] = _Champion(env, row)
        for res in ("time", "mem"):
            if res not in loaded:  # no model yet: keep the history for the history rule
                loaded[res] = _Champion(_history_rule(res), None)
        with self._lock:
            self._loaded = loaded
        self.load_history()
        return {
            res: {"name": champion.name, "path": champion.row.path if champion.row else None}
            for res, champion in loaded.items()
            if champion.model is not None
        }

    def trained_on(self) -> int | None:
        """The most jobs a loaded champion learnt from; None without any (the retrain trigger asks)."""
        ns = [
            int((champion.row.n_train if champion.row else 0) or 0)
            for champion in self._loaded.values()
            if champion.model is not None
        ]
        return max(ns) if ns else None

    @classmethod
    def history_only(
        cls, settings: HarpSettings, store: Store | None = None, resources: tuple[str, ...] = ("time", "mem")
    ) -> ModelPredictor:
        """A predictor with no trained model (the history and task rules), fed by ``learn``: ``harp replay``'s harp."""
        return cls(settings, store=store, models={res: _history_rule(res) for res in resources})

    def has_model(self) -> bool:
        return any(champion.model is not None for champion in self._loaded.values())

    def _pick(self, resource: str, want: str) -> ModelRow | None:
        assert self.store is not None  # reload() picks models only from a store
        if want == "auto":
            return self.store.champion(resource)
        rows = [m for m in self.store.models() if m.resource == resource and m.name == want]
        return rows[-1] if rows else None

    def load_history(self, limit: int = HISTORY_JOBS) -> int:
        """The live history afresh from the store's ``limit`` most recent finished jobs (at load).

        Only ``reload`` (and a predictor given its models, in tests and
        benchmarks) reads the store: from then on ``learn`` is how outcomes
        arrive.  Runs ``learn`` hands over while the store is read are skipped
        by the read, so none is counted twice.
        """
        if self.store is None or not self._loaded:
            return 0
        with self._load_lock:
            with self._lock:
                self._cores = CoresHistory()
                self._restored = Restored()
                self._tasks = TaskMemory()
                self._learnt = {}
                for champion in self._loaded.values():
                    champion.history = History()
                    champion.recent = RecentRuns(KEEP)
            # only the most recent ``limit`` finished jobs: older ones have aged out of every window
            n = self.store.count_jobs(time_field="end_time")
            it = self.store.iter_jobs(order="end_time", time_field="end_time")
            for _ in range(max(n - limit, 0)):
                next(it, None)
            n_added = 0
            batch: list[JobRecord] = []
            for rec in it:
                if _run_key(rec) in self._learnt:
                    continue  # the poller handed it over already (``learn``)
                batch.append(rec)
                if len(batch) >= 5000:
                    n_added += self._add(batch)
                    batch = []
            return n_added + self._add(batch)

    def learn(self, records: list[JobRecord]) -> int:
        """Outcomes the ingest poller has just stored: in the history before the next decision.

        The poller calls this as it stores new outcomes (just before its
        commit, so no history load can read a run before it is marked here),
        so the very next request is decided with them.  A run handed over
        again (a poll whose commit failed and is repeated) is learnt once.
        """
        if not self._loaded:
            return 0
        fresh = []
        now = _time.monotonic()
        with self._lock:
            while self._learnt:  # oldest first: a repeated poll comes within ingest's longest back-off
                oldest = next(iter(self._learnt))
                if now - self._learnt[oldest] < LEARNT_KEEP_S:
                    break
                del self._learnt[oldest]
            for r in records:
                key = _run_key(r)
                if key in self._learnt:
                    continue
                self._learnt[key] = now
                fresh.append(r)
        return self._add(fresh)

    def _add(self, records: list[JobRecord]) -> int:
        if not records:
            return 0
        cut = self._cuts_that_failed(records)  # store reads, outside the lock
        with self._lock:
            for r in records:
                self._cores.add(r.signature, run_cores(r), time_share(r))
                if is_workflow_signature(r.signature):
                    self._tasks.learn(r)
            self._restored.add_all(cut)
            for champion in self._loaded.values():
                h = champion.history
                for r in records:
                    u = usage_of(r, champion.resource)
                    if u is None:
                        continue
                    k = keys_of_record(r, champion.resource, champion.relative)
                    h.add(k, u.used, u.request, u.ran_out, r.end_time)  # the features, as training has them
                    h.finished(k)
                    champion.recent.add(k.sig, r, u)
        return len(records)

    def _cuts_that_failed(self, records: list[JobRecord]) -> list[tuple[str, str]]:
        """(signature, resource) of each run here that failed after harp had cut that resource (``restore``)."""
        if self.store is None:
            return []
        out: list[tuple[str, str]] = []
        for r in records:
            if r.signature and r.harp_sized and restoring_outcome(r.outcome):
                out += [(r.signature, res) for res in restored_by(r.outcome, cut_resources(self._submission(r)))]
        return out

    def _submission(self, r: JobRecord) -> Submission | None:
        try:
            assert self.store is not None  # _cuts_that_failed asks only with a store
            return self.store.get_submission(r.job_id) or self.store.get_submission(submitted_id(r.job_id))
        except Exception:  # a store that cannot answer restores nothing for this run
            log.exception("reading the submission of job %s failed", r.job_id)
            return None

    # -- the request path ------------------------------------------------------------
    def decide(
        self, job: JobRequest, user: str, uid: int, now: float | None = None, *, dry_run: bool = False
    ) -> Decision:
        """The decision for one submission; ``now``: the replay's simulated clock (None: the wall clock);
        ``dry_run``: the same answer, but the submission is not counted."""

        now = _time.time() if now is None else float(now)
        partition = job.partition or job.request.partition
        limits = limits_for(self._limits, partition)
        if not self._loaded:
            return Decision(changes=[], limits=limits, model=None, explain={"reason": f"{NO_MODEL}: request kept"})
        changes: list = []
        explain: dict[str, Any] = {}
        models_used: list[str] = []
        sig = _signature(job)  # once per request: every resource and the cores rule group by it
        task = identify(job.commands, job.job_name, job.script_name, job.cwd, job.function)
        if task is not None and job.input_bytes is not None and not task.inputs_seen:
            # a Snakemake job's command names the Snakefile, submitit's its folder: not the task's inputs
            explain["input_bytes_ignored"] = f"{job.input_bytes} bytes of the files its command names, not its inputs"
            job = job.model_copy(update={"input_bytes": None})
        retry = self._retry_floor(uid, task, now, explain, sig, job)
        tolerance = self.settings.predict.cores_tolerance
        cores_change, explain["cores"] = self._cores_change(job, sig, task, retry, tolerance)
        slow = float(explain["cores"].get("slowdown", 1.0)) if cores_change else 1.0
        if slow > 1.0 and "time" not in self._loaded:  # no time decided: nothing would make room for it
            cores_change, explain["cores"] = self._cores_change(job, sig, task, retry, 0.0)
            slow = 1.0
        given = int(cores_change["value"]) if cores_change else None
        ask = _Ask(job, user, limits, now, sig, retry, dry_run, task is not None and task.manager_inside)
        for res, champion in self._loaded.items():
            try:
                ch, ex = self._decide_resource(ask, res, champion, given, slow if res == "time" else 1.0)
            except Exception as exc:  # one resource failing must not lose the other
                log.exception("predicting %s failed", res)
                ch, ex = None, {"reason": f"prediction failed: {exc}"}
            if res == "time" and slow > 1.0 and ch is None:
                ratio = None  # no time asked: the partition's default holds the run, which harp does not know
                if job.request.time_s:
                    ratio = ex.get("bound_ratio")
                    if ratio is None:  # no time decided (cold start): the share of the request its runs took
                        with self._lock:
                            ratio = self._cores.time_share_bound(sig, self.settings.predict.alpha_time, MARGIN)
                held = _request_holds(ratio, slow)
                if held is None:  # harp never raises a time request: the cores may slow nothing then
                    cores_change, explain["cores"] = self._cores_change(job, sig, task, retry, 0.0)
                    explain["cores"]["tolerance_dropped"] = (
                        "the time request may not hold a run made slower by fewer cores, and harp never raises it"
                    )
                    slow, given = 1.0, (int(cores_change["value"]) if cores_change else None)
                else:
                    ex["slowdown_held"] = held
            explain[res] = ex
            if ch is not None:
                changes.append(Change(**ch))
                models_used.append(champion.name)
        if cores_change is not None:
            changes.append(Change(**cores_change))
            if job.request.mem_per_cpu_mb and not any(c.option in ("mem", "mem-per-cpu") for c in changes):
                changes.append(Change(**_total_mem(job.request)))
        explain["identity"] = identity_of(job, sig, task)
        if job.input_bytes is not None:
            explain["input_bytes"] = job.input_bytes  # harp_submit.input_size: the files the job names
        if not self.has_model():
            explain["reason"] = (
                f"{NO_MODEL}: sized from this program's own runs" if changes else f"{NO_MODEL}: request kept"
            )
        return Decision(
            changes=changes, limits=limits, model=",".join(sorted(set(models_used))) or None, explain=explain
        )

    @staticmethod
    def _soft_live(
        log_bound: float,
        template: str,
        cores: float,
        req: float,
        policy: SoftPolicy,
        state: SoftState,
        now: float,
        ex: dict[str, Any],
    ) -> float:
        """The bound with what the replay's walk adds (``soft.soft_starts``): running siblings, tilts, budget scale."""
        n_flight, longest = state.running(template, now)
        log_bound = running_bound(log_bound, longest, req, policy)
        stake = stake_of(cores, req)
        usual = state.usual_stake(stake)
        log_bound += state.scale + tilt(policy, n_flight, stake, usual)
        ex.update(state.explain(), siblings_running=n_flight, sibling_longest_s=round(longest))
        return log_bound

    @staticmethod
    def _history_bound(recent: _RecentEvidence, lref: float, margin: float) -> tuple[float | None, str]:
        """The history rule's bound (log need/request) from the signature's own runs, or None and why.

        ``margin`` × the most its last five runs used; none while one of its
        last runs ran out (killed at or filling its limit: it needed more than
        it had) or stopped early (failed: it ended before its program
        finished).  By how much either needed more, nobody knows.  Runs the
        manager or the user cancelled are not among them (``RecentRuns``).
        """

        if recent.ran_out:
            return None, "a recent run of this program hit its limit: request kept"
        if recent.stopped:
            return None, "a recent run of this program did not complete (its usage is only a lower bound): request kept"
        if recent.most is None:
            return None, "no usage recorded for this program's runs: request kept"
        return math.log(recent.most) - lref + math.log(margin), f"{margin:g} x the most of its last runs"

    def _retry_floor(
        self,
        uid: int,
        task: TaskIdentity | None,
        now: float,
        explain: dict[str, Any],
        sig: str | None = None,
        job: JobRequest | None = None,
    ) -> Floor | None:
        """The floor of a workflow manager's retry and of the task's failures (``harpd.predict.retry_floor``);
        a store fault gives none."""
        asked = (None, None) if job is None else (_asked_mem(job.request), job.request.time_s)
        try:
            floor = self._retries.floor(uid, task, now, sig if is_workflow_signature(sig) else None, asked)
        except Exception:  # the floor only raises sizes: without it the history rule still decides
            log.exception("reading a workflow task's earlier attempt failed")
            return None
        if floor is not None:
            explain["retry"] = {"reason": floor.reason, **floor.explain}
        return floor

    def _cores_change(
        self, job: JobRequest, sig: str | None, task: TaskIdentity | None, retry: Floor | None, tolerance: float
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The ``cpus-per-task`` change of a single-task job (``harpd.predict.cores``), or None and why not.

        ``tolerance``: how much longer the cores given may make the bound's run
        (``predict.cores_tolerance``, 0 where its time limit has no room); the
        explanation's ``slowdown`` is by how much, which the time limit adds.
        """
        rq = job.request
        requested = rq.cpus_per_task or 1
        if requested <= 1:
            return None, {"reason": "one CPU asked: kept"}
        if not self.settings.predict.allow_shrink:
            return None, {"reason": "predict.allow_shrink is off: kept"}
        unsafe, floor = cut_bounds(rq.ntasks, rq.nodes, job.commands or [], task.manager if task else None)
        if unsafe is not None:
            return None, {"reason": unsafe}
        if retry is not None and retry.keep_cpus:
            return None, {"reason": retry.keep_cpus}
        alpha = self.settings.predict.alpha_cpus
        with self._lock:
            if self._restored.has(sig, "cpus"):
                return None, {"reason": Restored.reason("CPUs")}
            given, ex = self._cores.decide(sig, requested, alpha, tolerance)
        if given is not None and given < floor:
            ex["step_cpus"] = floor
            ex["reason"] += f"; its steps ask for {floor} CPUs"
            given = floor if floor < requested else None
            slow = slowdown(ex.get("bound_cores"), given)  # on the step's cores now (1.0: none given)
            if slow > 1.0:
                ex["slowdown"] = slow
            else:
                ex.pop("slowdown", None)
        if given is None:
            return None, ex
        ex["unseen_steps"] = (
            "a job step in a program the script calls is not seen here: "
            "its first failed run gives the CPUs back for good"
        )
        return {
            "option": "cpus-per-task",
            "value": str(given),
            "old": str(requested),
            "reason": f"cores from this program's own runs ({ex['reason']})",
        }, ex

    @staticmethod
    def _keys(
        job: JobRequest, user: str, res: str, relative: bool, sig: str | None, given: int | None = None
    ) -> tuple[int, int, float | None, JobKeys]:
        """(cores, nodes, request of ``res``, grouping keys) of a job request: one place for both callers.

        ``given``: the CPUs per task harp gives (a lowered ``--cpus-per-task``):
        the job is predicted for those cores, its memory stays the request's
        total (``--mem-per-cpu`` becomes ``--mem``, it does not shrink).
        """

        rq = job.request
        cores = (rq.cpus_per_task or 1) * (rq.ntasks or 1)
        nodes = rq.nodes or 1
        gpus = gpu_count(rq.gpus, rq.gres)
        mem_job = None
        if rq.mem_mb:
            mem_job = float(rq.mem_mb) * nodes  # --mem is per node
        elif rq.mem_per_cpu_mb:
            mem_job = float(rq.mem_per_cpu_mb) * cores
        if res == "time":
            req, other = (float(rq.time_s) if rq.time_s else None), mem_job
        else:
            req, other = mem_job, (float(rq.time_s) if rq.time_s else None)
        keys = keys_of(
            user,
            job.account,
            sig,
            job.job_name,
            req if relative else None,
            cores if given is None else given * (rq.ntasks or 1),
            job.array_size,
            other,
            gpus,
            job.input_bytes,
        )
        return cores, nodes, req, keys

    def template_of(self, job: JobRequest, user: str) -> str | None:
        """The time template (same user, request, cores) of a registered job: the watcher groups running jobs by it."""
        champion = self._loaded.get("time")
        relative = True if champion is None else champion.relative
        _, _, req, keys = self._keys(job, user, "time", relative, _signature(job))
        return keys.req if req else None

    def _bound(
        self, job: JobRequest, res: str, champion: _Champion, seen: _Seen, now: float
    ) -> tuple[float, float | None, str, dict[str, Any]] | dict[str, Any]:
        """The bound (log need/request), θ, the reason's opening words and the rule's explanation; or why none.

        A workflow task's memory from its type (``task_memory``); a program
        without a model, or a workflow task, from its own runs (the history
        rule); else the champion's prediction (under soft limits the soft
        policy's start bound and what the watcher knows).
        """
        n_hist, req, task = seen.n_hist, seen.req, seen.task
        ex: dict[str, Any] = {}
        if seen.mem_task:
            with self._lock:
                mb, rule = self._tasks.size(seen.sig, job.input_bytes, req)
            if mb is None or mb <= 0 or not req:
                return {"model": None, "rule": "task memory", "n_history": n_hist, "reason": rule}
            ex.update(rule="task memory", source=rule)
            return math.log(mb / req), None, f"memory of this workflow task type: {rule}", ex
        if champion.model is None or task:
            margin = seen.policy.recent_margin if seen.policy is not None else MARGIN
            history_bound, rule = self._history_bound(seen.recent, math.log(seen.keys.ref), margin)
            if history_bound is None:
                return {"model": None, "rule": HISTORY_RULE, "n_history": n_hist, "reason": rule}
            why_rule = "this workflow task's own runs" if task else f"this program's own runs ({NO_MODEL})"
            ex.update(rule=HISTORY_RULE, source=why_rule)
            reason = (
                f"{res} from this workflow task's own {n_hist} runs ({rule})"
                if task
                else f"{res} from this program's own {n_hist} runs ({rule}; {NO_MODEL})"
            )
            return history_bound, None, reason, ex
        x = seen.x
        group = conformal_group(job.partition or job.request.partition, x[COL["log_pending"]])
        log_bound = predict_row(champion.model, float32_row(x), group)
        if seen.soft and (policy := seen.policy) is not None:
            log_bound, rule = recent_bound(x, log_bound, policy)
            ex.update(policy.explain(), soft_rule=rule)
            if self.soft_state is not None and req:
                state = self.soft_state
                log_bound = self._soft_live(log_bound, seen.keys.req, seen.cores, req, policy, state, now, ex)
        # n_hist counts this program's own finished runs; with none the model still predicts,
        # from the runs of others like it (same user, request, cores): say so, not "0 similar runs"
        reason = (
            f"{champion.name}: {res} bound from {n_hist} runs of this program"
            if n_hist
            else f"{champion.name}: {res} bound from runs like it (no finished run of this program yet)"
        )
        return log_bound, getattr(champion.model, "theta", None), reason, ex

    def _queue_view(self, now: float) -> QueueView | None:
        """The queue at this decision, or None: no rule asked for, or no recent listing (cut as without)."""
        if not self._queue_rule or self.soft_state is None:
            return None
        load = self.soft_state.queue()
        return None if load is None else view_of(load, now)

    def _decide_resource(
        self, ask: _Ask, res: str, champion: _Champion, given: int | None = None, slow: float = 1.0
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """One resource's change (or None) and its explanation.

        ``slow``: how much longer the cores harp gives may make the job
        (``predict.cores_tolerance``): its time limit is that much longer, and
        where that reaches the request the time is kept (and the caller
        gives cores that slow nothing).

        ``ask.manager_inside``: a workflow manager runs inside this job (Snakemake),
        so its memory is never cut below ``predict.manager_floor_mem_mb``: the
        manager's own process killed for memory fails the job where the
        end-of-job hook cannot see it, and the manager reports a failure.
        """

        job, user, limits, now, sig, retry = ask.job, ask.user, ask.limits, ask.now, ask.sig, ask.retry
        rq = job.request
        # a workflow task is sized from its own rule's runs only, model or not (the
        # model's features mix the user's other rules, which say nothing of this one),
        # by the history rule, which reads its runs relative to this request
        task = is_workflow_signature(sig)
        cores, nodes, req, keys = self._keys(job, user, res, champion.relative or task, sig, given)
        if champion.relative and not req:
            return None, {"reason": f"no {res} request to size"}
        with self._lock:
            x = champion.history.features(keys, now)
            n_hist = champion.history.count(keys, "s")
            if not ask.dry_run:
                champion.history.submitted(keys, now)
            restored = self._restored.has(sig, res)
            recent = _RecentEvidence.of(champion.recent, keys.sig)
        if restored:
            return None, {"reason": Restored.reason("memory" if res == "mem" else res), "n_history": n_hist}
        guard = Guard.from_settings(self.settings.predict, res, self.settings.recovery.max_attempts)
        floor_key = None  # the setting that set the floor, when not the resource's own
        if res == "mem" and ask.manager_inside and self.settings.predict.manager_floor_mem_mb > guard.floor:
            guard = dataclasses.replace(guard, floor=float(self.settings.predict.manager_floor_mem_mb))
            floor_key = "predict.manager_floor_mem_mb: the workflow manager itself runs in this job"
        soft = self.soft_limits and res == "time" and champion.relative and bool(req)
        if self.soft_limits and res == "time" and (kept := kept_under_soft_limits(rq)) is not None:
            return None, {"reason": kept}  # harpd extends such a job too late to keep its meaning
        policy = SoftPolicy.from_settings(self.settings.predict, self.settings.watch) if soft else None
        if policy is not None:
            guard = soft_guard(guard, policy)
            if guard.floor > float(self.settings.predict.floor_time_s):  # the soft policy's floor, not the setting
                floor_key = (
                    "the soft policy's least limit: the watcher's lead (watch.margin_s) and one interval "
                    "(watch.interval_s), in whole minutes"
                )
        mem_task = task and res == "mem"  # sized by task_memory, which needs no min_history
        if n_hist < guard.min_history and not mem_task:
            return None, {"reason": f"cold start: {n_hist} of {guard.min_history} runs", "n_history": n_hist}
        over = self.soft_state.user_over_budget(user) if policy is not None and self.soft_state is not None else None
        if over is not None and policy is not None:
            budget = policy.user_extension_budget
            return None, {
                "reason": f"{over[0]} of your last {over[1]} jobs harp cut outgrew its limit (over the "
                f"per-user budget of {budget:.0%}): your time request is kept",
                "n_history": n_hist,
            }
        seen = _Seen(x, keys, n_hist, recent, req, cores, task, mem_task, soft, policy, sig)
        bound = self._bound(job, res, champion, seen, now)
        if isinstance(bound, dict):
            return None, bound
        log_bound, theta, reason, ex = bound
        kind = rule_of(res)
        limit = kind.limit_of(limits, self.settings.recovery, nodes)
        least = None if retry is None else kind.least(retry)
        out = decide_resource(
            kind,
            KernelInput(
                request=req,
                log_bound=log_bound,
                n_history=n_hist,
                limit=limit,
                guard=guard,
                shape=shape_of(rq, cores, nodes, given, job.commands),
                theta=theta,
                prior=mem_task,  # the task rule is its own cold start (a prior before any run of the type)
                soft=soft,
                hard_cut_gain=self.settings.predict.hard_cut_gain,
                p_kill=self.settings.predict.alpha_time,
                floor_time_s=self.settings.predict.floor_time_s,
                retry=None if retry is None or least is None else RetryLeast(float(least), retry.reason),
                slowdown=slow,
                source=BoundSource(None if champion.model is None else champion.name, reason, ex, floor_key),
                queue=self._queue_view(ask.now) if res == "time" else None,
            ),
        )
        return (None if out.change is None else out.change.as_dict()), out.explanation.as_dict()


def _asked_mem(rq: Resources) -> float | None:
    """A request's total memory (MiB): what a floor never passes."""
    if rq.mem_mb:
        return float(rq.mem_mb * (rq.nodes or 1))
    if rq.mem_per_cpu_mb:
        return float(rq.mem_per_cpu_mb * (rq.cpus_per_task or 1) * (rq.ntasks or 1))
    return None


def _run_key(r: JobRecord) -> tuple[str, str, int]:
    """One run of one job in one source: what the history must hold once."""
    return (str(r.source), str(r.job_id), int(r.attempt or 1))


def _total_mem(rq: Resources) -> dict[str, Any]:
    """The ``--mem`` change that keeps a ``--mem-per-cpu`` request's total when its cores are lowered."""
    cores = (rq.cpus_per_task or 1) * (rq.ntasks or 1)
    assert rq.mem_per_cpu_mb is not None  # asked only of a --mem-per-cpu request
    return {
        "option": "mem",
        "value": format_mem(int(rq.mem_per_cpu_mb) * cores),
        "old": f"{format_mem(int(rq.mem_per_cpu_mb))} per CPU",
        "reason": f"memory kept as the total of {cores} CPUs, now that the job gets fewer",
    }


def _signature(job: JobRequest) -> str | None:
    """A job request's signature: the one harp-submit sent, else (workflow task, else commands) as the poller does."""
    return job.signature or job_signature(job.commands, job.job_name, job.script_name, job.cwd, job.function)


def identity_of(job: JobRequest, sig: str | None, task: TaskIdentity | None) -> dict[str, Any]:
    """What harp takes the job to be (``--harp-explain``): a workflow task, or a program by its commands.

    An array's tasks share one identity (their index, like a rule's wildcards,
    names an input, not a program); the explanation says how many there are.
    """
    array = {"array_tasks": job.array_size} if job.array_size else {}
    if job.signature:
        return {"signature": job.signature, **array}
    if task is not None:  # ``identify`` of the job, which ``decide`` has already made
        return {**task.explain(), **array}
    return {"program": normalise_commands(job.commands or []) or None, "signature": sig, **array}


def make_predictor(
    settings: HarpSettings,
    store: Store | None = None,
    backend: SlurmBackend | None = None,
    partitions: Callable[[], dict[str, PartitionInfo]] | None = None,
    soft_limits: bool = False,
) -> ModelPredictor:
    """The champion-backed predictor harpd.daemon.main wires in (no change until trained).

    ``partitions``: the daemon's shared (cached) ``backend.partitions()``, from
    which the partition limits are read; cached here from ``backend`` only
    when the caller has none.  ``soft_limits``: harpd is privileged and
    extends jobs before their limit (the soft policy sizes time; with
    ``predict.queue_rule`` on, against the queue the watcher lists).
    """
    if partitions is None and backend is not None:
        partitions = cached_partitions(backend)
    limits = None if partitions is None else limits_from_partitions(partitions)
    return ModelPredictor(settings, store=store, limits=limits, soft_limits=soft_limits)


def _request_holds(bound_ratio: Any, slow: float) -> str | None:
    """Why the time request kept holds a run ``slow`` times longer, or None when it may not.

    The owner's rule (#27): a task slowed within ``predict.cores_tolerance``
    never meets its limit because of harp's cut, hard limits included.  Where
    harp keeps the time asked, that holds when the time bound (need over
    request) stretched by the slowdown stays within the request; harp never
    raises a request instead (a time over a QOS's or partition's limit can
    leave a job pending that sbatch would have run), so elsewhere the cores are
    cut with no tolerance.
    """
    if not isinstance(bound_ratio, (int, float)) or not math.isfinite(bound_ratio) or bound_ratio <= 0:
        return None
    if bound_ratio * slow > 1.0:
        return None
    return f"the time request holds a run {slow - 1.0:.1%} slower (its bound is {bound_ratio:.0%} of it)"
