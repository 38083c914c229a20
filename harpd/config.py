"""harpd's configuration: one validated object, read once at start.

Validation happens here, at start, so a typo in ``harpd.toml`` stops the daemon
with the key and the reason instead of surfacing as a wrong prediction hours
later.  Every key has a default so an empty file (or none) runs the embedded
setup: local Slurm commands and a SQLite store.

Sources, highest priority first: ``HARP_<SECTION>__<KEY>`` environment
variables, the TOML file, the defaults below.  ``etc/harpd.toml`` documents every
key; ``tests/unit/test_config.py`` checks the two stay in step.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_CONFIG_PATH = Path("/etc/harp/harpd.toml")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    socket: Path = Path("/run/harp/harpd.sock")
    socket_mode: int = Field(0o666, ge=0, le=0o777, description="permissions of the socket file")
    admin_group: str | None = None
    request_timeout_s: float = Field(5.0, gt=0)
    max_request_bytes: int = Field(1 << 20, gt=0)
    max_clients: int = Field(64, gt=0)
    # TCP before the credential is checked (harpd.daemon.preauth): held by the accept loop, not a worker
    auth_timeout_s: float = Field(2.0, gt=0)  # the credential line and request must arrive within this
    max_unauthenticated: int = Field(512, gt=0)  # TCP connections waiting for their request, all peers
    max_unauthenticated_per_peer: int = Field(16, gt=0)  # ... from one address (waiting or being checked)
    unix_reserved_clients: int = Field(16, ge=0)  # of max_clients, slots TCP callers never take
    refusal_log_interval_s: float = Field(10.0, gt=0)  # refusals past the first are summed up per interval
    # the Unix socket, per uid (harpd.daemon.server): one user never makes harpd busy for the others
    max_clients_per_user: int = Field(8, gt=0)  # one uid's requests served at once (root's and harpd's: no cap)
    max_waiting_per_user: int = Field(16, gt=0)  # one uid's connections whose request has not arrived whole
    root_reserved_clients: int = Field(4, ge=0)  # of max_clients, slots only root and harpd's own user take
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # TCP addresses ("HOST:PORT") served beside the socket, every request sealed with MUNGE; [] = socket only
    listen: list[str] = Field(default_factory=list)

    @field_validator("listen")
    @classmethod
    def _addresses(cls, entries: list[str]) -> list[str]:
        return _checked_addresses(entries, "0.0.0.0:6820")

    @model_validator(mode="after")
    def _tcp_keeps_a_slot(self) -> ServerSettings:
        if self.listen and self.unix_reserved_clients >= self.max_clients:
            raise ValueError(
                f"unix_reserved_clients ({self.unix_reserved_clients}) must be below max_clients "
                f"({self.max_clients}) while server.listen is set, or TCP callers get no slot"
            )
        return self


class ClientSettings(_Section):
    """Where harp-submit, harp-filter and ``harp`` find harpd from other hosts (harp_submit.route)."""

    servers: list[str] = Field(default_factory=list)
    harpd_uid: int = Field(0, ge=0)  # the uid harpd runs as: answers sealed by any other are not believed

    @field_validator("servers")
    @classmethod
    def _addresses(cls, entries: list[str]) -> list[str]:
        return _checked_addresses(entries, "harp1:6820")


class MungeSettings(_Section):
    socket: str | None = None  # munged's socket; None: HARP_MUNGE_SOCKET, else /run/munge/munge.socket.2


def _checked_addresses(entries: list[str], example: str) -> list[str]:
    from harp_submit.route import parse_address

    for entry in entries:
        try:
            parse_address(entry)
        except ValueError as exc:
            raise ValueError(f"{exc}; write each entry as \"HOST:PORT\", e.g. \"{example}\"") from None
    return entries


class StoreSettings(_Section):
    path: Path = Path("/var/lib/harp/harp.db")
    models_dir: Path | None = None  # default: <store dir>/models
    busy_timeout_s: float = Field(30.0, gt=0)  # wait this long for another writer's lock
    # what one user can make harpd store (harpd.store.decisions): decisions not yet bound to a job
    max_pending_decisions_per_user: int = Field(2000, gt=0)
    max_pending_decision_bytes_per_user: int = Field(16 << 20, gt=0)


class SlurmSettings(_Section):
    backend: str = "cli"  # "cli" (sbatch/sacct/scontrol); "pyslurm" optional
    bin_dir: Path | None = None  # where sbatch/sacct/scontrol live; None: PATH
    command_timeout_s: float = Field(30.0, gt=0)
    cluster: str | None = None  # None: whatever sacct reports


class IngestSettings(_Section):
    poll_interval_s: float = Field(60.0, gt=0)
    learn_all_jobs: bool = False
    lookback_s: float = Field(86400.0, gt=0)
    max_backoff_s: float = Field(600.0, gt=0)


class PredictSettings(_Section):
    alpha_time: float = Field(0.05, gt=0, lt=1)
    alpha_mem: float = Field(0.05, gt=0, lt=1)
    alpha_cpus: float = Field(0.05, gt=0, lt=1)
    #: how much longer the cores harp gives may make the (1 - alpha_cpus) run (harpd.predict.cores); a task
    #: counts as slowed only beyond it, and its time limit includes it
    cores_tolerance: float = Field(0.05, ge=0, lt=1)
    min_history: int = Field(5, ge=1)
    floor_time_s: int = Field(60, ge=60)
    floor_mem_mb: int = Field(100, ge=1)
    # a workflow manager that runs inside each of its jobs (Snakemake) holds its own memory there
    manager_floor_mem_mb: int = Field(300, ge=1)
    allow_shrink: bool = True
    max_raise_factor: float = Field(1.0, ge=1.0)
    predictor: str = "auto"  # "auto": the champion; else a registered name
    leave_alone_ratio: float = Field(0.9, gt=0, le=1)  # keep requests when the bound is this close
    waste_budget: float = Field(0.04, ge=0, lt=1)  # killed-attempt consumption harp may add (share)
    # hard limits: share of a time reservation cut the queue turns into earlier starts; a cut is made only
    # where it outweighs its kill risk (harpd.predict.kill_cost); 0: none is (measured, docs/metrics.md 'Queue')
    hard_cut_gain: float = Field(0.0, ge=0.0, le=1.0)
    # soft limits (privileged harpd extends jobs up to the user's request; harpd.predict.soft)
    soft_quantile: float = Field(0.9, gt=0.5, lt=1)  # share of jobs the start limit should cover
    soft_extension_budget: float = Field(0.10, gt=0, lt=1)  # share of jobs (all through harp) that may be extended
    soft_recent_margin: float = Field(1.1, ge=1.0, le=4.0)  # start-time rule: this × the template's last 5 runs
    soft_burst_tilt: float = Field(0.2, ge=0.0, le=2.0)  # more caution per log(1 + siblings running)
    soft_stake_tilt: float = Field(0.0, ge=0.0, le=1.0)  # deeper cut per log of cores × request above the usual
    # (0: off, the default: at 85% utilization 0.15 cost KTH-SP2 8% of mean wait; docs/metrics.md, 'Queue')
    # the last extension goes straight to the user's request; 1 (the default): the first does, so a job that
    # outgrew harp's limit breaks the planner's promise once (docs/metrics.md, 'Queue': one extension)
    soft_max_extensions: int = Field(1, ge=1, le=64)
    # one user's own budget: a user whose recent harp-cut jobs were extended more often than this
    # share (over at least 10 of their last 50) is no longer cut: their jobs keep their time request
    soft_user_extension_budget: float = Field(0.30, gt=0, le=1)
    # the queue rule (harpd.predict.queue_policy): under a queue that outlasts a job's request, only a cut to a
    # quarter of it or less stands (soft limits; the queue as the watcher last listed it). On: near saturation
    # it keeps harp from raising everyone's wait, for a little of harp's gain at ordinary load (docs/metrics.md,
    # 'Closed loop'); `harp replay --schedule` follows this setting
    queue_rule: bool = True


class RecoverySettings(_Section):
    enabled: bool = True
    max_attempts: int = Field(3, ge=1)
    max_time_s: int | None = Field(None, ge=60)  # cap beyond partition MaxTime
    max_mem_mb: int | None = Field(None, ge=1)  # cap beyond node memory (per node)
    # cap at this many times the user's own request (1.0: never past it); None: partition/node caps only
    max_request_factor: float | None = Field(None, ge=1.0)
    mode: Literal["auto", "requeue", "resubmit"] = "auto"
    # hours an attempt waits for a Slurm that does not answer or whose accounting has no record of
    # the job yet, before "no record" counts as the job being gone (harpd.recovery.waiting)
    slurm_wait_h: float = Field(24.0, gt=0, le=24 * 366)


class WatchSettings(_Section):
    """Soft limits: extend running jobs before harp's limit, re-size pending ones (harpd.watch)."""

    enabled: bool = True
    soft_limits: bool = True
    interval_s: float = Field(30.0, gt=0)
    margin_s: float = Field(120.0, gt=0)
    resize: bool = True
    resize_min_ratio: float = Field(0.10, ge=0, lt=1)
    resize_min_s: int = Field(300, ge=0)
    trials: bool = True
    trials_max_nice: int = Field(1000, ge=0, le=10_000)
    checkpoint_signal: bool = True  # ask resumable jobs (#HARP checkpoint) to checkpoint before their end


