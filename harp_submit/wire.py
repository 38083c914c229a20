"""harp-submit's typed view of the socket's messages, for type checkers only.

harp-submit cannot import harpd (contract ``client-standalone``), so it
speaks the protocol as plain JSON objects; these ``TypedDict``s name their
keys for the checker.  They mirror ``harpd.protocol`` (and ``harpd.records``'
``Resources`` and ``Change``): ``tests/unit/submit/test_wire_fields.py`` holds
the key lists equal, so a field added on one side only fails a test.

Imported under ``TYPE_CHECKING`` only: ``typing`` costs milliseconds at
every submission, and nothing here runs.  Values from harpd are still
checked where they are used (``harp_submit.decision``): the types say what
a well-formed answer holds, not what a peer sent.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ResourcesDict(TypedDict, total=False):
    """``harpd.records.Resources``: seconds and MiB; None = not given."""

    time_s: int | None
    mem_mb: int | None
    mem_per_cpu_mb: int | None
    mem_per_gpu_mb: int | None
    cpus_per_task: int | None
    ntasks: int | None
    nodes: int | None
    gres: str | None
    gpus: str | None
    partition: str | None
    time_min_s: int | None
    signal_s: int | None
    deadline: bool | None
    requeue: bool | None


class JobRequestDict(TypedDict, total=False):
    """``harpd.protocol.JobRequest``: what harp-submit knows about a job at submit time."""

    partition: str | None
    account: str | None
    job_name: str | None
    script_name: str | None
    signature: str | None
    cwd: str | None
    array_size: int | None
    request: ResourcesDict
    harp_lines: list[str]
    commands: list[str]
    function: str | None
    input_bytes: int | None
    argv: list[str] | None
    sbatch_env: dict[str, str] | None


class ChangeDict(TypedDict, total=False):
    """``harpd.records.Change``: one option a decision changes."""

    option: str
    value: str
    old: str | None
    reason: str


class LimitsDict(TypedDict, total=False):
    """``harpd.protocol.Limits``: the caps a decision is checked against."""

    partition: str | None
    max_time_s: int | None
    max_mem_mb: int | None
    max_cpus: int | None


class KeptDict(TypedDict, total=False):
    """``harpd.protocol.Kept``: why harp decided each resource as it did."""

    time: str | None
    mem: str | None
    cores: str | None


class DecisionDict(TypedDict, total=False):
    """``harpd.protocol.Decision``; ``explain`` is free-form detail (``reason``/``kept`` are what is shown)."""

    changes: list[ChangeDict]
    limits: LimitsDict
    model: str | None
    explain: dict[str, Any]
    message: str | None
    reason: str | None
    kept: KeptDict


class PredictAnswerDict(TypedDict, total=False):
    """``harpd.protocol.PredictAnswer``."""

    ok: bool
    decision: DecisionDict
    token: str | None


class RegisterMessage(TypedDict, total=False):
    """``harpd.protocol.RegisterRequest``, as built before sbatch answers (``job_id`` added after)."""

    op: str
    job_id: str
    job: JobRequestDict
    original: ResourcesDict
    submitted: ResourcesDict
    decision: DecisionDict | None
    token: str
