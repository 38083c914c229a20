"""``harp-submit``: sbatch, with right-sized resource requests, that never loses a job.

Users alias ``sbatch=harp-submit``, so everything here behaves exactly like
sbatch (same argv, same output, same exit code: sbatch's own) except that
the resource request may be rewritten on harpd's advice.  Whenever harp
cannot help with certainty (no daemon, a slow or odd answer, input it does
not fully understand, an internal error) the user's submission goes to
sbatch untouched; harp's own lines go to stderr, prefixed ``harp:``.

The flow: read argv the way sbatch does (``sbatch_options``), find and read
the script the way sbatch does, merge #SBATCH lines, environment and command
line (``request``), ask harpd (``client``), check its decision
(``decision``), apply it where each value lives (``rewrite``), run sbatch,
then register the job id with harpd.

Start-up time matters (this runs on every submission), so the module avoids
subprocess/signal/json/socket/re (each drags in ``enum`` and more): processes
are started with ``os.posix_spawn`` or replaced with ``os.execve``.
"""

from __future__ import annotations

import os
import stat
import sys

from . import __version__, client, directives, harp_lines
from .decision import BadDecision, validate
from .request import Request
from .rewrite import RewriteError, Rewritten, apply, build
from .sbatch_options import CLI_TABLE, HARP_OPTION_NAMES, SBATCH_TABLE, GetoptError, ParsedArgs

MAX_SCRIPT = 4 << 20  # bytes; slurmctld's default max_script_size is 4 MB
REGISTER_TIMEOUT_S = 0.5  # registration must never keep the user waiting
_DISABLE_VALUES = ("1", "yes", "true", "on")