class RetrainSettings(_Section):
    interval_s: float = Field(86400.0, gt=0)
    after_n_outcomes: int = Field(500, ge=1)
    holdout_fraction: float = Field(0.2, gt=0, lt=1)
    # no model, or one learnt from < first_below_jobs jobs: retrain first_after_s after new outcomes
    first_after_s: float = Field(300.0, gt=0)
    first_below_jobs: int = Field(5000, ge=0)


class GpuType(_Section):
    name: str
    memory_gb: float = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    billing_weight: float = Field(1.0, gt=0)
    partition: str


class DnnSettings(_Section):
    safety_margin: float = Field(0.10, ge=0, lt=1)
    # outside PyTorch's allocator: context + lazily loaded kernels (0.22-0.23 GiB measured, H200, torch 2.11)
    cuda_context_gb: float = Field(0.3, ge=0)
    # NCCL/torch.distributed buffers and gradient buckets, added when a job uses >1 GPU
    distributed_overhead_gb: float = Field(1.0, ge=0)
    # most nodes harp spreads one DNN job over (Slurm's partition limits apply too)
    max_nodes: int = Field(8, ge=1, le=4096)
    gpu_types: list[GpuType] = Field(default_factory=list)

    @field_validator("gpu_types")
    @classmethod
    def _unique_names(cls, types: list[GpuType]) -> list[GpuType]:
        # the name is the GRES type harp requests: two entries would be ambiguous
        names = [t.name for t in types]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"GPU type {dup[0]!r} is listed twice; keep one entry per type")
        return types


