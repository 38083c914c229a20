"""``harp-submit``: sbatch, with right-sized resource requests, that never loses a job.

Users alias ``sbatch=harp-submit``, so everything here behaves exactly like
sbatch (same argv, same output, same exit code: sbatch's own) except that
the resource request may be rewritten on harpd's advice.  Whenever harp
cannot help with certainty (no daemon, a slow or odd answer, input it does
not fully understand, an internal error) the user's submission goes to
sbatch untouched; harp's own lines go to stderr, prefixed ``harp:``.

The flow: take harp's own ``--harp-...`` options out of argv (``harp_options``;
an unknown one is an error and nothing is submitted), read argv the way
sbatch does (``sbatch_options``), find and read
the script the way sbatch does, merge #SBATCH lines, environment and command
line (``request``), ask harpd (``step_aside.ask_harpd``), check its decision
(``decision``), apply it where each value lives (``rewrite``), run sbatch
(``sbatch_run``), then register the job id with harpd (``registration``).  Every
reason to leave the job alone is ``step_aside``'s, shared with harp-filter.
With ``--harp-dry-run`` every one of these paths ends by printing what would
have been submitted, and why harp stepped aside; sbatch is never run.

Start-up time matters (this runs on every submission), so the module avoids
subprocess/signal/json/socket/re (each drags in ``enum`` and more), and what
only a decision needs (checking, rewriting, registering it) is imported once
harpd has answered: with harpd down it would cost every submission for nothing.
"""

from __future__ import annotations

import os
import stat
import sys

from . import __version__, client, harp_options, output_mode, route, step_aside
from .request import Request
from .sbatch_options import CLI_TABLE, SBATCH_TABLE, ParsedArgs
from .sbatch_run import (
    SpawnError,
    find_sbatch,
    last_error,
    mark_process,
    parse_job_id,
    refused_before_submission,
    spawn,
    write,
)
from .step_aside import MAX_SCRIPT, UNCHANGED, StepAside, resolve_script

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from .rewrite import Rewritten
    from .wire import DecisionDict, JobRequestDict, RegisterMessage

DRY_UNCHANGED = "a real run would submit your job unchanged"
#: script names that are harp-submit's own standard input (and so, once fed, sbatch's)
STDIN_NAMES = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})

