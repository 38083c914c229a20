"""The one record of a finished job that every part of harp speaks.

Importers (SWF, sacct exports), the sacct poller, the store, the models, the
replay and the reports all exchange ``JobRecord``: keeping a single shape means
a model trained on imported history sees exactly what it will see live.

Units are fixed here so nobody converts twice: seconds, MiB, counts.
``None`` means "unknown" (or, for a request, "no limit").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Annotated, Any, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harp_submit.decision import CHANGEABLE


class Outcome(str, Enum):
    """How a job ended, as harp classifies it (see ``harpd.slurm.classify``)."""

    COMPLETED = "completed"
    TIMEOUT = "timeout"
    OOM = "oom"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    RUNNING = "running"  # not finished yet: never used for training
    UNKNOWN = "unknown"

    @property
    def finished(self) -> bool:
        return self not in (Outcome.RUNNING, Outcome.UNKNOWN)


@dataclass(slots=True)
class JobRecord:
    """What a job asked for, what it got and what it used.

    ``censored_time``/``censored_mem`` mark usage that is only a lower bound:
    a job killed at its time limit (TIMEOUT) needed more time than it used; a
    job killed for memory needed more than its peak RSS.  Models must treat such
    values as "at least", never as the true need.
    """

    job_id: str
    source: str = "slurm"  # cluster name or trace file stem
    user: str | None = None
    account: str | None = None
    group: str | None = None
    partition: str | None = None
    job_name: str | None = None
    signature: str | None = None  # normalised command signature (features)
    submit_time: float | None = None  # epoch seconds
    start_time: float | None = None
    end_time: float | None = None
    outcome: Outcome = Outcome.UNKNOWN
    state: str | None = None  # raw scheduler state, for reports
    exit_code: int | None = None
    exit_signal: int | None = None
    req_time_s: float | None = None  # None: unlimited / unknown
    req_mem_mb: float | None = None  # per job (all nodes), MiB
    req_cpus: int | None = None  # total cores
    req_nodes: int | None = None
    req_gpus: int | None = None
    alloc_cpus: int | None = None
    alloc_nodes: int | None = None
    alloc_gpus: int | None = None
    used_time_s: float | None = None  # elapsed wall time
    used_mem_mb: float | None = None  # peak RSS over steps (per job)
    used_cpu_s: float | None = None  # total CPU time
    input_bytes: float | None = None  # bytes the job read (Nextflow's rchar): workflow tasks' input size
    used_gpumem_mb: float | None = None  # peak GPU memory per GPU (gres/gpumem, where Slurm gathers it)
    array_size: int | None = None
    censored_time: bool = False
    censored_mem: bool = False
    harp_sized: bool = False  # submitted through harp with a changed request
    attempt: int = 1  # 1 for a first run; >1 for harp resubmissions

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobRecord:
        """A record from a row or JSON object (unknown keys ignored, the outcome and flags converted)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "outcome" in kw and not isinstance(kw["outcome"], Outcome):
            kw["outcome"] = Outcome(kw["outcome"])
        for b in ("censored_time", "censored_mem", "harp_sized"):
            if b in kw:
                kw[b] = bool(kw[b])
        return cls(**kw)


# --------------------------------------------------------------------------
# the store's rows of harpd's own bookkeeping, as frozen records
#
# The store decodes its JSON columns once and hands these out, so watch/,
# recovery/, ingest/ and report/ read named attributes instead of string keys
# (a typo is an AttributeError at the first test, not a silent None).  They
# live here, below the store and its readers, so both may import them.


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


_Model = TypeVar("_Model", bound=BaseModel)


def kept_as_stored(cls: type[_Model], d: Mapping[str, Any]) -> _Model:
    """``cls`` validated from a stored object, as the socket validates it; one this harpd would refuse
    (another version wrote it) is kept as stored, its known fields only, rather than lost: readers convert."""
    try:
        return cls.model_validate(d)
    except ValidationError:
        return cls.model_construct(**{k: d.get(k) for k in cls.model_fields})


_Str = Annotated[str, Field(max_length=4096)]
_Count = Annotated[int, Field(ge=0, le=10_000_000)]
_Seconds = Annotated[int, Field(ge=0, le=10 * 365 * 86400)]

# the options a decision may change: harp-submit's list, the one that validates
# what harpd sends, so the daemon can never emit a change the client refuses
ChangeOption = Literal[CHANGEABLE]  # type: ignore[valid-type]


