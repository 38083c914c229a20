"""What the user asked for: sbatch's options from all three places, merged as sbatch merges them.

sbatch reads ``#SBATCH`` lines first, then its input environment variables
(``SBATCH_TIMELIMIT``...), then the command line; a later setting overrides an
earlier one.  ``Request`` keeps every occurrence with where it came from, so
that a change can be written back exactly where the effective value lives
(see ``rewrite``), and derives the ``JobRequest`` harpd predicts from.
"""

from __future__ import annotations

import os

from . import input_size, units
from .directives import Script
from .sbatch_options import ENV_OPTIONS, ParsedArgs, ParsedOption, tres_per_task_cpus

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from .wire import JobRequestDict, ResourcesDict

SCRIPT, ENV, CLI = "script", "environment", "command line"  # in increasing precedence

COMMAND_LINES = 20  # how many of the script's command lines harpd gets
COMMANDS_MAX_CHARS = 4096

#: Resource options harp reads (and may change); each value is checked the way
#: sbatch checks it, so an invalid one reaches sbatch untouched.
VALIDATORS: dict[str, Callable[[str], Any]] = {
    "time": units.parse_time,
    "mem": units.parse_mem,
    "mem-per-cpu": units.parse_mem,
    "mem-per-gpu": units.parse_mem,
    "cpus-per-task": units.parse_int,
    "ntasks": units.parse_int,
    "nodes": units.parse_nodes,
    "ntasks-per-node": units.parse_int,
    "time-min": units.parse_time,
    "signal": units.parse_signal_lead,
}

MEMORY_OPTIONS = ("mem", "mem-per-cpu", "mem-per-gpu")  # sbatch allows only one of them


class Occurrence:
    """One setting of an option: its value and where it came from."""

    __slots__ = ("source", "name", "value", "option", "env_var")

    def __init__(
        self, source: str, name: str, value: str | None, option: ParsedOption | None = None, env_var: str | None = None
    ):
        self.source = source
        self.name = name
        self.value = value
        self.option = option  # for SCRIPT (token indices) and CLI (argv indices)
        self.env_var = env_var  # for ENV

    def where(self) -> str:
        return f"${self.env_var}" if self.env_var else self.source

    def __repr__(self) -> str:
        return f"Occurrence({self.source!r}, {self.name!r}, {self.value!r})"


