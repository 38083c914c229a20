"""Find and run the real sbatch, and hand its output and exit code back unchanged.

harp-submit stands where users expect sbatch, so the process around sbatch
must be indistinguishable from sbatch run by a shell: the same stdout as it
comes (``--wait`` prints the job id long before sbatch exits), the same
stderr, the same exit status, and the same death when a signal kills it.

Start-up time matters (this runs on every submission), so the module avoids
subprocess/signal/select (each drags in ``enum`` and more): processes are
started with ``os.posix_spawn`` (never replaced by sbatch: cli_filter.lua
recognises harp-submit as sbatch's parent, ``mark_process``), signals are
set through the C module ``_signal``, and ``select`` is imported only when
three pipes must be polled.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class SpawnError(OSError):
    """sbatch could not be started (so nothing was submitted)."""


def write(fd: int, data: str | bytes) -> None:
    """Write everything, unbuffered; a closed pipe is not harp's problem to report."""
    buf = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    view = memoryview(buf)
    try:
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError:
        pass


def find_sbatch(environ: Mapping[str, str]) -> str | None:
    """The real sbatch: HARP_SBATCH, else the first ``sbatch`` on PATH that is neither harp-submit
    nor a wrapper script that runs it (``wraps_harp``)."""
    explicit = environ.get("HARP_SBATCH")
    if explicit:
        return explicit
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    for d in (environ.get("PATH") or os.defpath).split(":"):
        cand = os.path.join(d or ".", "sbatch")
        if os.access(cand, os.X_OK) and not os.path.isdir(cand) and os.path.realpath(cand) != me:
            if not wraps_harp(cand):
                return cand
    return None


def wraps_harp(path: str) -> bool:
    """A script (``#!``) whose first 64 KiB name harp-submit: a user's ``sbatch`` that execs harp.

    Run as sbatch, it would start harp-submit again, which would find it
    again, until the process limit (#51: "Resource temporarily unavailable",
    nothing submitted).  Slurm's sbatch is a compiled program; a site's own
    wrapper of it that does not run harp is still used.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    return head.startswith(b"#!") and (b"harp-submit" in head or b"harp_submit" in head)


#: the name harp-submit gives its own process (``/proc/self/comm``) before it runs sbatch;
#: plugins/cli_filter.lua steps aside for an sbatch whose parent has this name
PROCESS_NAME = "harp-submit"


def mark_process() -> None:
    """Name this process ``harp-submit`` so harp's cli_filter leaves its sbatch child alone.

    Not an environment variable: sbatch copies those into the job
    (``--export=ALL``, the default) and so into everything the job runs.
    A process name is seen by the plugin (its parent's ``/proc/PID/comm``)
    and by nothing after sbatch exits.  Where /proc cannot be written the
    plugin asks harpd once more: a second decision, never a lost job.
    """
    try:
        with open("/proc/self/comm", "w") as fh:
            fh.write(PROCESS_NAME)
    except OSError:
        pass


def parse_job_id(line: bytes) -> str | None:
    """The job id in sbatch's first line: ``Submitted batch job 12`` or ``12`` / ``12;cluster``."""
    text = line.decode("ascii", "replace").strip()
    prefix = "Submitted batch job "
    if text.startswith(prefix):
        word = text[len(prefix) :].split(" ", 1)[0]
        return word if word.isdigit() else None
    word = text.split(";", 1)[0]
    return word if word.isdigit() else None


def refused_before_submission(stderr: bytes) -> bool:
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


def last_error(stderr: bytes) -> str:
    """sbatch's last error line without its ``sbatch: error:`` prefix, for one harp line."""
    lines = [x.strip() for x in stderr.decode("utf-8", "replace").splitlines() if x.strip()]
    line = lines[-1] if lines else "no reason given"
    for prefix in ("sbatch: error: ", "sbatch: fatal: ", "sbatch: "):
        if line.startswith(prefix):
            line = line[len(prefix) :]
            break
    return line[:200]


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


def spawn(
    path: str,
    argv: list[str],
    env: Mapping[str, str],
    stdin: bytes | None,
    on_first_line: Callable[[bytes], None] | None,
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

    def __init__(self, on_first_line: Callable[[bytes], None] | None, hold_stderr: bool):
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
            write(2, self.held)
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
            write(2, chunk)
            return
        self.held += chunk
        if len(self.held) > self.MAX_HELD:
            write(2, self.held)
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
