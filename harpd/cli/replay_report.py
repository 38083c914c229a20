"""The records `harp replay` builds its answer from: the report and its verdict.

The figures stay typed (``ModelMetrics`` per model, ``Verdict``) from the
replay to the renderer, so the verdict and the table read attributes, not
string keys that a rename would silently turn into ``None``.  ``to_dict``
is the one edge where they become the dict ``--format json`` prints (the
keys and their order are what scripts and benches read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:  # annotations only: `harp --help` does not load numpy
    from harpd.evaluate.workflow_replay import WorkflowFigures
    from harpd.predict.soft import SoftPolicyExplain
    from harpd.replay.metric import ModelMetrics
    from harpd.report.queue_figures import QueueFigures


def finite_or_none(v: Any) -> Any:
    """JSON has no NaN: a non-finite float is printed as null, as ``ModelMetrics.to_dict`` does."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


# one accuracy target checked on harp's row: its value (None: not measured), the target in words, passed
TargetCheck = TypedDict("TargetCheck", {"value": float | None, "target": str, "pass": bool})


class VerdictJson(TypedDict, total=False):
    """``Verdict`` in ``--format json``: only ``better`` and ``text`` when there was nothing to compare.

    Non-finite figures are written as None.
    """

    model: str
    limits: str
    unit: str
    reserved_saved: float | None
    reserved_saved_share: float | None
    over_reservation_vs_users: float | None
    consumed_vs_users: float | None
    consumed_extra: float | None
    killed_jobs: int
    killed: float | None
    harp_kills: int
    harp_killed: float | None
    users_kills: int
    lost: int
    extended_jobs: int | None
    missed_share: float | None
    score: float | None
    users_score: float | None
    better: str | None
    margin: str | None
    text: list[str]
    queue: list[str]


class ReplayReportJson(TypedDict):
    """``ReplayReport`` as ``harp replay --format json`` prints it (scripts and benches read these keys)."""

    trace: str
    source: str
    resource: str
    relative: bool
    jobs: int
    skipped: dict[str, int]
    retrains: int
    seconds: float
    alpha: float
    weight: str
    unit: str
    unit_scale: float
    models: list[dict[str, Any]]  # each ModelMetrics.to_dict (harpd.replay.metric)
    targets: dict[str, TargetCheck]
    notes: list[str]
    limits: str
    soft_policy: SoftPolicyExplain | None
    verdict: NotRequired[VerdictJson]
    queue: NotRequired[QueueFigures]
    workflow: NotRequired[WorkflowFigures]


@dataclass(frozen=True)
class Verdict:
    """Would harp have beaten the users' own requests, the figures behind it, and the lines to print.

    ``better`` is None with only ``text`` set when there is nothing to
    compare (no requests in the trace, or harp or the users' row missing).
    ``queue``: the queue's verdict lines, read first, when the queue was
    simulated (``--schedule``).
    """

    better: str | None
    text: tuple[str, ...]
    figures: bool = True  # False: no verdict, only the line that says why
    model: str = ""
    limits: str = "hard"
    unit: str = ""
    reserved_saved: float = 0.0
    reserved_saved_share: float | None = None
    over_reservation_vs_users: float | None = None
    consumed_vs_users: float | None = None
    consumed_extra: float = 0.0
    killed_jobs: int = 0
    killed: float = 0.0
    harp_kills: int = 0  # of killed_jobs, those harp's cut killed (below the request)
    harp_killed: float = 0.0
    users_kills: int = 0  # jobs the users' own requests stop (as in the trace)
    lost: int = 0
    extended_jobs: int | None = None
    missed_share: float | None = None
    score: float | None = None
    users_score: float | None = None
    margin: str | None = None
    queue: tuple[str, ...] | None = None

    @classmethod
    def none(cls, why: str) -> Verdict:
        return cls(better=None, text=(f"no verdict: {why}",), figures=False)

    def to_dict(self) -> VerdictJson:
        f = finite_or_none
        if not self.figures:
            out = VerdictJson(better=self.better, text=list(self.text))
        else:
            out = VerdictJson(
                model=self.model,
                limits=self.limits,
                unit=self.unit,
                reserved_saved=f(self.reserved_saved),
                reserved_saved_share=f(self.reserved_saved_share),
                over_reservation_vs_users=f(self.over_reservation_vs_users),
                consumed_vs_users=f(self.consumed_vs_users),
                consumed_extra=f(self.consumed_extra),
                killed_jobs=self.killed_jobs,
                killed=f(self.killed),
                harp_kills=self.harp_kills,
                harp_killed=f(self.harp_killed),
                users_kills=self.users_kills,
                lost=self.lost,
                extended_jobs=self.extended_jobs,
                missed_share=f(self.missed_share),
                score=f(self.score),
                users_score=f(self.users_score),
                better=self.better,
                margin=self.margin,
                text=list(self.text),
            )
        if self.queue is not None:
            out["queue"] = list(self.queue)
        return out


@dataclass(frozen=True)
class ReplayReport:
    """One replay of a trace: its run, one ``ModelMetrics`` per model, the targets and the verdict."""

    trace: str
    source: str
    resource: str
    relative: bool  # the trace has the users' requests to compare with
    jobs: int
    skipped: dict[str, int]
    retrains: int
    seconds: float
    alpha: float
    weight: str
    unit: str
    unit_scale: float
    models: tuple[ModelMetrics, ...]
    targets: dict[str, TargetCheck]
    notes: list[str]
    limits: str
    soft_policy: SoftPolicyExplain | None
    verdict: Verdict | None = None
    queue: QueueFigures | None = None  # --schedule's figures (harpd.report.queue_figures)
    workflow: WorkflowFigures | None = field(default=None)  # a Nextflow trace's Sizey wastage

    def row(self, model: str) -> ModelMetrics | None:
        """The metrics of ``model`` (the last row of that name, as a dict by name keeps it)."""
        found = None
        for m in self.models:
            if m.model == model:
                found = m
        return found

    def to_dict(self) -> ReplayReportJson:
        out: ReplayReportJson = {
            "trace": self.trace,
            "source": self.source,
            "resource": self.resource,
            "relative": self.relative,
            "jobs": self.jobs,
            "skipped": self.skipped,
            "retrains": self.retrains,
            "seconds": self.seconds,
            "alpha": self.alpha,
            "weight": self.weight,
            "unit": self.unit,
            "unit_scale": self.unit_scale,
            "models": [m.to_dict() for m in self.models],
            "targets": self.targets,
            "notes": self.notes,
            "limits": self.limits,
            "soft_policy": self.soft_policy,
        }
        if self.verdict is not None:
            out["verdict"] = self.verdict.to_dict()
        if self.queue is not None:
            out["queue"] = self.queue
        if self.workflow is not None:
            out["workflow"] = self.workflow
        return out