class Request:
    """All settings of a submission, in the order sbatch applies them."""

    def __init__(
        self,
        cli: ParsedArgs,
        environ: Mapping[str, str],
        script: Script | None,
        *,
        script_path: str | None = None,
        script_text: str | None = None,
        wrap: str | None = None,
        harp_lines: list[str] | None = None,
    ):
        self.cli = cli
        self.environ = environ
        self.script = script
        self.script_path = script_path
        self.script_text = script_text
        self.wrap = wrap
        self.harp_lines = harp_lines or []
        occ: list[Occurrence] = []
        if script is not None:
            occ += [Occurrence(SCRIPT, o.name, o.value, o) for o in script.options()]
        for var, name in ENV_OPTIONS.items():
            if var in environ:
                occ.append(Occurrence(ENV, name, environ[var], env_var=var))
        occ += [Occurrence(CLI, o.name, o.value, o) for o in cli.options]
        # sbatch ignores a memory variable when the script or command line sets
        # a different memory option (and refuses two different ones there)
        set_mem = {o.name for o in occ if o.source != ENV and o.name in MEMORY_OPTIONS}
        self.occurrences = [o for o in occ if not (o.source == ENV and o.name in MEMORY_OPTIONS and set_mem - {o.name})]

    # --- lookups ------------------------------------------------------------------

    def effective(self, *names: str) -> Occurrence | None:
        """The setting that wins among ``names`` (the last one sbatch applies)."""
        for o in reversed(self.occurrences):
            if o.name in names:
                return o
        return None

    def value(self, name: str) -> str | None:
        o = self.effective(name)
        return o.value if o else None

    def has(self, name: str) -> bool:
        return any(o.name == name for o in self.occurrences)

    def invalid(self) -> str | None:
        """Why sbatch would reject one of the resource values, or None.

        Every occurrence counts, not only the effective one: sbatch checks
        each value as it reads it.
        """
        for o in self.occurrences:
            check = VALIDATORS.get(o.name)
            if check is None or o.value is None:
                continue
            try:
                check(o.value)
            except ValueError:
                return f"--{o.name}={o.value} ({o.where()})"
        return None

    # --- what harpd is told ---------------------------------------------------------

    def resources(self) -> ResourcesDict:
        """The effective request as the protocol's ``Resources`` (None: not given).

        ``time_s`` is the limit sbatch will apply (whole minutes); an explicit
        UNLIMITED reads as None too.  ``nodes`` is the minimum node count.
        """

        def parsed(name: str, fn: Callable[[str], Any]) -> Any:
            v = self.value(name)
            if v is None:
                return None
            try:
                return fn(v)
            except ValueError:
                return None

        nodes = parsed("nodes", units.parse_nodes)
        return {
            "time_s": parsed("time", units.parse_time),
            "mem_mb": parsed("mem", units.parse_mem),
            "mem_per_cpu_mb": parsed("mem-per-cpu", units.parse_mem),
            "mem_per_gpu_mb": parsed("mem-per-gpu", units.parse_mem),
            "cpus_per_task": self._cpus_per_task(parsed("cpus-per-task", units.parse_int)),
            "ntasks": parsed("ntasks", units.parse_int),
            "nodes": nodes[0] if nodes else None,
            "gres": _text(self.value("gres")),
            "gpus": _text(self.value("gpus")),
            "partition": _text(self.value("partition")),
            "time_min_s": parsed("time-min", units.parse_time),
            "signal_s": parsed("signal", units.parse_signal_lead),
            "deadline": True if self.value("deadline") else None,
            "requeue": self._requeue(),
        }

    def _requeue(self) -> bool | None:
        """``--requeue`` (True) or ``--no-requeue`` (False), whichever sbatch applies last; None: neither.

        With ``--signal`` it declares a job that checkpoints on the signal and
        may be requeued to resume (``harpd.dnn.checkpoint.resumable``).
        ``--requeue=expedite`` (25.11) still requeues.
        """
        o = self.effective("requeue", "no-requeue")
        return None if o is None else o.name == "requeue"

    def _cpus_per_task(self, given: int | None) -> int | None:
        """``--cpus-per-task``, or the CPU count of ``--tres-per-task=cpu=N`` (23.02+).

        sbatch lets a command-line or script setting of either override the
        other's environment variable (and refuses both outside it); harp
        follows that, so either spelling is the same cores request.
        """
        tres = self.effective("tres-per-task")
        cpus = tres_per_task_cpus(tres.value) if tres is not None else None
        if cpus is None:
            return given
        plain = self.effective("cpus-per-task")
        if plain is not None and given is not None and plain.source != ENV and tres is not None and tres.source == ENV:
            return given
        return cpus

    def job_name(self) -> str:
        """The name Slurm will give the job."""
        name = self.value("job-name")
        if name is not None:
            return name
        if self.wrap is not None:
            return "wrap"
        if self.script_path is not None:
            return os.path.basename(self.script_path)
        return "sbatch"

    def cwd(self) -> str:
        d = self.value("chdir")
        here = os.getcwd()
        return os.path.normpath(os.path.join(here, d)) if d else here

    def commands(self) -> list[str]:
        """The script's first command lines, for harpd's job signature."""
        if self.wrap is not None:
            lines = [self.wrap]
        else:
            lines = []
            for raw in (self.script_text or "").split("\n")[1:]:
                line = raw.strip(" \t\r\v\f")
                if not line or line.startswith("#"):
                    continue
                lines.append(line)
                if len(lines) >= COMMAND_LINES:
                    break
        out: list[str] = []
        left = COMMANDS_MAX_CHARS
        for line in lines:
            line = _text(line) or ""
            if len(line) > left:
                line = line[:left]
            out.append(line)
            left -= len(line)
            if left <= 0:
                break
        return out

    def library_function(self) -> str | None:
        """The function a submitit job runs (``harp_submit.library_job``), imported only for submitit's scripts:
        the cli_filter path loads only fast modules."""
        if not self.script_path or not os.path.basename(self.script_path).startswith(".submission_file_"):
            return None
        from . import library_job

        return library_job.submitit_function(self.script_path, self.commands())

    def job_request(self) -> JobRequestDict:
        """The protocol's ``JobRequest``."""
        return {
            "partition": _text(self.value("partition")),
            "account": _text(self.value("account")),
            "job_name": _text(self.job_name()),
            "script_name": _text(os.path.basename(self.script_path)) if self.script_path else None,
            "signature": None,  # harpd computes it from "commands"
            "cwd": _text(self.cwd()),
            "array_size": array_size(self.value("array")),
            "request": self.resources(),
            "harp_lines": [_text(x) or "" for x in self.harp_lines],
            "commands": self.commands(),
            "function": self.library_function(),
            "input_bytes": input_size.input_bytes(
                self.commands(), self.cwd(), os.path.basename(self.script_path) if self.script_path else None
            ),
        }


def _text(s: str | None) -> str | None:
    """A string safe to send as JSON text: undecodable bytes become U+FFFD."""
    if s is None:
        return None
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def array_size(spec: str | None) -> int | None:
    """How many tasks an ``--array`` spec (``0-15%4``, ``1,3,5-9:2``) makes; None if unreadable."""
    if not spec:
        return None
    spec = spec.split("%", 1)[0]
    total = 0
    try:
        for part in spec.split(","):
            step = 1
            if ":" in part:
                part, step_s = part.split(":", 1)
                step = int(step_s)
            if "-" in part:
                lo_s, hi_s = part.split("-", 1)
                lo, hi = int(lo_s), int(hi_s)
                if step <= 0 or hi < lo or lo < 0:
                    return None
                total += (hi - lo) // step + 1
            else:
                if int(part) < 0:
                    return None
                total += 1
    except ValueError:
        return None
    return total
