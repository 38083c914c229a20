"""harp-submit's own overhead over plain sbatch on the real cluster (target <= 30 ms, median).

Submits the same script with plain ``sbatch`` and with ``harp-submit``,
interleaved (so drift in the controller's load hits both alike), as held
jobs (``-H``) that are cancelled at the end.  The overhead is the difference
of the two median wall times: harp-submit's start-up, its round trip to the
daemon, the rewrite, and registration of the job id.

By default the daemon is a minimal protocol-speaking server whose decision
changes ``--time``, so every run takes harp's longest path (predict, rewrite,
script on standard input, register).  ``--daemon real`` starts the real harpd
instead (its predictor's time is then included); ``--daemon none`` measures
the fail-open path (no daemon).

Both ways harp-submit reaches harpd are timed, interleaved with the same
plain sbatch runs: the Unix socket (the harpd host itself) and TCP with
MUNGE (every other node: ``[client] servers``; the request and the answer
each carry a credential from the cluster's munged, so four munged round
trips and libmunge loaded through ctypes).  The fake daemon then also
listens on a loopback TCP port and seals its answers as harpd does; the real
one gets ``[server] listen``.  ``--path unix`` or ``--path tcp`` times one only.

harp-submit is run the way a site installs it: the console script pip
generates, in a fresh virtual environment holding only harp_submit (built
here in a second).  This development interpreter's own console script is
timed too and printed for information: its start-up also runs the
site-packages hooks of this machine (an editable-install finder and a CA
injection hook importing certifi), tens of milliseconds that belong to this
environment, not to harp-submit.  ``--command`` times any other launcher.

    python bench/submit_overhead.py [--n 60] [--daemon fake|real|none] [--path both|unix|tcp] [--nice -10]
                                    [--command '...']
"""

from __future__ import annotations

import argparse
import os
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


CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from harp_submit.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""  # what pip writes for [project.scripts] harp-submit = "harp_submit.cli:main"


