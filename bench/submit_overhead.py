"""harp-submit's own overhead over plain sbatch on the real cluster (target <= 30 ms, median).

Each harp-submit run is paired with a plain ``sbatch`` run of the same
script, the two back to back (which goes first alternates), so both see the
same load; the overhead is the median of the pairs' differences, and the
ratio the median of their quotients.  The same is printed for CPU time
(user + system, sbatch's own included, the detached registration child's
not), which moves far less with the machine's load than wall time: the
steadier figure for comparing two runs.  Jobs are held (``-H``) and cancelled
at the end.  Three paths are timed, interleaved round by round:

  unix      harpd answering over its Unix socket (the harpd host itself):
            predict, rewrite, script on standard input, register
  tcp       harpd over TCP with MUNGE (every other node: ``[client] servers``)
  disabled  ``HARP_DISABLE=1``: harp-submit only hands argv to sbatch
  down      no harpd (its socket absent): the fail-open path
  python    the install's bare interpreter (``python -c pass``, no sbatch): the floor any
            Python harp-submit pays, for reading the others (its "overhead" is its time
            minus sbatch's)

By default the daemon is a minimal protocol-speaking server whose decision
changes ``--time`` (harp's longest path); ``--daemon real`` starts the real
harpd instead (its predictor's time is then included).

harp-submit is installed as a site installs it: a wheel built from this
checkout (``pip wheel``, not editable) installed into a fresh virtual
environment, whose ``bin/harp-submit`` is timed.  ``--command`` times any
other launcher instead.  ``--load N`` keeps N busy processes (``yes >
/dev/null``) running for the whole measurement, the loaded machine the target
also holds on.  The cluster is the one ``scripts/localslurm`` started for
``HARP_SLURM_DIR`` (default /tmp/harp-localslurm; ``SLURM_CONF`` wins), and
its munged (slurm.conf's AuthInfo socket), so each cluster of its own
(``HARP_SLURM_PORT_OFFSET``) is measured on its own.

Where the time goes (CPU time per run, medians of 25-30 runs on the shared
2-core machine under a test suite and two ``yes``; about half that idle):

  interpreter start   15-19 ms  ``python -c pass`` of the venv; ``site`` is 2-4 ms of it
                                (Debian's sitecustomize tries apport's hook).  ``-S``/``-I``
                                in the shebang would save that, but pip writes the
                                installed script's first line as ``#!<python>`` and drops
                                any flags after ``#!python``, so nothing is gained there.
  imports, disabled    ~1 ms    launch, off, sbatch_run (HARP_DISABLE=1: nothing else)
  imports, full path   ~6 ms    cli and the 15 modules it needs, ~0.3 ms each; decision,
                                rewrite and registration only once harpd has answered
  harpd.toml           ~0.3 ms  read once (the registration reuses the route)
  TCP: MUNGE          ~0.5 ms   two round trips to munged's socket in munged's own
                                message format (harp_submit/munge.py), no munge process,
                                no ctypes; harpd makes the other two
  TCP: resolving       ~0       getaddrinfo gets the host as ASCII bytes: given a str it
                                loaded the ``idna`` codec, and with it re, stringprep and
                                enum: 14 ms of CPU (25 ms wall) under that load, the
                                largest part of the TCP path until fixed
  sbatch              posix_spawn (vfork), never an extra exec; its own time is not counted
  registration        a fork once sbatch printed the job id (~1 ms); the child waits
                      for harp-submit to exit before it connects (bounded at 1 s), so
                      its work no longer competes with sbatch and harp-submit

What remains above the interpreter is mostly the module imports; the
interpreter itself is the floor (the ``python`` row), which on a loaded
2-core machine alone can exceed 30 ms of wall time.

    python bench/submit_overhead.py [--n 40] [--load 2] [--path unix,tcp,disabled,down,python]
                                    [--daemon fake|real] [--nice -10] [--command '...']
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "unit" / "submit"))

from harp_submit import client  # noqa: E402
from tests.helpers.munge_env import cluster_munge_socket, free_port  # noqa: E402

TARGET_MS = 30.0
# pause after each harp-submit run: its registration finishes in a detached
# child, which must not overlap (and slow) the next timed command
SETTLE_S = 0.02
SCRIPT = "#!/bin/bash\n#SBATCH --time=30\n#SBATCH -o /dev/null\n#SBATCH -J harp-bench\ntrue\n"


def slurm_conf() -> str | None:
    if os.environ.get("SLURM_CONF"):
        return os.environ["SLURM_CONF"]
    d = Path(os.environ.get("HARP_SLURM_DIR", "/tmp/harp-localslurm"))
    conf = d / "etc" / "slurm.conf"
    return str(conf) if conf.exists() else None


def clean_install(work: Path) -> list[str]:
    """harp-submit as a site installs it: a wheel of this checkout, installed (no deps) into a fresh venv."""
    wheels = work / "wheels"
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w", str(wheels)]
    # this environment's setuptools when it is recent enough, else pip's isolated build (needs the index)
    build = subprocess.run([*cmd, "--no-build-isolation", str(REPO)], capture_output=True, text=True)
    if build.returncode != 0:
        build = subprocess.run([*cmd, str(REPO)], capture_output=True, text=True)
    if build.returncode != 0:
        raise SystemExit(f"cannot build harp's wheel: {(build.stderr.strip().splitlines() or ['?'])[-1]}")
    wheel = next(wheels.glob("harp-*.whl"))
    venv = work / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    inst = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    if inst.returncode != 0:
        raise SystemExit(f"cannot install harp's wheel: {(inst.stderr.strip().splitlines() or ['?'])[-1]}")
    script = venv / "bin" / "harp-submit"
    if not script.exists():
        raise SystemExit(f"the wheel installed no {script}")
    return [str(script)]


class SealedFakeHarpd:
    """The fake daemon's TCP side: each request opened and each answer sealed with MUNGE, as harpd does."""

    def __init__(self, port: int, munge_socket: str, answers: object) -> None:
        import socket
        import threading

        from harp_submit.munge import Munge

        self.munge = Munge(munge_socket)
        self.answers = answers  # the Unix FakeHarpd: its canned answers per op
        self.registered = 0
        self.listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer_one_connection, args=(conn,), daemon=True).start()

    def _answer_one_connection(self, conn) -> None:
        from submit_fakes import _line

        from harp_submit import sealed

        with conn:
            data = b""
            while data.count(b"\n") < 2:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            cred, body = data.split(b"\n")[:2]
            try:
                _, _, nonce = sealed.open_request(self.munge, cred, body)
            except sealed.Refused as exc:
                conn.sendall(_line({"ok": False, "error": exc.reason}))
                return
            op = client.loads(body.decode()).get("op")
            self.registered += op == "register"
            d = self.answers.decision  # type: ignore[attr-defined]
            answer = _line({"ok": True, "decision": d} if op == "predict" else {"ok": True})
            conn.sendall(sealed.seal_answer(self.munge, nonce, answer.rstrip(b"\n")))

    def stop(self) -> None:
        self.listener.close()