HARP_HELP = """\
harp-submit options (removed before sbatch runs):
      --harp-off              submit exactly as sbatch would, without asking harpd
      --harp-verbose          say what harp changed even with --parsable/--quiet
      --harp-dry-run          print the rewritten script and the decision; submit nothing
      --harp-explain          print the details of harpd's prediction
  A '#HARP off' line in the script, or HARP_DISABLE=1, also turns harp off.
  HARP_SOCKET, HARP_CONFIG and HARP_TIMEOUT (seconds, default 2) find and bound harpd.
"""


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``harp-submit``: sbatch's exit code.

    Run as the program (``argv`` None) it ends the process itself with that
    code, skipping the interpreter's clean-up, which costs more than harp's
    whole round trip to harpd; with an explicit ``argv`` it returns the code.
    """
    run = Submit(list(sys.argv[1:] if argv is None else argv), os.environ)
    code = _run(run)
    if argv is None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)
    return code


def _run(run: "Submit") -> int:
    try:
        return run.main()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # never a traceback, never a lost job
        if run.submitted:
            run.warn(f"internal error after submission ({type(exc).__name__}: {exc})")
            return run.exit_code if run.exit_code is not None else 1
        run.warn(f"internal error ({type(exc).__name__}: {exc}); submitting your job unchanged")
        try:
            return run.untouched(run.fallback_argv())
        except Exception as again:
            run.warn(f"cannot run sbatch ({type(again).__name__}: {again})")
            return 1


class Submit:
    """One invocation of harp-submit."""

    def __init__(self, args: list[str], environ: os._Environ[str] | dict[str, str]):
        self.args = args
        self.environ = environ
        self.argv: list[str] | None = None  # args without harp's options
        self.stdin_data: bytes | None = None  # the script, when it came on our stdin
        self.submitted = False
        self.exit_code: int | None = None
        self.dry_run = False
        self.verbose = False
        self.explain = False
        self.quiet = False

    # --- output -------------------------------------------------------------------

    def warn(self, text: str) -> None:
        _write(2, f"harp: {text}\n")

    def info(self, text: str) -> None:
        if not self.quiet or self.verbose or self.dry_run:
            _write(2, f"harp: {text}\n")

    # --- the flow -------------------------------------------------------------------

    def main(self) -> int:
        try:
            parsed = CLI_TABLE.parse(self.args)
        except GetoptError:
            return self.untouched(self.fallback_argv())  # sbatch prints the error
        harp = {o.name for o in parsed.options if o.name in HARP_OPTION_NAMES}
        drop = {o.index for o in parsed.options if o.name in HARP_OPTION_NAMES}
        argv = [a for i, a in enumerate(self.args) if i not in drop]
        self.argv = argv
        self.dry_run = "harp-dry-run" in harp
        self.verbose = "harp-verbose" in harp
        self.explain = "harp-explain" in harp
        cli = SBATCH_TABLE.parse(argv)
        names = {o.name for o in cli.options}
        if names & {"help", "version", "usage"}:
            return self.help_or_version(argv, names)
        self.quiet = bool(names & {"parsable", "quiet"})
        if "harp-off" in harp or self.environ.get("HARP_DISABLE", "").strip().lower() in _DISABLE_VALUES:
            return self.untouched(argv)

        request = self.read_request(argv, cli)
        if request is None:
            return self.untouched(argv)
        if request.has("parsable") or request.has("quiet"):
            self.quiet = True
        return self.decide_and_submit(request, argv)

    def read_request(self, argv: list[str], cli: ParsedArgs) -> Request | None:
        """Read the script and settings as sbatch will; None when harp must step aside.

        Stepping aside covers everything sbatch would refuse (it then prints
        its own error) and everything harp does not fully understand.
        """
        wrap = None
        for o in cli.options:
            if o.name == "wrap":
                wrap = o.value
        positional = argv[cli.end :]
        path: str | None = None
        if wrap is not None:
            if positional:
                return None  # "Script arguments not permitted with --wrap option"
            data = None
        elif positional:
            path = positional[0]
            chdir = None
            for o in cli.options:
                if o.name == "chdir":
                    chdir = o.value
            resolved = resolve_script(path, chdir, self.environ.get("PATH"))
            if resolved is None:
                return None
            try:
                if not stat.S_ISREG(os.stat(resolved).st_mode):
                    return None  # a pipe or device (/dev/stdin, <(...)): reading it would leave sbatch nothing
                with open(resolved, "rb") as fh:
                    if os.fstat(fh.fileno()).st_size > MAX_SCRIPT:
                        self.warn(f"{path} is larger than 4 MiB; submitting it unchanged")
                        return None
                    data = fh.read(MAX_SCRIPT + 1)
            except OSError:
                return None
            if len(data) > MAX_SCRIPT:
                self.warn(f"{path} is larger than 4 MiB; submitting it unchanged")
                return None
        else:
            try:
                data = _read_all(0)
            except OSError:
                return None
            self.stdin_data = data
            if len(data) > MAX_SCRIPT:
                self.warn("the script on standard input is larger than 4 MiB; submitting it unchanged")
                return None
        text = None
        script = None
        lines: list[str] = []
        if data is not None:
            if sbatch_rejects(data):
                return None
            text = data.decode("utf-8", "surrogateescape")
            script = directives.parse(text)
            if script.error or script.hetjob:
                return None
            lines = harp_lines.find(text)
            if harp_lines.is_off(lines):
                return None
        request = Request(cli, self.environ, script, script_path=path, script_text=text, wrap=wrap, harp_lines=lines)
        if request.invalid():
            return None  # sbatch reports the bad value itself
        return request

    def decide_and_submit(self, request: Request, argv: list[str]) -> int:
        timeout, problem = client.timeout_s(self.environ)
        if problem:
            self.warn(problem)
        path = client.socket_path(self.environ)
        job = request.job_request()
        try:
            answer = client.call(path, {"op": "predict", "job": job}, timeout)
        except client.HarpdUnavailable as exc:
            self.warn(f"{exc.reason}; submitting your job unchanged")
            return self.submit(request, argv, None, None, job, exc.reachable)
        try:
            decision, changes = validate(answer, request.resources())
        except BadDecision as exc:
            self.warn(f"ignoring harpd's decision: {exc}; submitting your job unchanged")
            return self.submit(request, argv, None, None, job, True)
        if self.explain:
            self.show_explain(decision)
        message = decision.get("message")
        if isinstance(message, str) and message and "\n" not in message:
            self.info(message[:300])
        if not changes:
            return self.submit(request, argv, None, decision, job, True)
        try:
            rewritten = apply(request, argv, changes)
        except (RewriteError, ValueError) as exc:
            self.warn(f"could not apply harpd's decision: {exc}; submitting your job unchanged")
            return self.submit(request, argv, None, None, job, True)
        for a in rewritten.applied:
            self.info(a.describe())
        return self.submit(request, argv, rewritten, decision, job, True)

    def show_explain(self, decision: dict) -> None:
        model = decision.get("model")
        _write(2, f"harp: explain: model: {model if isinstance(model, str) else 'none'}\n")
        details = decision.get("explain")
        if isinstance(details, dict):
            for key, value in details.items():
                _write(2, f"harp: explain: {key}: {_compact(value)}\n")
        limits = decision.get("limits")
        if isinstance(limits, dict):
            _write(2, f"harp: explain: limits: {_compact(limits)}\n")
        for c in decision.get("changes") or []:
            if isinstance(c, dict):
                _write(2, f"harp: explain: change: {_compact(c)}\n")

    # --- running sbatch -------------------------------------------------------------

    def submit(
        self,
        request: Request,
        argv: list[str],
        rewritten: Rewritten | None,
        decision: dict | None,
        job: dict,
        register: bool,
    ) -> int:
        """Run sbatch on the (possibly rewritten) submission, then register the job."""
        environ = None
        stdin = self.stdin_data
        final = argv
        after = request
        if rewritten is not None:
            final = rewritten.argv
            if rewritten.env_changed:
                environ = rewritten.environ
            if rewritten.script_changed:
                final = _stdin_argv(rewritten.argv, request)
                assert rewritten.script_text is not None
                stdin = rewritten.script_text.encode("utf-8", "surrogateescape")
            after = build(rewritten.argv, rewritten.environ, request, rewritten.script_text)
        if self.dry_run:
            return self.show_dry_run(final, environ, stdin, request, decision)
        payload = original_payload = None
        if register:
            payload = {
                "op": "register",
                # argv and SBATCH_* as sbatch gets them: recovery resubmits from them
                "job": {**job, "argv": list(final), "sbatch_env": {k: v for k, v in (environ or self.environ).items() if k.startswith("SBATCH_")}},
                "original": request.resources(),
                "submitted": after.resources(),
                "decision": decision,
            }
            original_payload = {**payload, "submitted": payload["original"], "decision": None}
        original = None
        # fall back to the user's own request if sbatch refuses harp's, unless a
        # failure cannot tell whether a job exists (--wait, --quiet) or none is made (--test-only)
        if rewritten is not None and not any(request.has(o) for o in ("wait", "quiet", "test-only")):
            original = (argv, original_payload)
        return self.run_sbatch(final, environ, stdin, payload, original=original)

    def untouched(self, argv: list[str]) -> int:
        """Hand the submission to sbatch exactly as given (sbatch reports any problem)."""
        if self.dry_run:
            return self.show_dry_run(argv, None, self.stdin_data, None, None)
        return self.run_sbatch(argv, None, self.stdin_data, None)

    def fallback_argv(self) -> list[str]:
        if self.argv is not None:
            return self.argv
        return [a for a in self.args if a not in ("--" + n for n in HARP_OPTION_NAMES)]

    def help_or_version(self, argv: list[str], names: set[str]) -> int:
        if self.dry_run:
            return self.show_dry_run(argv, None, None, None, None)
        code = self.run_sbatch(argv, None, None, None, keep_stdout=True)
        if "help" in names:
            _write(1, "\n" + HARP_HELP)
        if "help" in names or "version" in names:
            _write(1, f"harp-submit {__version__}\n")
        return code

    def show_dry_run(self, argv: list[str], environ: dict | None, stdin: bytes | None, request: Request | None, decision: dict | None) -> int:
        changed_env = ""
        if environ is not None:
            diff = [f"{k}={_quote(v)}" for k, v in environ.items() if self.environ.get(k) != v]
            diff += [f"-u {k}" for k in self.environ if k not in environ]
            changed_env = " ".join(diff) + " " if diff else ""
        cmd = " ".join(_quote(a) for a in ["sbatch", *argv])
        if stdin is not None:
            cmd += " < (script below)"
        _write(2, f"harp: dry run, nothing submitted; would run: {changed_env}{cmd}\n")
        if decision is not None:
            _write(2, f"harp: decision: {_compact(decision)}\n")
        if stdin is not None:
            _write(1, stdin)
        elif request is not None and request.script_text is not None:
            _write(1, request.script_text.encode("utf-8", "surrogateescape"))
        return 0

    def run_sbatch(
        self,
        argv: list[str],
        environ: dict | None,
        stdin: bytes | None,
        register: dict | None,
        keep_stdout: bool = False,
        original: tuple[list[str], dict | None] | None = None,
    ) -> int:
        """Run sbatch (replacing this process when nothing is left to do afterwards).

        ``original``: the user's own submission (argv, registration), given when
        harp changed the request.  If sbatch then refuses the changed request
        before creating a job, the original is submitted instead: harp's
        advice must never cost the user the job.
        """
        sbatch = find_sbatch(self.environ)
        if sbatch is None:
            self.warn("cannot find sbatch in PATH (set HARP_SBATCH to its path)")
            return 127
        env = environ if environ is not None else self.environ
        # harp's cli_filter plugin (plugins/cli_filter.lua) steps aside for this sbatch
        env = {**env, "HARP_SUBMIT_PID": str(os.getpid())}
        if stdin is None and register is None and not keep_stdout:
            _reset_signals()
            try:
                os.execve(sbatch, ["sbatch", *argv], env)
            except OSError as exc:
                self.warn(f"cannot run {sbatch}: {exc.strerror or exc}")
                return 127
        on_line = None
        if register is not None:
            timeout = min(REGISTER_TIMEOUT_S, client.timeout_s(self.environ)[0])
            path = client.socket_path(self.environ)

            def on_line(line: bytes) -> None:
                job_id = parse_job_id(line)
                if job_id is not None:
                    register_in_background(path, {**register, "job_id": job_id}, timeout)

        self.submitted = True
        try:
            code, held = spawn(sbatch, argv, env, stdin, on_line, hold_stderr=original is not None)
        except SpawnError as exc:
            self.submitted = False
            self.warn(f"cannot run {sbatch}: {exc}")
            return 127
        if held is not None:
            if code != 0 and original is not None and _refused_before_submission(held):
                reason = _last_error(held)
                self.warn(f"sbatch refused the changed request ({reason}); submitting your job as you wrote it")
                orig_argv, orig_register = original
                return self.run_sbatch(orig_argv, None, self.stdin_data, orig_register)
            _write(2, held)
        self.exit_code = code
        return code


# --- helpers ----------------------------------------------------------------------


def _write(fd: int, data: str | bytes) -> None:
    """Write everything, unbuffered; a closed pipe is not harp's problem to report."""
    buf = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    view = memoryview(buf)
    try:
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError:
        pass


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