HARP_HELP = """\
harp-submit options (removed before sbatch runs):
      --harp-off              submit exactly as sbatch would, without asking harpd
      --harp-verbose          say what harp changed even with --parsable/--quiet
      --harp-dry-run          print the rewritten script and harpd's decision; submit nothing
      --harp-explain          print the details of harpd's prediction
      --harp-json             with --harp-dry-run or --harp-explain: the decision as JSON
  An unknown --harp-... option is an error: nothing is submitted.
  A '#HARP off' line in the script, or HARP_DISABLE=1, also turns harp off.
  A '#HARP retry' line: a run that ends TIMEOUT or out of memory runs again with more
  of what ran out ('#HARP retry off' never).
  HARP_SOCKET, HARP_CONFIG, HARP_SERVERS (host:port,... of harpd on another node)
  and HARP_TIMEOUT (seconds, default 2) find and bound harpd.
  harp status JOBID: what harp did with a job, each attempt, and seff's figures.
"""


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``harp-submit``: sbatch's exit code.

    Run as the program (``argv`` None) it ends the process itself with that
    code, skipping the interpreter's clean-up, which costs more than harp's
    whole round trip to harpd; with an explicit ``argv`` it returns the code.
    """
    # a plain dict: os.environ decodes every variable on each pass, and harp makes several
    run = Submit(list(sys.argv[1:] if argv is None else argv), dict(os.environ))
    code = _run(run)
    if argv is None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)
    return code


def _run(run: Submit) -> int:
    try:
        return run.main()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # never a traceback, never a lost job
        if run.submitted:
            run.warn(f"internal error after submission ({type(exc).__name__}: {exc})")
            return run.exit_code if run.exit_code is not None else 1
        run.dry_run = run.dry_run or harp_options.mentions_dry_run(run.args)  # a dry run never submits
        run.warn(f"internal error ({type(exc).__name__}: {exc}); {UNCHANGED}")
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
        self.token: str | None = None  # harpd's record of its decision (predict's answer)
        self.where: route.Route | None = None  # how harpd was reached, for the registration
        self.dry_run = False
        self.verbose = False
        self.explain = False
        self.json = False  # --harp-json: decisions as JSON, for programs
        self.quiet = False

    # --- output -------------------------------------------------------------------

    def warn(self, text: str) -> None:
        if self.dry_run:
            text = text.replace(UNCHANGED, DRY_UNCHANGED)
        write(2, f"harp: {text}\n")

    def info(self, text: str) -> None:
        if not self.quiet or self.verbose or self.dry_run:
            write(2, f"harp: {text}\n")

    # --- the flow -------------------------------------------------------------------

    def main(self) -> int:
        try:
            found = harp_options.split(self.args, CLI_TABLE)
        except harp_options.HarpUsage as exc:
            self.warn(str(exc))
            return 2
        harp = found.names
        argv = self.argv = found.argv
        self.dry_run = harp_options.DRY_RUN in harp
        self.verbose = "harp-verbose" in harp
        self.explain = "harp-explain" in harp
        self.json = "harp-json" in harp
        if found.unreadable is not None:  # sbatch prints the error, or knows an option harp does not
            return self.untouched(argv, f"harp cannot read the command line ({found.unreadable})")
        cli = SBATCH_TABLE.parse(argv)
        names = {o.name for o in cli.options}
        if names & {"help", "version", "usage"}:
            return self.help_or_version(argv, names)
        self.quiet = bool(names & {"parsable", "quiet"})
        if "harp-off" in harp:
            return self.untouched(argv, "--harp-off")
        if step_aside.disabled(self.environ):
            return self.untouched(argv, "HARP_DISABLE is set")

        try:
            request = self.read_request(argv, cli)
        except StepAside as aside:
            if aside.reason:
                self.warn(aside.reason)
            return self.untouched(argv, None if aside.reason else aside.detail)
        if request.has("test-only"):
            # sbatch only estimates a start here: harp's advice or words would make the answer differ
            return self.untouched(argv, "--test-only: sbatch answers on its own")
        if request.has("parsable") or request.has("quiet"):
            self.quiet = True
        return self.decide_and_submit(request, argv)

    def read_request(self, argv: list[str], cli: ParsedArgs) -> Request:
        """Read the script and settings as sbatch will; StepAside when harp must step aside.

        Stepping aside covers everything sbatch would refuse (it then prints
        its own error, so harp stays silent: ``StepAside.detail`` is shown by
        a dry run only) and everything harp does not fully understand.
        """
        wrap = _last_value(cli, "wrap")
        positional = argv[cli.end :]
        path: str | None = None
        if wrap is not None:
            if positional:
                raise StepAside(detail="sbatch refuses script arguments with --wrap")
            data = None
        elif positional and positional[0] in STDIN_NAMES:
            # sbatch reads the script from its standard input under this name
            # (Snakemake's --slurm-pass-command-as-script): harp reads it first,
            # bounded, and hands it on through sbatch's stdin like any script
            path = positional[0]
            data = self.read_script_stdin()
        elif positional:
            path = positional[0]
            data = self.read_script_file(path, _last_value(cli, "chdir"))
        else:
            data = self.read_script_stdin()
        text = None
        script = None
        lines: list[str] = []
        if data is not None:
            if sbatch_rejects(data):
                raise StepAside(detail="sbatch refuses this script (empty, no #! line, NUL bytes or CRLF line ends)")
            text = data.decode("utf-8", "surrogateescape")
            script, lines = step_aside.script_directives(text)
            if script.error:
                raise StepAside(detail=f"sbatch refuses a #SBATCH line ({script.error})")
        request = Request(cli, self.environ, script, script_path=path, script_text=text, wrap=wrap, harp_lines=lines)
        bad = request.invalid()
        if bad:
            raise StepAside(detail=f"sbatch refuses {bad}")
        return request

    def read_script_file(self, path: str, chdir: str | None) -> bytes:
        """The script sbatch will read for ``path``; StepAside when harp cannot (sbatch reports a missing one)."""
        resolved = resolve_script(path, chdir, self.environ.get("PATH"))
        if resolved is None:
            raise StepAside(detail=f"sbatch will not find the script {path}")
        too_large = f"{path} is larger than 4 MiB; {UNCHANGED}"
        try:
            if not stat.S_ISREG(os.stat(resolved).st_mode):
                # a pipe or device (/dev/stdin, <(...)): reading it would leave sbatch nothing
                raise StepAside(detail=f"{path} is not a regular file; sbatch reads it itself")
            with open(resolved, "rb") as fh:
                if os.fstat(fh.fileno()).st_size > MAX_SCRIPT:
                    raise StepAside(too_large)
                data = fh.read(MAX_SCRIPT + 1)
        except OSError as exc:
            raise StepAside(detail=f"cannot read {path} ({exc.strerror or exc})") from None
        if len(data) > MAX_SCRIPT:
            raise StepAside(too_large)
        return data

    def read_script_stdin(self) -> bytes:
        """The script on standard input, kept for sbatch; StepAside when harp cannot use it.

        Bounded in what harp reads into a decision: past 4 MiB (what slurmctld
        accepts by default) harp steps aside, but still hands sbatch every byte
        it read, so a site with a larger max_script_size loses nothing.
        """
        try:
            data = _read_all(0)
        except OSError as exc:
            raise StepAside(detail=f"cannot read standard input ({exc.strerror or exc})") from None
        self.stdin_data = data
        if len(data) > MAX_SCRIPT:
            raise StepAside(f"the script on standard input is larger than 4 MiB; {UNCHANGED}")
        return data

    def decide_and_submit(self, request: Request, argv: list[str]) -> int:
        job = request.job_request()
        chosen = route.choose(self.environ)
        self.where = chosen[0]
        try:
            answer = step_aside.ask_harpd(job, self.environ, self.warn, dry_run=self.dry_run, chosen=chosen)
        except client.HarpdUnavailable as exc:
            return self.submit(request, argv, None, None, job, exc.reachable)
        # only now what a decision needs: harpd down, they would cost start-up for nothing
        from . import registration
        from .decision import BadDecision, check_beside, validate
        from .rewrite import RewriteError, apply

        self.token = registration.token_of(answer)
        try:
            decision, changes = validate(answer, request.resources())
            check_beside(changes, request.value("tres-per-task"), request.value("ntasks-per-node"))
        except BadDecision as exc:
            self.warn(f"ignoring harpd's decision: {exc}; {UNCHANGED}")
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
            self.warn(f"could not apply harpd's decision: {exc}; {UNCHANGED}")
            return self.submit(request, argv, None, None, job, True)
        for a in rewritten.applied:
            self.info(a.describe())
        return self.submit(request, argv, rewritten, decision, job, True)

    def show_explain(self, decision: DecisionDict) -> None:
        if self.json:
            write(2, f"harp: explain: {_compact(decision)}\n")
            return
        model = decision.get("model")
        write(2, f"harp: explain: model: {model if isinstance(model, str) else 'none'}\n")
        details = decision.get("explain")
        if isinstance(details, dict):
            for key, value in details.items():
                write(2, f"harp: explain: {key}: {_compact(value)}\n")
        limits = decision.get("limits")
        if isinstance(limits, dict):
            write(2, f"harp: explain: limits: {_compact(limits)}\n")
        for c in decision.get("changes") or []:
            if isinstance(c, dict):
                write(2, f"harp: explain: change: {_compact(c)}\n")

    # --- running sbatch -------------------------------------------------------------

    def submit(
        self,
        request: Request,
        argv: list[str],
        rewritten: Rewritten | None,
        decision: DecisionDict | None,
        job: JobRequestDict,
        register: bool,
    ) -> int:
        """Run sbatch on the (possibly rewritten) submission, then register the job."""
        environ = None
        stdin = self.stdin_data
        final = argv
        after = request
        token = self.token if decision is not None else None
        if rewritten is not None:
            if token is not None:
                # the decision's token rides with the job in slurmctld, so harpd finds it even if
                # the registration message is lost (harp_submit.registration)
                rewritten.argv = _with_token(rewritten.argv, request, token)
                rewritten.argv_changed = True
            final = rewritten.argv
            if rewritten.env_changed:
                environ = rewritten.environ
            if rewritten.script_changed:
                final = _stdin_argv(rewritten.argv, request)
                assert rewritten.script_text is not None
                stdin = rewritten.script_text.encode("utf-8", "surrogateescape")
            from .rewrite import build

            after = build(rewritten.argv, rewritten.environ, request, rewritten.script_text)
        keep_output = register and output_mode.keeps_output(request, rewritten is not None)
        if keep_output:
            final = output_mode.with_append(final)  # shown by a dry run; said in docs/harp-submit.md
        if self.dry_run:
            return self.show_dry_run(final, environ, stdin, request, decision)
        payload: RegisterMessage | None = None
        original_payload: RegisterMessage | None = None
        if register:
            from . import registration

            payload = registration.message(
                job, final, environ or self.environ, request.resources(), after.resources(), decision, token
            )
            original_payload = {**payload, "submitted": payload["original"], "decision": None}
        original = None
        # fall back to the user's own request if sbatch refuses harp's, unless a
        # failure cannot tell whether a job exists (--wait, --quiet) or none is made (--test-only)
        if rewritten is not None and not any(request.has(o) for o in ("wait", "quiet", "test-only")):
            own = output_mode.with_append(argv) if output_mode.keeps_output(request, False) else argv
            if original_payload is not None and "argv" in original_payload["job"]:
                # registered as it runs: recovery resubmits from these arguments
                original_payload = {**original_payload, "job": {**original_payload["job"], "argv": own}}
            original = (own, original_payload)
        return self.run_sbatch(final, environ, stdin, payload, original=original)

    def untouched(self, argv: list[str], why: str | None = None) -> int:
        """Hand the submission to sbatch exactly as given (sbatch reports any problem).

        ``why`` harp steps aside, when no line has said it yet: a dry run (or
        --harp-verbose) shows it, since sbatch's own error may never come.
        """
        if why and (self.dry_run or self.verbose):
            write(2, f"harp: steps aside: {why}\n")
        if self.dry_run:
            return self.show_dry_run(argv, None, self.stdin_data, None, None)
        return self.run_sbatch(argv, None, self.stdin_data, None)

    def fallback_argv(self) -> list[str]:
        if self.argv is not None:
            return self.argv
        return harp_options.without_harp_words(self.args)

    def help_or_version(self, argv: list[str], names: set[str]) -> int:
        if self.dry_run:
            return self.show_dry_run(argv, None, None, None, None)
        code = self.run_sbatch(argv, None, None, None, keep_stdout=True)
        if "help" in names:
            write(1, "\n" + HARP_HELP)
        if "help" in names or "version" in names:
            write(1, f"harp-submit {__version__}\n")
        return code

    def show_dry_run(
        self,
        argv: list[str],
        environ: dict[str, str] | None,
        stdin: bytes | None,
        request: Request | None,
        decision: DecisionDict | None,
    ) -> int:
        changed_env = ""
        if environ is not None:
            diff = [f"{k}={_quote(v)}" for k, v in environ.items() if self.environ.get(k) != v]
            diff += [f"-u {k}" for k in self.environ if k not in environ]
            changed_env = " ".join(diff) + " " if diff else ""
        cmd = " ".join(_quote(a) for a in ["sbatch", *argv])
        if stdin is not None:
            cmd += " < (script below)"
        write(2, f"harp: dry run, nothing submitted; would run: {changed_env}{cmd}\n")
        if decision is not None and self.json:
            write(2, f"harp: decision: {_compact(decision)}\n")
        elif decision is not None:
            from .dry_run import decision_lines

            for line in decision_lines(decision):
                write(2, f"harp: {line}\n")
        if stdin is not None:
            write(1, stdin)
        elif request is not None and request.script_text is not None:
            write(1, request.script_text.encode("utf-8", "surrogateescape"))
        return 0

    def run_sbatch(
        self,
        argv: list[str],
        environ: dict[str, str] | None,
        stdin: bytes | None,
        register: RegisterMessage | None,
        keep_stdout: bool = False,
        original: tuple[list[str], RegisterMessage | None] | None = None,
    ) -> int:
        """Run sbatch (replacing this process when nothing is left to do afterwards).

        ``original``: the user's own submission (argv, registration), given when
        harp changed the request.  If sbatch then refuses the changed request
        before creating a job, the original is submitted instead: harp's
        advice must never cost the user the job.
        """
        if self.dry_run:  # the last guard: whatever path led here, a dry run submits nothing
            return self.show_dry_run(argv, environ, stdin, None, None)
        sbatch = find_sbatch(self.environ)
        if sbatch is None:
            self.warn("cannot find sbatch in PATH (set HARP_SBATCH to its path)")
            return 127
        env = environ if environ is not None else self.environ
        # harp's cli_filter plugin (plugins/cli_filter.lua) steps aside for an sbatch
        # whose parent is named harp-submit: a mark that, unlike an environment
        # variable, never reaches the job's environment (--export=ALL)
        mark_process()
        on_line = None
        if register is not None:
            from . import registration

            timeout = registration.timeout_s(self.environ)
            where = self.where if self.where is not None else route.choose(self.environ)[0]

            def on_line(line: bytes) -> None:
                job_id = parse_job_id(line)
                if job_id is not None:
                    registration.register_in_background(where, {**register, "job_id": job_id}, timeout, self.environ)

        self.submitted = True
        try:
            code, held = spawn(sbatch, argv, env, stdin, on_line, hold_stderr=original is not None)
        except SpawnError as exc:
            self.submitted = False
            self.warn(f"cannot run {sbatch}: {exc}")
            return 127
        if held is not None:
            if code != 0 and original is not None and refused_before_submission(held):
                reason = last_error(held)
                self.warn(f"sbatch refused the changed request ({reason}); submitting your job as you wrote it")
                orig_argv, orig_register = original
                return self.run_sbatch(orig_argv, None, self.stdin_data, orig_register)
            write(2, held)
        self.exit_code = code
        return code


# --- helpers ----------------------------------------------------------------------


def _last_value(cli: ParsedArgs, name: str) -> str | None:
    """The value of the option's last occurrence (the one sbatch uses); None when absent."""
    value = None
    for o in cli.options:
        if o.name == name:
            value = o.value
    return value


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
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
    return not data or not data.strip(b" \t\n\v\f\r") or not data.startswith(b"#!") or b"\0" in data or b"\r\n" in data


def _with_token(argv: list[str], request: Request, token: str) -> list[str]:
    """``argv`` with the decision's token appended to the job's effective ``--comment``."""
    from . import registration

    cli = SBATCH_TABLE.parse(argv)
    return registration.comment_argv(argv, cli.end, cli.dashdash, request.value("comment"), token)


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
    if request.script_path is not None and request.script_path not in STDIN_NAMES and request.value("job-name") is None:
        at = cli.dashdash if cli.dashdash is not None else len(opts)
        opts = opts[:at] + [f"--job-name={os.path.basename(request.script_path)}"] + opts[at:]
    return opts + (["/dev/stdin", *rest] if rest else [])
