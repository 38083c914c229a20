"""``harp-filter``: the Python half of harp's Slurm cli_filter (plugins/cli_filter.lua).

With ``CliFilterPlugins=cli_filter/lua`` every plain ``sbatch`` runs the Lua
plugin inside the sbatch process, after sbatch has merged ``#SBATCH`` lines,
``SBATCH_*`` variables and the command line.  Lua 5.1 has no sockets and no
JSON parser, so the plugin hands the merged options to this helper and
applies what it prints.  Everything that decides, the JobRequest, the check
of harpd's answer, when to step aside and the wording, is harp-submit's own
code (``request``, ``decision``, ``step_aside``, ``registration``): one
behaviour for both entry points.

Two modes, both reading a file the plugin wrote with ``os.tmpname`` (a 0600
file of the submitting user; only its path crosses the shell, so no user text
is ever parsed by ``/bin/sh``):

``harp-filter --request FILE``
    FILE: ``{"v": 1, "command": "sbatch", "offset": 0, "options": {...},
    "cmdline": [...]}`` where ``options`` is ``slurm.json_cli_options``
    (sbatch's own JSON of every option that is set, plus ``argv``: the
    script and its arguments) and ``cmdline`` is sbatch's raw argv.
    Prints tab-separated lines, and ``ok`` last when the plugin may apply them:

    - ``set<TAB>OPTION<TAB>VALUE``: set ``options[OPTION] = VALUE``
    - ``say<TAB>TEXT``: one line for the user (``slurm.log_info``)
    - ``mark<TAB>TEXT``: a marker for job_submit.lua (see plugins/job_submit.lua)
    - ``register<TAB>JSON``: keep it; hand it back after submission
    - ``ok``: the answer is complete

    Without ``ok`` the plugin applies nothing and logs the ``say`` line:
    the job is submitted exactly as the user wrote it.

``harp-filter --register FILE --job-id N``
    FILE holds a ``register`` payload from the first mode; harpd learns the
    job id from a detached child, so sbatch never waits for it.

Standard library only, and none of the slow-to-import parts (this runs on
every submission).
"""

from __future__ import annotations

import os
import sys

from . import client, registration, route, step_aside
from .decision import BadDecision, check_beside, validate
from .request import MEMORY_OPTIONS, VALIDATORS, Request
from .sbatch_options import SBATCH_TABLE, GetoptError
from .step_aside import MAX_SCRIPT, UNCHANGED, StepAside, resolve_script

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .wire import DecisionDict, RegisterMessage

PROTOCOL = "harp-filter 1"
MAX_REQUEST = 8 << 20  # options of a 4 MiB --wrap and its command line, with room

#: The options harp reads from sbatch's merged options (the rest do not bear on a prediction).
READ_OPTIONS = (*VALIDATORS, "gres", "gpus", "partition", "account", "job-name", "chdir", "array")

#: The Slurm commands the plugin may consult harp for (it decides which are enabled).
COMMANDS = ("sbatch", "salloc", "srun")


class Answer:
    """What the plugin should do, printed as the line protocol of the module docstring."""

    def __init__(self) -> None:
        self.sets: list[tuple[str, str]] = []
        self.says: list[str] = []
        self.mark: str | None = None
        self.register: RegisterMessage | None = None

    def render(self, complete: bool = True) -> str:
        out = [PROTOCOL]
        out += [f"set\t{name}\t{value}" for name, value in self.sets]
        out += [f"say\t{_line(text)}" for text in self.says]
        if self.mark:
            out.append(f"mark\t{_line(self.mark)}")
        if self.register is not None:
            out.append(f"register\t{client.dumps(self.register)}")
        if complete:
            out.append("ok")
        return "\n".join(out) + "\n"


def _line(text: str) -> str:
    """One printable line: the plugin splits on newlines and tabs."""
    return "".join(c if c >= " " and c != "\x7f" else " " for c in text)[:500]


# --- predict mode -------------------------------------------------------------------


def options_argv(options: Mapping[str, object]) -> list[str]:
    """sbatch's merged options as a command line harp-submit's ``Request`` reads.

    sbatch reports values in its own spelling: memory as a bare number of MiB
    (``300``), GRES with a ``gres:`` type prefix.  They are put back in the
    spelling a user would write, which the same parsers accept.
    """
    argv: list[str] = []
    for name in READ_OPTIONS:
        value = options.get(name)
        if not isinstance(value, str):
            continue
        if name in MEMORY_OPTIONS and value.isdigit():
            value += "M"
        elif name == "gres":
            value = ",".join(v[5:] if v.startswith("gres:") else v for v in value.split(","))
        argv.append(f"--{name}={value}")
    return argv