_SAFE_ARG = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./:=,+%@")


def _quote(arg: str) -> str:
    if arg and all(c in _SAFE_ARG for c in arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def _compact(value: object) -> str:
    try:
        return client.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def sbatch_rejects(data: bytes) -> bool:
    """Whether sbatch refuses this script outright (it prints why itself)."""
    return (
        not data
        or not data.strip(b" \t\n\v\f\r")
        or not data.startswith(b"#!")
        or b"\0" in data
        or b"\r\n" in data
    )


def resolve_script(name: str, chdir: str | None, path_env: str | None) -> str | None:
    """The file sbatch will read for script argument ``name`` (its ``search_path``).

    As verified with sbatch 22.05: a name starting with ``/`` or ``.`` is
    opened as given (``./x`` relative to the current directory, even with
    ``--chdir``); any other name (``x``, ``sub/x``) is looked for in the
    ``--chdir`` directory (else the current one), then along PATH.  None when
    sbatch will not find a file either.
    """
    here = os.getcwd()

    def exists(p: str) -> bool:
        return os.path.exists(p) and not os.path.isdir(p)

    if name.startswith(("/", ".")):
        return name if exists(name) else None
    base = os.path.join(here, chdir) if chdir else here
    for d in [base, *(path_env.split(":") if path_env else [])]:
        if not d:
            continue
        cand = os.path.join(os.path.join(base, d) if d.startswith(".") else d, name)
        if exists(cand):
            return cand
    return None


def _refused_before_submission(stderr: bytes) -> bool:
    """Whether sbatch's errors show that no job was created.

    Called only when sbatch failed without printing a job id.  A lost
    connection ("timed out", "Zero Bytes were transmitted") may have
    happened after the controller created the job: then nothing is retried.
    Nor when the controller was never reached ("Unable to contact slurm
    controller"): it refused nothing of harp's, the user's request would
    fail the same way, and sbatch's own error must reach the user as is.
    """
    text = stderr.decode("utf-8", "replace")
    if "Unable to contact slurm controller" in text:
        return False
    return "timed out" not in text and "Zero Bytes" not in text


def _last_error(stderr: bytes) -> str:
    lines = [x.strip() for x in stderr.decode("utf-8", "replace").splitlines() if x.strip()]
    line = lines[-1] if lines else "no reason given"
    for prefix in ("sbatch: error: ", "sbatch: fatal: ", "sbatch: "):
        if line.startswith(prefix):
            line = line[len(prefix) :]
            break
    return line[:200]


def find_sbatch(environ: dict | os._Environ[str]) -> str | None:
    """The real sbatch: HARP_SBATCH, else the first ``sbatch`` on PATH that is not harp-submit."""
    explicit = environ.get("HARP_SBATCH")
    if explicit:
        return explicit
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    for d in (environ.get("PATH") or os.defpath).split(":"):
        cand = os.path.join(d or ".", "sbatch")
        if os.access(cand, os.X_OK) and not os.path.isdir(cand) and os.path.realpath(cand) != me:
            return cand
    return None


def parse_job_id(line: bytes) -> str | None:
    """The job id in sbatch's first line: ``Submitted batch job 12`` or ``12`` / ``12;cluster``."""
    text = line.decode("ascii", "replace").strip()
    prefix = "Submitted batch job "
    if text.startswith(prefix):
        word = text[len(prefix) :].split(" ", 1)[0]
        return word if word.isdigit() else None
    word = text.split(";", 1)[0]
    return word if word.isdigit() else None


def _stdin_argv(argv: list[str], request: Request) -> list[str]:
    """argv for sbatch reading the rewritten script from standard input.

    sbatch reads stdin when no script is named; script arguments need a file
    name, so then the script is ``/dev/stdin``.  sbatch names stdin jobs
    ``sbatch`` (``stdin`` for /dev/stdin): unless the user chose a name, the
    job keeps its script's name with ``--job-name``.
    """
    cli = SBATCH_TABLE.parse(argv)
    opts = argv[: cli.end]
    rest = argv[cli.end + 1 :] if request.script_path is not None else []
    if request.script_path is not None and request.value("job-name") is None:
        at = cli.dashdash if cli.dashdash is not None else len(opts)
        opts = opts[:at] + [f"--job-name={os.path.basename(request.script_path)}"] + opts[at:]
    return opts + (["/dev/stdin", *rest] if rest else [])


def _reap_children() -> None:
    """Collect a registration child that has already finished (never wait for one)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _signals() -> tuple:
    import _signal

    names = ("SIGPIPE", "SIGXFSZ", "SIGXFZ")
    return _signal, tuple(getattr(_signal, n) for n in names if hasattr(_signal, n))


def _reset_signals() -> None:
    """Give sbatch the signal dispositions it would get from a shell (Python ignores SIGPIPE)."""
    _signal, sigs = _signals()
    for s in sigs:
        _signal.signal(s, _signal.SIG_DFL)


def register_in_background(path: str, message: dict, timeout: float) -> None:
    """Tell harpd about the new job from a detached child, so the user never waits for it.

    The child lets go of the terminal and of sbatch's pipes at once (a shell
    or ``$(...)`` waiting for end-of-file must not wait for it), tries once
    within ``timeout``, and exits; a failure is harpd's to log, never the
    user's problem.  Without fork, registration happens in line.
    """
    try:
        pid = os.fork()
    except OSError:
        pid = 0
        inline = True
    else:
        inline = False
        if pid:
            return
    try:
        if not inline:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, 256)
        client.call(path, message, timeout)
    except BaseException:
        pass
    finally:
        if not inline:
            os._exit(0)


class SpawnError(OSError):
    """sbatch could not be started (so nothing was submitted)."""


def spawn(
    path: str,
    argv: list[str],
    env: dict | os._Environ[str],
    stdin: bytes | None,
    on_first_line,
    hold_stderr: bool = False,
) -> tuple[int, bytes | None]:
    """Run sbatch, feed it ``stdin`` (if any), pass its output through; (exit code, held stderr).

    stdout is relayed as it comes (``--wait`` prints the job id long before
    sbatch exits) and its first line goes to ``on_first_line`` for the job
    id.  With ``hold_stderr``, sbatch's stderr is kept back until stdout
    shows that a job exists; if sbatch ends first, the held bytes are
    returned unprinted so the caller can decide (see ``Submit.run_sbatch``).
    While sbatch runs, harp-submit ignores Ctrl-C like a shell does, and then
    dies of the same signal sbatch died of.
    """
    _signal, sigs = _signals()
    out_r, out_w = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, out_w, 1)]
    in_r = in_w = err_r = err_w = -1
    if stdin is not None:
        in_r, in_w = os.pipe()
        actions.append((os.POSIX_SPAWN_DUP2, in_r, 0))
    if hold_stderr:
        err_r, err_w = os.pipe()
        actions.append((os.POSIX_SPAWN_DUP2, err_w, 2))
    try:
        pid = os.posix_spawn(path, ["sbatch", *argv], env, file_actions=actions, setsigdef=sigs + (_signal.SIGINT,))
    except OSError as exc:
        for fd in (out_r, in_w, err_r):
            if fd >= 0:
                os.close(fd)
        raise SpawnError(exc.strerror or str(exc)) from None
    finally:
        for fd in (out_w, in_r, err_w):
            if fd >= 0:
                os.close(fd)
    old_int = _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    relay = _Relay(on_first_line, hold_stderr)
    try:
        relay.run(in_w, stdin, out_r, err_r)
        _, status = os.waitpid(pid, 0)
        _reap_children()
    finally:
        _signal.signal(_signal.SIGINT, old_int)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way, so the shell sees it
        sig = -code
        try:
            _signal.signal(sig, _signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        return 128 + sig, relay.held
    return code, relay.held


class _Relay:
    """Moves bytes between harp-submit's standard streams and sbatch's pipes."""

    MAX_HELD = 1 << 20

    def __init__(self, on_first_line, hold_stderr: bool):
        self.on_first_line = on_first_line
        self.first: bytes | None = b""  # stdout up to its first newline
        self.held: bytes | None = b"" if hold_stderr else None
        self.stdout_ok = True

    def run(self, in_w: int, stdin: bytes | None, out_r: int, err_r: int) -> None:
        if err_r < 0:
            # the common case needs no poll(): feed stdin whole, then relay stdout
            if in_w >= 0:
                _feed(in_w, stdin or b"")
            while chunk := os.read(out_r, 1 << 16):
                self.stdout(chunk)
            os.close(out_r)
            self.done()
            return
        import select  # only here: polling three pipes

        poller = select.poll()
        view = memoryview(stdin or b"")
        live = {out_r, err_r}
        poller.register(out_r, select.POLLIN)
        poller.register(err_r, select.POLLIN)
        if in_w >= 0:
            os.set_blocking(in_w, False)
            poller.register(in_w, select.POLLOUT)
            live.add(in_w)
        while live:
            for fd, _ in poller.poll():
                if fd == in_w:
                    try:
                        view = view[os.write(in_w, view[: 1 << 16]) :]
                    except BlockingIOError:
                        continue
                    except OSError:
                        view = view[:0]  # sbatch stopped reading (it reports why)
                    if not view:
                        poller.unregister(in_w)
                        os.close(in_w)
                        live.discard(in_w)
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    poller.unregister(fd)
                    os.close(fd)
                    live.discard(fd)
                elif fd == out_r:
                    self.stdout(chunk)
                else:
                    self.stderr(chunk)
        self.done()

    def stdout(self, chunk: bytes) -> None:
        if self.held is not None:  # output on stdout: the job exists, let stderr through
            _write(2, self.held)
            self.held = None
        if self.stdout_ok:
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(1, view) :]
            except OSError:
                self.stdout_ok = False  # keep draining so sbatch never blocks
        if self.first is not None:
            self.first += chunk
            if b"\n" in self.first:
                line, self.first = self.first.split(b"\n", 1)[0], None
                if self.on_first_line is not None:
                    self.on_first_line(line)

    def stderr(self, chunk: bytes) -> None:
        if self.held is None:
            _write(2, chunk)
            return
        self.held += chunk
        if len(self.held) > self.MAX_HELD:
            _write(2, self.held)
            self.held = None

    def done(self) -> None:
        if self.first and self.on_first_line is not None:
            self.on_first_line(self.first)


def _feed(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # sbatch stopped reading (it reports why)
    finally:
        os.close(fd)