class ReportSettings(_Section):
    default_window_days: int = Field(30, ge=1)
    # reports harpd builds at once for users who cannot read the store; more get "retry"
    max_concurrent: int = Field(2, ge=1, le=64)


class MetricsSettings(_Section):
    """The Prometheus endpoint (harpd.metrics): off unless enabled, on loopback unless ``listen`` says otherwise."""

    enabled: bool = False
    listen: str = "127.0.0.1:9817"  # HOST:PORT of /metrics (port 0: any free port, named in the log)
    # addresses or networks ("10.0.0.5", "10.1.0.0/16") that may scrape besides loopback; [] = loopback only
    allow: list[str] = Field(default_factory=list)

    @field_validator("listen")
    @classmethod
    def _address(cls, entry: str) -> str:
        from harp_submit.route import parse_address

        try:
            parse_address(entry, any_port=True)
        except ValueError as exc:
            raise ValueError(f'{exc}; write it as "HOST:PORT", e.g. "127.0.0.1:9817"') from None
        return entry

    @field_validator("allow")
    @classmethod
    def _networks(cls, entries: list[str]) -> list[str]:
        import ipaddress

        for entry in entries:
            try:
                ipaddress.ip_network(str(entry).strip(), strict=False)
            except ValueError:
                raise ValueError(
                    f'{entry!r} is not an IP address or network; write e.g. "10.0.0.5" or "10.1.0.0/16"'
                ) from None
        return entries


class HarpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HARP_", env_nested_delimiter="__", extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    client: ClientSettings = Field(default_factory=ClientSettings)
    munge: MungeSettings = Field(default_factory=MungeSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    predict: PredictSettings = Field(default_factory=PredictSettings)
    recovery: RecoverySettings = Field(default_factory=RecoverySettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)
    retrain: RetrainSettings = Field(default_factory=RetrainSettings)
    dnn: DnnSettings = Field(default_factory=DnnSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ):
        # environment beats the file (passed as init kwargs) beats defaults
        return (env_settings, init_settings)


class ConfigError(Exception):
    """A config problem, already phrased as the one line the admin should read."""


# ---------------------------------------------------------------- errors in a sysadmin's words
#
# pydantic says "Input should be a valid number, unable to parse string as a
# number" and stops nowhere near the variable that caused it; an admin needs
# the variable or the key, and every wrong one at once, not one per restart.


def _env_var(loc: tuple[Any, ...]) -> str | None:
    """The HARP_* variable that set ``loc`` (or a whole section/list above it), if any."""
    names = {k.upper(): k for k in os.environ if k.upper().startswith("HARP_")}
    parts = [str(p) for p in loc]
    for n in range(len(parts), 0, -1):
        var = "HARP_" + "__".join(parts[:n]).upper()
        if var in names:
            return names[var]
    return None


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where ``loc`` points (a section, a [[dnn.gpu_types]] entry, the top)."""
    model: Any = HarpSettings
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field_ = model.model_fields.get(str(part))
        if field_ is None:
            return []
        ann = field_.annotation
        model = getattr(ann, "__args__", (ann,))[0] if not hasattr(ann, "model_fields") else ann
        if not hasattr(model, "model_fields"):
            return []
    return list(model.model_fields)


def _in_words(e: ErrorDetails) -> str:
    """One pydantic error as "must be ..., got ..."."""
    import difflib

    t, ctx, got = e["type"], e.get("ctx") or {}, e.get("input")
    key = next((str(p) for p in reversed(e["loc"]) if isinstance(p, str)), "")
    unit = " of seconds" if key.endswith("_s") else ""
    shown = "" if isinstance(got, (dict, list)) else f", got {got!r}"
    if t in ("float_parsing", "float_type", "finite_number"):
        return f"must be a number{unit}{shown}"
    if t in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number{unit}{shown}"
    if t in ("bool_parsing", "bool_type"):
        return f"must be true or false{shown}"
    bounds = {
        "greater_than": ("greater than", "gt"),
        "greater_than_equal": ("at least", "ge"),
        "less_than": ("less than", "lt"),
        "less_than_equal": ("at most", "le"),
    }
    if t in bounds:
        words, k = bounds[t]
        return f"must be {words} {_num(ctx.get(k))}{shown}"
    if t == "literal_error":
        return f"must be one of {ctx.get('expected')}{shown}"
    if t == "extra_forbidden":
        known = _known_keys(tuple(e["loc"]))
        where = "as a section" if len(e["loc"]) < 2 else f"in [{'.'.join(str(p) for p in e['loc'][:-1])}]"
        near = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(known)}"
        return f"unknown key, not permitted {where} ({hint})"
    if t == "missing":
        return "is required"
    if t in ("string_type", "path_type"):
        return f"must be text (a {'path' if t == 'path_type' else 'string'}){shown}"
    if t in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a table of settings{shown}"
    if t == "list_type":
        return f"must be a list{shown}"
    msg = str(e.get("msg", "is not valid"))
    return msg.removeprefix("Value error, ") + shown


def _error_lines(err: ValidationError, path: Path, have_file: bool) -> list[str]:
    """One line per wrong setting, naming the HARP_* variable or the file's key."""
    lines: list[str] = []
    missing: dict[tuple[Any, ...], list[str]] = {}
    for e in err.errors():
        loc = tuple(e["loc"])
        if e["type"] == "missing" and len(loc) > 1:  # "missing a, b, c" once per entry
            missing.setdefault(loc[:-1], []).append(str(loc[-1]))
            continue
        lines.append(_located(loc, _in_words(e), path, have_file))
    for parent, keys in missing.items():
        lines.append(_located(parent, f"missing {', '.join(keys)}", path, have_file))
    return lines


def _located(loc: tuple[Any, ...], what: str, path: Path, have_file: bool) -> str:
    key = ".".join(str(p) for p in loc) or "(top level)"
    var = _env_var(loc)
    if var is not None:
        return f"{var} (environment variable, setting {key}): {what}"
    return f"{key} in {path}: {what}" if have_file else f"{key}: {what}"


def _not_json(exc: Exception) -> str:
    """The HARP_* variable(s) pydantic-settings could not read as JSON, by name (its error names
    only the section): each HARP_SECTION__KEY whose key holds a list or table and whose value is not JSON."""
    import json
    import typing

    bad = []
    for name, value in os.environ.items():
        parts = name.upper().split("__")
        if len(parts) != 2 or not parts[0].startswith("HARP_"):
            continue
        section = HarpSettings.model_fields.get(parts[0][len("HARP_") :].lower())
        model = getattr(section, "annotation", None)
        key = getattr(model, "model_fields", {}).get(parts[1].lower())
        if key is None or typing.get_origin(key.annotation) not in (list, dict):
            continue
        try:
            json.loads(value)
        except ValueError:
            bad.append(f"{name}={value[:60]!r}")
    return ", ".join(sorted(bad)) if bad else f"a HARP_* environment variable ({exc})"


def load_settings(path: str | os.PathLike[str] | None = None) -> HarpSettings:
    """Read and validate the config; raise ConfigError naming every wrong key and why.

    A missing file is only an error when the path was given explicitly
    (``--config`` or ``HARP_CONFIG``): the default path being absent means
    "run on the embedded defaults".  Several wrong settings give one line each.
    """
    from pydantic_settings import SettingsError

    from_env = path is None and bool(os.environ.get("HARP_CONFIG"))
    explicit = path is not None or "HARP_CONFIG" in os.environ
    p = Path(path or os.environ.get("HARP_CONFIG") or DEFAULT_CONFIG_PATH)
    data: dict[str, Any] = {}
    try:
        present = p.exists()
    except OSError as exc:  # a directory on the way this user may not search
        raise ConfigError(f"{p}: cannot read ({exc.strerror})") from None
    if present:
        try:
            with p.open("rb") as fh:
                data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML ({exc}); fix the syntax") from None
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read ({exc.strerror})") from None
    elif from_env:
        raise ConfigError(f"HARP_CONFIG={p}: no such config file; point HARP_CONFIG to an existing file or unset it")
    elif explicit:
        raise ConfigError(f"{p}: no such config file; pass --config with an existing file")
    try:
        return HarpSettings(**data)
    except ValidationError as exc:
        lines = _error_lines(exc, p, p.exists())
    except SettingsError as exc:  # a HARP_* variable that should hold JSON (a list, a table) does not
        raise ConfigError(
            f"{_not_json(exc)} is not valid JSON; give lists and tables as JSON, e.g. HARP_DNN__GPU_TYPES='[...]'"
        ) from None
    if len(lines) == 1:
        raise ConfigError(f"invalid setting {lines[0]}")
    raise ConfigError(f"{len(lines)} invalid settings, one a line:\n" + "\n".join(f"  {ln}" for ln in lines))