def start_daemon(kind: str, d: Path, env: dict[str, str], port: int, munge_socket: str) -> tuple[str, object]:
    sock = str(d / "harpd.sock")
    if kind == "fake":
        from submit_fakes import FakeHarpd, change, decision

        server = FakeHarpd(
            sock, decision(change("time", "00:10:00"), partition="", max_time_s=None, max_mem_mb=None, max_cpus=None)
        )
        server.start()
        tcp = SealedFakeHarpd(port, munge_socket, server)
        return sock, (server, tcp)
    cfg = d / "harpd.toml"
    cfg.write_text(
        f'[server]\nsocket = "{sock}"\nlisten = ["127.0.0.1:{port}"]\n[store]\npath = "{d}/harp.db"\n'
        f'[ingest]\npoll_interval_s = 3600\n[munge]\nsocket = "{munge_socket}"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)],
        env=env,
        stderr=subprocess.DEVNULL,
        cwd=str(REPO),
    )
    end = time.monotonic() + 60
    while True:
        try:
            client.call(sock, {"op": "health"}, 5)
            return sock, proc
        except client.HarpdUnavailable:
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit("harpd did not start") from None
            time.sleep(0.1)


def settle(handle: object, runs: int) -> None:
    """Wait until the registrations of ``runs`` harp-submit runs so far (detached children)
    reached the fake daemon, so none overlaps the next timed command; SETTLE_S for the real daemon."""
    if not isinstance(handle, tuple):
        time.sleep(SETTLE_S)
        return
    unix, tcp = handle
    end = time.monotonic() + 5
    while len(unix.ops("register")) + tcp.registered < runs and time.monotonic() < end:
        time.sleep(0.002)