def clean_install(work: Path) -> list[str]:
    """A fresh venv with harp_submit installed as pip would (package, byte code, console script)."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    shutil.copytree(REPO / "harp_submit", site / "harp_submit", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", str(site / "harp_submit")], check=True)
    script = venv / "bin" / "harp-submit"
    script.write_text(CONSOLE_SCRIPT.format(python=venv / "bin" / "python"))
    script.chmod(0o755)
    return [str(script)]


def installed_command() -> list[str] | None:
    beside = Path(sys.executable).parent / "harp-submit"
    if beside.exists():
        return [str(beside)]
    return None


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
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn) -> None:
        from harp_submit import sealed
        from submit_fakes import _line

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
    if kind == "none":
        return str(d / "absent.sock"), None
    if kind == "fake":
        from submit_fakes import FakeHarpd, change, decision

        server = FakeHarpd(sock, decision(change("time", "00:10:00"), partition="", max_time_s=None,
                                          max_mem_mb=None, max_cpus=None))
        server.start()
        tcp = SealedFakeHarpd(port, munge_socket, server)
        return sock, (server, tcp)
    cfg = d / "harpd.toml"
    cfg.write_text(f'[server]\nsocket = "{sock}"\nlisten = ["127.0.0.1:{port}"]\n[store]\npath = "{d}/harp.db"\n'
                   f'[ingest]\npoll_interval_s = 3600\n[munge]\nsocket = "{munge_socket}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)], env=env,
                            stderr=subprocess.DEVNULL, cwd=str(REPO))
    end = time.monotonic() + 60
    while True:
        try:
            client.call(sock, {"op": "health"}, 5)
            return sock, proc
        except client.HarpdUnavailable:
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit("harpd did not start")
            time.sleep(0.1)


def settle(handle: object, runs: int) -> None:
    """Wait until the registrations of all ``runs`` harp-submit runs so far (detached children)
    reached the fake daemon, so none overlaps the next timed command; SETTLE_S for the real daemon and none."""
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


def timed(argv: list[str], env: dict[str, str], cwd: Path, quiet: bool = False) -> tuple[float, str]:
    """Seconds ``argv`` took and the job id it printed; ``quiet``: harp must not have failed open either."""
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    if quiet and proc.stderr.strip():  # a fail-open run would time the wrong path
        raise SystemExit(f"{argv[0]} did not get the daemon's answer: {proc.stderr.strip()}")
    return dt, proc.stdout.strip().split(";")[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="submissions of each kind (default 60)")
    ap.add_argument("--nice", type=int, default=-10,
                    help="run the measured commands at this niceness when permitted (default -10): on a shared "
                         "machine other work then disturbs both medians less; 0 to leave it")
    ap.add_argument("--daemon", choices=["fake", "real", "none"], default="fake")
    ap.add_argument("--command", help="time this harp-submit launcher instead of a clean install")
    ap.add_argument("--path", choices=["both", "unix", "tcp"], default="both",
                    help="how harp-submit reaches the daemon: its Unix socket, TCP with MUNGE, or both (default)")
    args = ap.parse_args()

    niceness = "unchanged"
    if args.nice:
        try:
            os.nice(args.nice)  # inherited by sbatch and harp-submit alike
            niceness = f"{args.nice:+d}"
        except OSError:
            niceness = "unchanged (not permitted)"
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
    other = None if args.command else installed_command()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SBATCH_", "PYTHON"))}
    env["SLURM_CONF"] = conf
    (work / "job.sh").write_text(SCRIPT)
    munge_socket = cluster_munge_socket(conf)
    port = free_port()
    sock, daemon = start_daemon(args.daemon, work, env, port, munge_socket)
    # found the way users' harp-submit finds it: from harpd's config file. On the harpd
    # host the socket; on every other node no socket, [client] servers and munged's socket
    site = (REPO / "etc" / "harpd.toml").read_text()
    (work / "site-harpd.toml").write_text(site.replace('socket = "/run/harp/harpd.sock"', f'socket = "{sock}"'))
    (work / "node-harpd.toml").write_text(
        site.replace('socket = "/run/harp/harpd.sock"', f'socket = "{work}/no-harpd-here.sock"')
            .replace("servers = []", f'servers = ["127.0.0.1:{port}"]')
            .replace('# socket = "/run/munge/munge.socket.2"', f'socket = "{munge_socket}"'))
    paths = {"unix": ["unix"], "tcp": ["tcp"], "both": ["unix", "tcp"]}[args.path]
    envs = {"unix": {**env, "HARP_CONFIG": str(work / "site-harpd.toml")},
            "tcp": {**env, "HARP_CONFIG": str(work / "node-harpd.toml")}}
    env["HARP_CONFIG"] = envs[paths[0]]["HARP_CONFIG"]
    plain_t: list[float] = []
    harp_ts: dict[str, list[float]] = {p: [] for p in paths}
    other_t: list[float] = []
    ids: list[str] = []
    harp_runs = 0
    try:
        for i in range(args.n + 3):  # 3 warm-up rounds, not counted
            a, ja = timed([sbatch, "-H", "--parsable", "job.sh"], env, work)
            ids.append(ja)
            if i >= 3:
                plain_t.append(a)
            for path in paths:
                b, jb = timed([*harp, "-H", "--parsable", "job.sh"], envs[path], work, quiet=args.daemon != "none")
                ids.append(jb)
                harp_runs += 1
                settle(daemon, harp_runs)
                if i >= 3:
                    harp_ts[path].append(b)
        # for information only, after the measurement proper so it cannot disturb it
        for _ in range(args.n // 2 if other else 0):
            c, jc = timed([*other, "-H", "--parsable", "job.sh"], env, work)
            ids.append(jc)
            other_t.append(c)
            harp_runs += 1
            settle(daemon, harp_runs)
    finally:
        stop_daemon(daemon)
        for k in range(0, len(ids), 100):
            subprocess.run(["scancel", *ids[k : k + 100]], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    plain = statistics.median(plain_t) * 1000
    print(f"cluster: {conf}   munged: {munge_socket}")
    print(f"daemon: {args.daemon}   n={args.n} of each, interleaved, held (-H) and cancelled   niceness: {niceness}")
    print(f"harp-submit: {'clean venv console script' if not args.command else ' '.join(harp)}")
    print(f"sbatch             median {plain:7.1f} ms   (p10 {_pct(plain_t, 10):.1f}, p90 {_pct(plain_t, 90):.1f})")
    for path in paths:
        t = harp_ts[path]
        ms = statistics.median(t) * 1000
        print(f"harp-submit {path:<5}  median {ms:7.1f} ms   (p10 {_pct(t, 10):.1f}, p90 {_pct(t, 90):.1f})"
              f"   ratio {ms / plain:.2f}x")
    if other_t:
        o = statistics.median(other_t) * 1000
        print(f"(info) {other[0]}: median {o:.1f} ms, overhead {o - plain:.1f} ms"
              " -- includes this interpreter's site-packages start-up hooks")
    for path in paths:
        overhead = statistics.median(harp_ts[path]) * 1000 - plain
        verdict = "PASS" if overhead <= TARGET_MS else "FAIL"
        name = "submit_overhead" if path == "unix" else "submit_overhead_tcp"
        print(f"FIGURE {name}: {overhead:.1f} ms (target <= {TARGET_MS:g} ms) {verdict}")
    return 0


def _pct(values: list[float], p: int) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))] * 1000


if __name__ == "__main__":
    sys.exit(main())