class Resources(BaseModel):
    """A resource request; None = not given.  Seconds and MiB, as in JobRecord.

    The one shape of a request's resources in harpd: the socket's (``protocol``
    validates what harp-submit sends with it), the store's
    (``submissions.original`` / ``.submitted``) and recovery's.  Frozen: a
    record read from the store is never changed in place (``model_copy``).
    harp-submit, which cannot import harpd, builds the same keys
    (``harp_submit.wire.ResourcesDict``; a test holds the two lists equal).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    time_s: _Seconds | None = None
    mem_mb: Annotated[int, Field(ge=0)] | None = None
    mem_per_cpu_mb: Annotated[int, Field(ge=0)] | None = None
    mem_per_gpu_mb: Annotated[int, Field(ge=0)] | None = None
    cpus_per_task: _Count | None = None
    ntasks: _Count | None = None
    nodes: _Count | None = None
    gres: _Str | None = None
    gpus: _Str | None = None
    partition: _Str | None = None
    # sbatch options that bound what harp may do to the time limit (harpd.predict.time_options)
    time_min_s: _Seconds | None = None  # --time-min
    signal_s: Annotated[int, Field(ge=0, le=65535)] | None = None  # --signal=[B:]SIG@N: N
    deadline: bool | None = None  # --deadline given
    requeue: bool | None = None  # --requeue (True) or --no-requeue (False), the one sbatch applies

    @classmethod
    def from_json(cls, d: Any) -> Resources:
        """A stored JSON object (None or a non-object: no resources known).

        Validated as the socket validates it; a stored object this harpd would
        refuse (written by another version) is kept as stored rather than
        lost: readers convert, as they always did.
        """
        return kept_as_stored(cls, _mapping(d))


class Change(BaseModel):
    """One sbatch option a decision changes (``--time``, ``--mem``, ...): ``old`` → ``value``, and why.

    The one change of a submission: in harpd's answer (``protocol.Decision``),
    in the stored decision ``harp status`` shows (``records.Decision``) and in
    the GPU planner's plan (``harpd.dnn.plan``).  The changes harpd makes to a
    job already in Slurm are another record (``LimitChange``: a ledger row with
    its own steps), not this one.
    """

    model_config = ConfigDict(extra="forbid")

    option: ChangeOption
    value: _Str
    old: _Str | None = None
    reason: _Str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Change:
        """A stored change; one this harpd would refuse (another version wrote it) is kept as stored."""
        return kept_as_stored(cls, d)


@dataclass(frozen=True, slots=True)
class Decision:
    """What harp decided for a registered job (``submissions.decision``): the options it changed."""

    changes: tuple[Change, ...] = ()
    model: str | None = None

    @classmethod
    def from_json(cls, d: Any) -> Decision | None:
        """The stored JSON object; None when the job was registered without a decision."""
        if not isinstance(d, Mapping):
            return None
        changes = tuple(Change.from_json(c) for c in d.get("changes") or [] if isinstance(c, Mapping))
        return cls(changes, d.get("model"))

    @property
    def changed(self) -> list[str]:
        """The names of the options changed."""
        return [str(c.option) for c in self.changes]


#: the JSON columns of ``submissions``, kept as written in ``Submission.stored``
SUBMISSION_JSON = ("job", "original", "submitted", "decision")


@dataclass(frozen=True, slots=True)
class Submission:
    """A job registered with harpd (``submissions`` row): what its user asked, what went in, what harp decided.

    ``job`` is the ``JobRequest`` JSON harp-submit sent (validate it with
    ``protocol.JobRequest`` to read it typed).  ``stored`` keeps the JSON
    columns exactly as written: ``harp status`` shows them and a
    resubmission registers them again unchanged, whichever harp wrote them.
    """

    job_id: str
    uid: int
    user: str | None
    submitted_at: float
    job: Mapping[str, Any]
    original: Resources
    submitted: Resources
    decision: Decision | None
    state: str
    chain_id: str | None = None
    outcome: str | None = None
    done_at: float | None = None
    token: str | None = None
    verified: bool = False
    stored: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Submission:
        """A ``submissions`` row whose JSON columns are decoded."""
        return cls(
            job_id=row["job_id"],
            uid=row["uid"],
            user=row.get("user"),
            submitted_at=row["submitted_at"],
            job=_mapping(row.get("job")),
            original=Resources.from_json(row.get("original")),
            submitted=Resources.from_json(row.get("submitted")),
            decision=Decision.from_json(row.get("decision")),
            state=row["state"],
            chain_id=row.get("chain_id"),
            outcome=row.get("outcome"),
            done_at=row.get("done_at"),
            token=row.get("token"),
            verified=bool(row.get("verified")),
            stored={k: row.get(k) for k in SUBMISSION_JSON},
        )


class AttemptRow(TypedDict):
    """``AttemptRecord`` as ``harp status`` shows it (column order)."""

    chain_id: str
    attempt: int
    job_id: str | None
    limits: Mapping[str, Any] | None
    reason: str | None
    step: str
    outcome: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of a recovery chain as stored (``attempts`` row); ``harpd.recovery.attempts.Attempt`` reads it.

    ``limits`` is the attempt's JSON object (limits and bookkeeping) as written.
    """

    chain_id: str
    attempt: int
    job_id: str | None
    limits: Mapping[str, Any] | None
    reason: str | None
    step: str
    outcome: str | None
    created_at: float
    updated_at: float  # written with every insert and update

    def to_dict(self) -> AttemptRow:
        """The row as ``harp status`` shows it (column order)."""
        return AttemptRow(
            chain_id=self.chain_id,
            attempt=self.attempt,
            job_id=self.job_id,
            limits=self.limits,
            reason=self.reason,
            step=self.step,
            outcome=self.outcome,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )


class LimitChangeRow(TypedDict):
    """``LimitChange`` as ``harp status`` shows it (column order)."""

    job_id: str
    kind: str
    old_time_s: int
    new_time_s: int
    old_mem_mb: int | None
    new_mem_mb: int | None
    step: str
    reason: str | None
    created_at: float
    updated_at: float
    old_cpus: int | None
    new_cpus: int | None
    attempt: int | None


@dataclass(frozen=True, slots=True)
class LimitChange:
    """harpd's change of a live job's limit (``limit_changes`` row): an extension, a re-size, a signal.

    Keyed (job, kind, old time limit): one change per crossing.  Fields follow
    the table's columns, in its order.
    """

    job_id: str
    kind: str
    old_time_s: int
    new_time_s: int  # always written (a signal's: the run time it was sent at)
    old_mem_mb: int | None
    new_mem_mb: int | None
    step: str
    reason: str | None
    created_at: float
    updated_at: float  # written with every insert and update
    old_cpus: int | None = None
    new_cpus: int | None = None
    attempt: int | None = None  # the attempt of the job it sized (None: before the ledger kept it)

    def to_dict(self) -> LimitChangeRow:
        """The row as ``harp status`` shows it (column order)."""
        return LimitChangeRow(
            job_id=self.job_id,
            kind=self.kind,
            old_time_s=self.old_time_s,
            new_time_s=self.new_time_s,
            old_mem_mb=self.old_mem_mb,
            new_mem_mb=self.new_mem_mb,
            step=self.step,
            reason=self.reason,
            created_at=self.created_at,
            updated_at=self.updated_at,
            old_cpus=self.old_cpus,
            new_cpus=self.new_cpus,
            attempt=self.attempt,
        )


@dataclass(frozen=True, slots=True)
class TrialReport:
    """What a running trial reported (``trial_reports`` row; ``harp progress``)."""

    id: int
    job_id: str
    uid: int
    study: str
    metric: str
    value: float
    elapsed_s: float
    reported_at: float


@dataclass(frozen=True, slots=True)
class TrialStudy:
    """One owner's policy for a study (``trial_studies`` row; ``policy`` is its JSON object)."""

    uid: int
    study: str
    policy: Mapping[str, Any] | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class TrialAction:
    """What harpd last did to a trial (``trial_actions`` row): its nice, or stopped."""

    job_id: str
    uid: int
    study: str
    nice: int | None
    stopped: int | None
    reason: str | None
    at: float


@dataclass(frozen=True, slots=True)
class TrialStatus:
    """One trial as ``harp status`` shows it (``store.trial_status``): study, owner, reports, harpd's last action.

    ``study`` and ``uid`` come from its last report, or from harpd's action
    when it never reported (a pending array task acted on through its array).
    """

    study: str
    uid: int
    reports: int  # how many reports it sent
    last_report: TrialReport | None
    action: TrialAction | None


@dataclass(frozen=True, slots=True)
class IssuedDecision:
    """What harpd decided for one ``predict`` call, under the token harp-submit echoes (``decisions`` row).

    A registration with the token is checked against this record, never
    against what the registering client says: ``job`` is the request harpd
    decided for (its ``request`` the user's own limits), ``decided`` the limits
    harpd chose, ``decision`` the decision JSON as written (None: stored as
    null).  ``job_id`` is set once, when a job claims the token.
    """

    token: str
    uid: int
    user: str | None
    decided_at: float
    job: Mapping[str, Any]
    decided: Mapping[str, Any]
    decision: Mapping[str, Any] | None
    job_id: str | None = None
    used_at: float | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> IssuedDecision:
        """A ``decisions`` row whose JSON columns are decoded."""
        decision = row.get("decision")
        return cls(
            token=row["token"],
            uid=int(row["uid"]),
            user=row.get("user"),
            decided_at=float(row["decided_at"]),
            job=_mapping(row.get("job")),
            decided=_mapping(row.get("decided")),
            decision=decision if isinstance(decision, Mapping) else None,
            job_id=row.get("job_id"),
            used_at=row.get("used_at"),
        )


@dataclass(frozen=True, slots=True)
class ModelRow:
    """A trained model (``models`` row): which estimator, for what, how well, where its file is.

    ``score`` is the training's metrics as stored (decoded JSON); ``champion``:
    the one the live predictor loads for ``resource``.
    """

    id: int
    name: str
    resource: str
    trained_at: float
    n_train: int | None
    score: Mapping[str, Any]
    champion: bool
    path: str  # always written by save_model