def stop_daemon(handle: object) -> None:
    if handle is None:
        return
    if isinstance(handle, subprocess.Popen):
        handle.send_signal(signal.SIGTERM)
        handle.wait(30)
    else:
        for part in handle:  # type: ignore[attr-defined]
            part.stop()


def timed(argv: list[str], env: dict[str, str], cwd: Path, quiet: bool = False) -> tuple[float, float, str]:
    """Seconds ``argv`` took, the CPU seconds it used (its waited-for children's included: sbatch
    under harp-submit, not the detached registration child), and the job id it printed;
    ``quiet``: harp must not have failed open either."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    if quiet and proc.stderr.strip():  # a fail-open run would time the wrong path
        raise SystemExit(f"{argv[0]} did not get the daemon's answer: {proc.stderr.strip()}")
    return dt, cpu, proc.stdout.strip().split(";")[0]


PATHS = ("unix", "tcp", "disabled", "down", "python")


def paths_arg(text: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in chosen if p not in PATHS]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"--path takes a comma-separated list of {', '.join(PATHS)}")
    return list(dict.fromkeys(chosen))


def start_load(n: int, niceness: int) -> list[subprocess.Popen]:
    """``n`` busy processes (``yes > /dev/null``), a loaded machine's: at the
    ordinary niceness 0, not the measured commands' (``niceness``, which they would inherit)."""
    yes = shutil.which("yes")
    if n and yes is None:
        raise SystemExit("--load needs the yes program")
    back = -niceness
    return [
        subprocess.Popen(
            [yes, "harp-bench"], stdout=subprocess.DEVNULL, preexec_fn=(lambda: os.nice(back)) if back else None
        )
        for _ in range(n)
    ]


