"""Every message of the harp-submit ↔ harpd socket, as pydantic models.

The socket is the trust boundary: anything a user process sends is validated
here before any handler sees it, and every answer is built from these models
so the client can rely on its shape.  Models forbid unknown fields so a
misspelt key is an error answer (the client then fails open) instead of being
silently ignored.

Wire format (docs/design.md): one JSON object + ``\\n`` each way per connection.
Requests: ``{"v": 1, "op": ..., ...}``; answers: ``{"ok": true, ...}`` or
``{"ok": false, "error": "<one line>"}``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from harp_submit.request import COMMAND_LINES, COMMANDS_MAX_CHARS
from harpd.records import Change, Resources

PROTOCOL_VERSION = 1
MAX_REQUEST_BYTES = 1 << 20  # default for server.max_request_bytes
#: the most ``#HARP`` lines a job may have, and their length: what harpd reads of a script is bounded
MAX_HARP_LINES = 32
MAX_HARP_LINE_CHARS = 512

# Slurm job ids as sbatch --parsable prints them (cluster suffix stripped):
# "123", array task "123_4", het component "123+1".
JOB_ID_PATTERN = r"^[0-9]{1,20}(_[0-9]{1,10}|\+[0-9]{1,4})?$"

_Str = Annotated[str, Field(max_length=4096)]
_Count = Annotated[int, Field(ge=0, le=10_000_000)]
_Arg = Annotated[str, Field(max_length=128 * 1024)]  # one argv word or value: Linux's MAX_ARG_STRLEN


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class ProtocolError(Exception):
    """A request that cannot be served, phrased as the one-line error answer."""


# ---------------------------------------------------------------- payloads


class JobRequest(_Model):
    """What harp-submit knows about a job at submit time."""

    partition: _Str | None = None
    account: _Str | None = None
    job_name: _Str | None = None
    script_name: _Str | None = None
    signature: _Str | None = None
    cwd: _Str | None = None
    array_size: _Count | None = None
    request: Resources = Field(default_factory=Resources)
    # bounded so that one request's work is bounded (#44: 900 long #HARP lines took 2 s to decide)
    harp_lines: Annotated[
        list[Annotated[str, Field(max_length=MAX_HARP_LINE_CHARS)]], Field(max_length=MAX_HARP_LINES)
    ] = Field(default_factory=list)
    # the script's first command lines (harp-submit sends up to 20, 4 KiB in
    # all; the --wrap command for wrap jobs): harpd derives ``signature`` from them
    commands: Annotated[list[_Str], Field(max_length=100)] = Field(default_factory=list)

    @field_validator("commands")
    @classmethod
    def _as_harp_submit_sends(cls, lines: list[str]) -> list[str]:
        """At most COMMAND_LINES lines, COMMANDS_MAX_CHARS in all, as harp-submit sends them.

        Whoever sends the request: every reader of the commands (signature,
        workflow task) then parses a bounded text, so one request's decision
        is bounded (#44: 400 KiB of commands took a second of the one turn).
        """
        out: list[str] = []
        left = COMMANDS_MAX_CHARS
        for line in lines[:COMMAND_LINES]:
            if left <= 0:
                break
            out.append(line[:left])
            left -= len(out[-1])
        return out

    # a Python job library's function (``module:qualname``), read by harp-submit from the
    # library's pickle without loading it (harp_submit.library_job): the job's identity
    function: Annotated[str, Field(max_length=256)] | None = None
    # total bytes of the regular files the job names (harp_submit.input_size); None: unknown
    input_bytes: Annotated[int, Field(ge=0, le=1 << 62)] | None = None
    # register only: sbatch's arguments as harp-submit ran it and the SBATCH_*
    # variables it saw, so recovery can submit the job again (resubmit mode)
    argv: Annotated[list[_Arg], Field(max_length=4096)] | None = None
    sbatch_env: Annotated[dict[Annotated[str, Field(max_length=256)], _Arg], Field(max_length=256)] | None = None


class Limits(_Model):
    """The caps harp-submit checks a decision against (fails open if exceeded)."""

    partition: _Str | None = None
    max_time_s: int | None = None
    max_mem_mb: int | None = None
    max_cpus: int | None = None


_Why = Annotated[str, Field(max_length=1000)]

#: the resources ``Decision.kept`` names (``explain``'s per-resource keys of the same names)
KEPT_RESOURCES = ("time", "mem", "cores")


class Kept(_Model):
    """Why harp decided each resource as it did (its ``explain`` entry's reason; None: no word).

    ``harp-submit --harp-dry-run`` prints it for each resource no change
    touches, as why it was kept; typed here so that the client reads named
    fields, not ``explain``'s free-form keys.
    """

    time: _Why | None = None
    mem: _Why | None = None
    cores: _Why | None = None


def _why(detail: Any) -> str | None:
    """A non-empty ``reason`` string of an ``explain`` entry, bounded; else None."""
    reason = detail.get("reason") if isinstance(detail, dict) else None
    return reason[:1000] if isinstance(reason, str) and reason else None


class Decision(_Model):
    """harpd's answer to ``predict``: the changes, the caps they were checked against, and why.

    ``reason`` and ``kept`` are what harp-submit shows of the why; ``explain``
    stays the free-form detail (``--harp-explain`` prints it as it is).  A
    decision built without them takes them from ``explain``'s ``reason`` and
    ``time``/``mem``/``cores`` entries, the keys harp-submit read before they
    were typed: an older harp-submit still finds them there, and a newer one
    falls back to them when an older harpd sends no typed fields.
    """

    changes: list[Change] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    model: _Str | None = None
    explain: dict[str, Any] = Field(default_factory=dict)
    # one line for the user when harp deliberately leaves the job alone
    # (e.g. "no GPU configuration fits ..."); harp-submit prints it as `harp: ...`
    message: Annotated[str, Field(max_length=300)] | None = None
    reason: _Why | None = None  # why the whole request is kept as written
    kept: Kept = Field(default_factory=Kept)

    @model_validator(mode="after")
    def _typed_from_explain(self) -> Decision:
        """Fill ``reason``/``kept`` from ``explain`` where the decider gave only the free-form detail."""
        if self.reason is None:
            self.reason = _why(self.explain)
        for res in KEPT_RESOURCES:
            if getattr(self.kept, res) is None and res in self.explain:
                setattr(self.kept, res, _why(self.explain[res]))
        return self


# ---------------------------------------------------------------- requests


class _Request(_Model):
    v: Literal[1] = 1


class PredictRequest(_Request):
    op: Literal["predict"]
    job: JobRequest
    # harp-submit --harp-dry-run: decide as for a submission, but count none (the user's
    # pending jobs and submission burst are features: a dry run must not move the next answer)
    dry_run: bool = False


# a decision's token as harpd issues it (harpd.daemon.registration.new_token)
TOKEN_PATTERN = r"^[A-Za-z0-9_-]{16,64}$"


class RegisterRequest(_Request):
    """A job harp-submit submitted.  ``original``/``submitted``/``decision`` are the client's
    account and are not trusted: harpd stores its own record of the decision ``token`` names
    and the limits slurmctld shows (harpd.daemon.registration)."""

    op: Literal["register"]
    job_id: Annotated[str, Field(pattern=JOB_ID_PATTERN)]
    job: JobRequest
    original: Resources
    submitted: Resources
    decision: Decision | None = None
    token: Annotated[str, Field(pattern=TOKEN_PATTERN)] | None = None


class StatusRequest(_Request):
    op: Literal["status"]
    job_id: Annotated[str, Field(pattern=JOB_ID_PATTERN)]


class HealthRequest(_Request):
    op: Literal["health"]


class EndingRequest(_Request):
    """From the job's own end-of-task hook (``harp-task-epilog``, Slurm's TaskEpilog of the
    batch step): the job is about to end; harpd may recover it now, while Slurm still shows
    it RUNNING, so that a workflow manager polling sacct never sees a final failure."""

    op: Literal["ending"]
    job_id: Annotated[str, Field(pattern=JOB_ID_PATTERN)]


class RetrainRequest(_Request):
    op: Literal["retrain"]


class ReloadRequest(_Request):
    op: Literal["reload"]


class ImportRequest(_Request):
    op: Literal["import"]
    path: Annotated[str, Field(min_length=1, max_length=4096)]


class ProgressRequest(_Request):
    """``harp progress --metric loss=0.31`` from inside a running trial (harpd.dnn.trials).

    harpd takes it only from Slurm's owner of ``job_id`` while the job runs;
    ``study`` is the ``#HARP study=...`` words (``HARP_STUDY``), else an array's
    trials form the study ``array-<id>``.
    """

    op: Literal["progress"]
    job_id: Annotated[str, Field(pattern=JOB_ID_PATTERN)]
    metric: Annotated[str, Field(pattern=r"^[A-Za-z0-9_]{1,32}$")]
    value: Annotated[float, Field(allow_inf_nan=False)]
    study: Annotated[str, Field(max_length=300)] | None = None


_Word = Annotated[str, Field(max_length=100)]
_Names = Annotated[str, Field(max_length=2000)]  # a comma list of names

# what a report may be asked for: the socket's ``report`` request and the
# ``harp report`` options alike (harpd.report renders exactly these)
REPORT_FORMATS = ("table", "csv", "json", "html")
REPORT_GROUPINGS = ("user", "account", "partition", "signature")


class ReportRequest(_Request):
    """``harp report`` served by harpd, for users who cannot read the store.

    Not an admin op: the daemon scopes it to the caller's own jobs unless the
    caller is an admin (harpd.report.build.resolve_scope).
    """

    op: Literal["report"]
    by: Literal[REPORT_GROUPINGS] = "user"  # type: ignore[valid-type]
    since: _Word | None = None
    until: _Word | None = None
    user: _Names | None = None
    account: _Names | None = None  # comma lists, as the CLI's -A/-r/--source take them
    partition: _Names | None = None
    source: _Names | None = None
    format: Literal[REPORT_FORMATS] = "table"  # type: ignore[valid-type]
    top: Annotated[int, Field(ge=0, le=1_000_000)] | None = None


Request = Annotated[
    PredictRequest
    | RegisterRequest
    | StatusRequest
    | HealthRequest
    | EndingRequest
    | RetrainRequest
    | ReloadRequest
    | ImportRequest
    | ReportRequest
    | ProgressRequest,
    Field(discriminator="op"),
]
OPS: tuple[str, ...] = ("predict", "register", "status", "health", "retrain", "reload", "import", "report", "progress")
ADMIN_OPS: frozenset[str] = frozenset({"retrain", "reload", "import"})
_REQUEST = TypeAdapter(Request)


# ----------------------------------------------------------------- answers


class _Answer(_Model):
    ok: Literal[True] = True


class ErrorAnswer(_Model):
    ok: Literal[False] = False
    error: str


class PredictAnswer(_Answer):
    decision: Decision
    # harpd's record of this decision: echoed at registration, left in the job's comment
    token: str | None = None


class RegisterAnswer(_Answer):
    pass


class StatusAnswer(_Answer):
    job: dict[str, Any]


class EndingAnswer(_Answer):
    """What harpd did about an ending job: ``requeued`` (it runs again, with more of what ran
    out) or ``left`` (it ends as it is); ``why`` in words."""

    action: Literal["requeued", "left"]
    why: Annotated[str, Field(max_length=400)] = ""


class IngestHealth(_Model):
    """The sacct poller as ``health`` shows it: ``polls`` only grows, so a caller can wait for harpd to look again."""

    polls: int  # polls completed since harpd started (outcomes stored and announced)
    failures: int  # failed polls in a row (0: the last one worked)
    last_error: str | None = None  # why the last poll failed, until one works


class RecoveryHealth(_Model):
    """Recovery as ``health`` shows it: the attempts held up because Slurm does not answer (or has no record yet)."""

    waiting_on_slurm: int  # attempts waiting on Slurm now (harpd.recovery.waiting)
    waiting_since: float | None = None  # epoch seconds the longest of those waits began
    last_error: str | None = None  # what Slurm said (or did not) to that one


class WatchHealth(_Model):
    """The watcher's last tick: how long one listing and its actions took, against the lead it must keep."""

    last_tick_s: float | None = None
    jobs: int = 0
    lead_s: float
    at: float | None = None


class LimitsHealth(TypedDict):
    """``health``'s ``limits`` and ``harp status``' ``limits_mode`` (``harpd.watch.privilege.Privilege.as_health``).

    ``mode`` is ``soft`` or ``hard``; ``health`` adds the soft policy's state
    (``harpd.predict.soft_state.SoftState.explain``) to it under soft limits.
    """

    mode: str
    privileged: bool
    why: str


class AccountingHealth(TypedDict):
    """``health``'s and ``harp status``' ``accounting`` (``harpd.recovery.site_accounting``).

    What Slurm's accounting keeps (None: unknown, Slurm did not answer) and,
    in words, what recovery can do with it.
    """

    job_script: bool | None
    job_env: bool | None
    flags: str
    recovery: str


class HealthAnswer(_Answer):
    version: str
    store: str
    models: dict[str, Any] = Field(default_factory=dict)
    predictor: str | None = None
    uptime_s: float | None = None
    limits: dict[str, Any] | None = None  # soft or hard time limits and why (harpd.watch.privilege)
    accounting: dict[str, Any] | None = None  # what Slurm keeps for recovery (harpd.recovery.site_accounting)
    ingest: IngestHealth | None = None  # the sacct poller; None: no Slurm, nothing polled
    recovery: RecoveryHealth | None = None  # recovery's waits on Slurm; None: recovery off
    watch: WatchHealth | None = None  # the watcher; None: not running (hard limits, unprivileged, off)


class AdminAnswer(_Answer):
    message: str = ""
    result: dict[str, Any] = Field(default_factory=dict)


class ReportAnswer(_Answer):
    scope: str
    text: str


class ProgressAnswer(_Answer):
    study: str
    elapsed_s: float  # the trial's run time as harpd counts it: since its first report


Answer = (
    ErrorAnswer
    | PredictAnswer
    | RegisterAnswer
    | StatusAnswer
    | EndingAnswer
    | HealthAnswer
    | AdminAnswer
    | ReportAnswer
    | ProgressAnswer
)


# --------------------------------------------------------------- encoding


def _one_line(s: str, limit: int = 300) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _describe(err: ValidationError) -> str:
    e = err.errors()[0]
    if e["type"] == "union_tag_invalid":
        tag = e.get("ctx", {}).get("tag")
        return f"unknown op {tag!r}; expected one of {', '.join(OPS)}"
    if e["type"] == "union_tag_not_found":
        return "missing 'op'; every request needs one of " + ", ".join(OPS)
    # pydantic puts the union tag first in the location of nested errors
    parts = [str(p) for p in e["loc"]]
    if parts and parts[0] in OPS:
        parts = parts[1:]
    loc = ".".join(parts) or "(request)"
    if parts == ["v"]:
        return f"unsupported protocol version; this harpd speaks v={PROTOCOL_VERSION}"
    if parts and parts[-1] == "job_id" and e["type"] == "string_pattern_mismatch":
        return f"invalid request: job_id: {e.get('input')!r} is not a Slurm job id (like 123 or 123_4)"
    return f"invalid request: {loc}: {e['msg']}"


def parse_request(data: bytes | str) -> Request:
    """Validate one request line; raise ProtocolError with the answer's text."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("request is not UTF-8") from None
    else:
        text = data
    text = text.strip()
    if not text:
        raise ProtocolError("empty request; send one JSON object followed by a newline")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: also integers over 4300 digits
        raise ProtocolError(f"request is not valid JSON ({_one_line(getattr(exc, 'msg', str(exc)))})") from None
    if not isinstance(obj, dict):
        raise ProtocolError("request must be a JSON object")
    if "v" in obj and obj["v"] != PROTOCOL_VERSION:
        raise ProtocolError(
            f"unsupported protocol version {_one_line(repr(obj['v']), 40)}; this harpd speaks v={PROTOCOL_VERSION}"
        )
    try:
        return _REQUEST.validate_python(obj)
    except ValidationError as exc:
        raise ProtocolError(_one_line(_describe(exc))) from None


def encode(answer: BaseModel) -> bytes:
    """One answer line (JSON + newline)."""
    return answer.model_dump_json().encode("utf-8") + b"\n"


def error(message: str) -> ErrorAnswer:
    return ErrorAnswer(error=_one_line(message))


def parse_answer(data: bytes | str) -> dict[str, Any]:
    """Decode and check an answer line (tests and the admin CLI use it)."""
    obj = json.loads(data)
    if not isinstance(obj, dict) or not isinstance(obj.get("ok"), bool):
        raise ProtocolError("answer must be a JSON object with a boolean 'ok'")
    if obj["ok"] is False:
        ErrorAnswer.model_validate(obj)
    return obj