def read_script(path: str, chdir: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(resolved path, text) of the batch script sbatch read; StepAside when unreadable."""
    resolved = resolve_script(path, chdir, environ.get("PATH"))
    if resolved is None:
        raise StepAside(f"cannot find the script {path}; {UNCHANGED}")
    data = _read_capped(resolved, MAX_SCRIPT, f"the script {path}", f"{path} is larger than 4 MiB")
    return resolved, data.decode("utf-8", "surrogateescape")


def build_request(msg: Mapping[str, object], environ: Mapping[str, str]) -> tuple[Request, list[str], dict[str, str]]:
    """The Request for sbatch's merged options, the extra argv for recovery, and the options.

    Raises StepAside for the jobs harp-submit leaves alone too: opted out,
    het jobs, scripts it cannot read (from standard input: sbatch has
    consumed it), values it does not understand.
    """
    command = msg.get("command")
    options = msg.get("options")
    if command not in COMMANDS or not isinstance(options, dict):
        raise StepAside(f"the plugin sent no usable options; {UNCHANGED}")
    if step_aside.disabled(environ):
        raise StepAside()
    if msg.get("offset", 0) != 0:
        raise StepAside()  # a later component of a het job
    cmdline = msg.get("cmdline")
    cmdline = [a for a in cmdline if isinstance(a, str)] if isinstance(cmdline, list) else None
    if cmdline and ":" in cmdline[1:]:
        raise StepAside()  # a het job on the command line: harp-submit leaves those alone too
    args = options.get("argv")
    args = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    opts = {k: v for k, v in options.items() if isinstance(k, str) and isinstance(v, str)}
    wrap = opts.get("wrap")
    path = text = None
    lines: list[str] = []
    if command == "sbatch" and wrap is None:
        if not args:
            raise StepAside()  # script on standard input: sbatch has read it, harp cannot check it
        path, text = read_script(args[0], opts.get("chdir"), environ)
        _, lines = step_aside.script_directives(text)
        path = args[0]
    elif command != "sbatch":
        wrap = " ".join(args)  # srun/salloc: the command is the job
        if "job-name" not in opts and args:
            opts["job-name"] = os.path.basename(args[0])
    argv = options_argv(opts)
    try:
        cli = SBATCH_TABLE.parse(argv)
    except GetoptError as exc:
        raise StepAside(f"cannot read sbatch's options ({exc}); {UNCHANGED}") from None
    request = Request(cli, {}, None, script_path=path, script_text=text, wrap=wrap, harp_lines=lines)
    bad = request.invalid()
    if bad:
        raise StepAside(f"cannot read {bad.replace(' (command line)', '')}; {UNCHANGED}")
    return request, cmdline or [], opts


def changed_request(request: Request, sets: list[tuple[str, str]]) -> Request:
    """The request as it will be submitted: the same options with harp's values on top."""
    argv = options_argv_from(request) + [f"--{n}={v}" for n, v in sets]
    return Request(
        SBATCH_TABLE.parse(argv),
        {},
        None,
        script_path=request.script_path,
        script_text=request.script_text,
        wrap=request.wrap,
        harp_lines=request.harp_lines,
    )


def options_argv_from(request: Request) -> list[str]:
    return [f"--{o.name}={o.value}" for o in request.occurrences]


def recovery_argv(cmdline: list[str], sets: list[tuple[str, str]]) -> list[str] | None:
    """sbatch's own argv with harp's values added, as harp-submit registers it.

    Recovery resubmits from it; the values go just before the script (or a
    ``--``), where the last setting of an option wins.
    """
    args = cmdline[1:]
    try:
        cli = SBATCH_TABLE.parse(args)
    except GetoptError:
        return None
    at = cli.dashdash if cli.dashdash is not None else cli.end
    return args[:at] + [f"--{n}={v}" for n, v in sets] + args[at:]


def describe(option: str, old: str | None, value: str, reason: str) -> str:
    """``--time 00:50:00 -> 00:07:00 (95th percentile of 37 similar runs)``, like harp-submit."""
    head = f"--{option} (not set) -> {value}" if old is None else f"--{option} {old} -> {value}"
    return f"{head} ({reason})" if reason else head


def mark_of(sets: list[tuple[str, str]], olds: dict[str, str | None]) -> str:
    """The job_submit marker: what harp changed, old>new, or ``kept``."""
    if not sets:
        return "cli_filter kept"
    parts = [f"{n}={olds.get(n) or 'unset'}>{v}" for n, v in sets]
    return "cli_filter " + " ".join(parts)


def predict(msg: Mapping[str, object], environ: Mapping[str, str]) -> Answer:
    """Ask harpd about the job and turn its checked decision into option settings."""
    answer = Answer()
    try:
        request, cmdline, opts = build_request(msg, environ)
    except StepAside as aside:
        if aside.reason:
            answer.says.append(aside.reason)
        return answer
    job = request.job_request()
    original = request.resources()
    try:
        reply = step_aside.ask_harpd(job, environ, answer.says.append)
    except client.HarpdUnavailable:
        return answer
    decision: DecisionDict | None = None
    sets: list[tuple[str, str]] = []
    olds: dict[str, str | None] = {}
    try:
        decision, changes = validate(reply, original)
        check_beside(changes, opts.get("tres-per-task"), opts.get("ntasks-per-node"))
        set_memory = [m for m in MEMORY_OPTIONS if m in opts]
        for c in changes:
            if c.option in MEMORY_OPTIONS and set_memory and set_memory != [c.option]:
                # sbatch dies on two memory options, and a plugin cannot unset one
                raise BadDecision(f"it turns --{set_memory[0]} into --{c.option}, which only harp-submit can do")
        for c in changes:
            occ = request.effective(*(MEMORY_OPTIONS if c.option in MEMORY_OPTIONS else (c.option,)))
            olds[c.option] = None if occ is None else occ.value
            sets.append((c.option, c.value))
            answer.says.append(describe(c.option, olds[c.option], c.value, c.reason))
    except BadDecision as exc:
        answer.says.append(f"ignoring harpd's decision: {exc}; {UNCHANGED}")
        decision, sets = None, []
    answer.sets = sets
    if sets or decision is not None:
        answer.mark = mark_of(sets, olds)
    after = changed_request(request, sets)
    argv = recovery_argv(cmdline, sets) if cmdline and msg.get("command") == "sbatch" else None
    token = registration.token_of(reply) if decision is not None else None
    answer.register = registration.message(job, argv, environ, original, after.resources(), decision, token)
    return answer


def _read_capped(path: str, limit: int, what: str, too_large: str) -> bytes:
    """At most ``limit`` bytes of ``path``; StepAside, naming ``what``, when unreadable or larger."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise StepAside(f"cannot read {what} ({exc.strerror or exc}); {UNCHANGED}") from None
    if len(data) > limit:
        raise StepAside(f"{too_large}; {UNCHANGED}")
    return data


def _read_json_file(path: str, limit: int) -> dict:
    data = _read_capped(path, limit, path, f"the plugin's request is larger than {limit >> 20} MiB")
    try:
        msg = client.loads(data.decode("utf-8", "surrogateescape"))
    except ValueError:
        raise StepAside(f"the plugin's request is not JSON; {UNCHANGED}") from None
    if not isinstance(msg, dict):
        raise StepAside(f"the plugin's request is not a JSON object; {UNCHANGED}")
    return msg


# --- entry point --------------------------------------------------------------------

USAGE = "usage: harp-filter --request FILE | --register FILE --job-id N\n"


def _write(text: str) -> None:
    data = text.encode("utf-8", "surrogateescape")
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(1, view) :]
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``harp-filter``; never a traceback (the plugin reads stdout only)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except Exception as exc:  # the plugin submits the job unchanged when no "ok" comes
        _write(
            f"{PROTOCOL}\nsay\tinternal error in harp-filter ({type(exc).__name__}: {_line(str(exc))}); {UNCHANGED}\n"
        )
        return 1


def _main(args: list[str]) -> int:
    if len(args) == 2 and args[0] == "--request":
        try:
            msg = _read_json_file(args[1], MAX_REQUEST)
        except StepAside as aside:
            _write(f"{PROTOCOL}\nsay\t{aside.reason}\n")
            return 1
        _write(predict(msg, dict(os.environ)).render())
        return 0
    if len(args) == 4 and args[0] == "--register" and args[2] == "--job-id":
        return register(args[1], args[3], dict(os.environ))
    os.write(2, USAGE.encode())
    return 2


def register(path: str, job_id: str, environ: Mapping[str, str]) -> int:
    """Tell harpd the job id of a submission the plugin changed (or consulted harpd about)."""
    try:
        payload = _read_json_file(path, MAX_REQUEST)
    except StepAside:
        return 1
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if not job_id.isdigit() or payload.get("op") != "register":
        return 1
    timeout = registration.timeout_s(environ)
    registration.register_in_background(route.choose(environ)[0], {**payload, "job_id": job_id}, timeout, environ)
    return 0


if __name__ == "__main__":
    sys.exit(main())