def renice(nice: int) -> tuple[str, int]:
    """This process at ``nice`` (inherited by sbatch and harp-submit alike) when permitted: (in words, applied)."""
    if not nice:
        return "unchanged", 0
    try:
        os.nice(nice)
    except OSError:
        return "unchanged (not permitted)", 0
    return f"{nice:+d}", nice


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="pairs per path (default 40)")
    ap.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="keep N busy processes (yes > /dev/null) running while measuring (default 0)",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="run the measured commands at this niceness when permitted (default -10); 0 to leave it",
    )
    ap.add_argument("--daemon", choices=["fake", "real"], default="fake")
    ap.add_argument("--command", help="time this harp-submit launcher instead of a clean install")
    ap.add_argument(
        "--path", type=paths_arg, default=list(PATHS), help=f"comma-separated paths to time (default {','.join(PATHS)})"
    )
    args = ap.parse_args()
    if args.n < 1 or args.load < 0:
        ap.error("--n must be at least 1 and --load at least 0")

    niceness, applied = renice(args.nice)
    conf = slurm_conf()
    if conf is None:
        print("no Slurm cluster: start one with scripts/localslurm start (or set SLURM_CONF)", file=sys.stderr)
        return 2
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        print("sbatch not found in PATH", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="hb-", dir="/tmp"))
    harp = shlex.split(args.command) if args.command else clean_install(work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SBATCH_", "PYTHON"))}
    env["SLURM_CONF"] = conf
    (work / "job.sh").write_text(SCRIPT)
    munge_socket = cluster_munge_socket(conf)
    port = free_port()
    paths: list[str] = args.path
    sock, daemon = start_daemon(args.daemon, work, env, port, munge_socket)
    # found the way users' harp-submit finds it: from harpd's config file. On the harpd
    # host the socket; on every other node no socket, [client] servers and munged's socket
    site = (REPO / "etc" / "harpd.toml").read_text()
    (work / "site-harpd.toml").write_text(site.replace('socket = "/run/harp/harpd.sock"', f'socket = "{sock}"'))
    (work / "node-harpd.toml").write_text(
        site.replace('socket = "/run/harp/harpd.sock"', f'socket = "{work}/no-harpd-here.sock"')
        .replace("servers = []", f'servers = ["127.0.0.1:{port}"]')
        .replace('# socket = "/run/munge/munge.socket.2"', f'socket = "{munge_socket}"')
    )
    (work / "down-harpd.toml").write_text(
        site.replace('socket = "/run/harp/harpd.sock"', f'socket = "{work}/no-harpd-here.sock"')
    )
    envs = {
        "unix": {**env, "HARP_CONFIG": str(work / "site-harpd.toml")},
        "tcp": {**env, "HARP_CONFIG": str(work / "node-harpd.toml")},
        "disabled": {**env, "HARP_CONFIG": str(work / "site-harpd.toml"), "HARP_DISABLE": "1"},
        "down": {**env, "HARP_CONFIG": str(work / "down-harpd.toml")},
        "python": env,
    }
    registers = {"unix", "tcp"}  # paths whose run registers a job in the background
    pairs: dict[str, list[tuple[float, float]]] = {p: [] for p in paths}
    cpu_pairs: dict[str, list[tuple[float, float]]] = {p: [] for p in paths}
    ids: list[str] = []
    harp_runs = 0
    load = start_load(args.load, applied)
    python = (
        [str(Path(harp[0]).parent / "python"), "-c", "pass"] if not args.command else [sys.executable, "-c", "pass"]
    )
    try:
        for i in range(args.n + 2):  # 2 warm-up rounds, not counted
            for path in paths:
                quiet = path in registers
                order = ("sbatch", "harp") if (i + paths.index(path)) % 2 == 0 else ("harp", "sbatch")
                t: dict[str, float] = {}
                c: dict[str, float] = {}
                for who in order:
                    if who == "sbatch":
                        t[who], c[who], jid = timed([sbatch, "-H", "--parsable", "job.sh"], env, work)
                    elif path == "python":
                        t[who], c[who], jid = timed(python, env, work)
                    else:
                        t[who], c[who], jid = timed(
                            [*harp, "-H", "--parsable", "job.sh"], envs[path], work, quiet=quiet
                        )
                        if quiet:
                            harp_runs += 1
                            settle(daemon, harp_runs)
                    if jid:
                        ids.append(jid)
                if i >= 2:
                    pairs[path].append((t["sbatch"], t["harp"]))
                    cpu_pairs[path].append((c["sbatch"], c["harp"]))
    finally:
        for p in load:
            p.kill()
            p.wait()
        stop_daemon(daemon)
        for k in range(0, len(ids), 100):
            subprocess.run(["scancel", *ids[k : k + 100]], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print(f"cluster: {conf}   munged: {munge_socket}")
    print(
        f"daemon: {args.daemon}   pairs per path: {args.n}, interleaved, held (-H) and cancelled   "
        f"niceness: {niceness}   load: {args.load} x yes > /dev/null"
    )
    print(f"harp-submit: {'a wheel of this checkout in a fresh venv' if not args.command else ' '.join(harp)}")
    for path in paths:
        sb = [a for a, _ in pairs[path]]
        hs = [b for _, b in pairs[path]]
        diff = statistics.median(b - a for a, b in pairs[path]) * 1000
        ratio = statistics.median(b / a for a, b in pairs[path])
        print(
            f"{path:<9} sbatch median {statistics.median(sb) * 1000:6.1f} ms  harp-submit median "
            f"{statistics.median(hs) * 1000:6.1f} ms  (p10 {_pct(hs, 10):.1f}, p90 {_pct(hs, 90):.1f})  "
            f"paired overhead median {diff:6.1f} ms  ratio {ratio:.2f}x"
        )
    # CPU time moves far less with the machine's load than wall time: the steadier way to compare two runs
    for path in paths:
        sb = [a for a, _ in cpu_pairs[path]]
        hs = [b for _, b in cpu_pairs[path]]
        diff = statistics.median(b - a for a, b in cpu_pairs[path]) * 1000
        print(
            f"{path:<9} CPU: sbatch median {statistics.median(sb) * 1000:6.1f} ms  harp-submit median "
            f"{statistics.median(hs) * 1000:6.1f} ms  paired CPU overhead median {diff:6.1f} ms"
        )
    for path in [p for p in paths if p != "python"]:
        diff = statistics.median(b - a for a, b in pairs[path]) * 1000
        verdict = "PASS" if diff <= TARGET_MS else "FAIL"
        name = "submit_overhead" if path == "unix" else f"submit_overhead_{path}"
        print(
            f"FIGURE {name}: {diff:.1f} ms (target <= {TARGET_MS:g} ms) {verdict}"
            f" (median paired overhead over sbatch; load {args.load})"
        )
    return 0


def _pct(values: list[float], p: int) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))] * 1000


if __name__ == "__main__":
    sys.exit(main())
