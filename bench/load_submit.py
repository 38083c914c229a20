"""Load on harp: 1,000 harp-submit runs from 20 concurrent clients, each job landing exactly once.

A real harpd (temporary config, socket and store; the real Slurm backend, so
every registration asks scontrol who owns the job) serves harp-submit
processes started by 20 client threads against the real local cluster.  Each
submission is a held job (``-H``) with its own ``--job-name`` and the run's
token as ``--comment``; afterwards ``squeue`` is asked for the run's jobs,
which must be every name exactly once, under the ids harp-submit printed.
All of them are cancelled at the end.

Phase 1 (``--n``, ``--clients``): harpd up throughout.  Figures: jobs landed
exactly once, harpd's own latency per ``predict`` (p50/p95/p99, from its log:
accept to answer sent), errors (a failed harp-submit, an error answer, a
harp warning, a traceback in harpd's log: none expected), and registrations
stored.

Phase 2 (``--kill-n``): the same load, and harpd is SIGKILLed a third of the
way in and restarted at two thirds.  Submissions fail open meanwhile
(counted, not errors); every job must still land exactly once, and the
restarted harpd must open the store a SIGKILL left behind.

    python bench/load_submit.py [--n 1000] [--clients 20] [--kill-n 300]
"""

# bench: slow
# bench: timeout=1500

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harp_submit import client  # noqa: E402

RUN_MAIN = "import sys; from harp_submit.cli import main; sys.exit(main())"
SCRIPT = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH -o /dev/null\n#SBATCH -p short\ntrue\n"
TARGET_P50_MS, TARGET_P95_MS, TARGET_P99_MS = 30.0, 100.0, 200.0  # harp-submit waits 2 s at most
_LOG_LINE = re.compile(r"\b(predict|register|status|health) uid=\d+ pid=\d+ (ok|error) ([\d.]+)ms(?:: (.*))?$")


def slurm_conf() -> str | None:
    if os.environ.get("SLURM_CONF"):
        return os.environ["SLURM_CONF"]
    conf = Path(os.environ.get("HARP_SLURM_DIR", "/tmp/harp-localslurm")) / "etc" / "slurm.conf"
    return str(conf) if conf.exists() else None


class Harpd:
    """A real harpd process with its own config, socket, store and log."""

    def __init__(
        self,
        d: Path,
        env: dict[str, str],
        log_level: str = "debug",
        prefix: list[str] | None = None,
        store: Path | None = None,
        listen: str | None = None,
        munge_socket: str | None = None,
    ) -> None:
        """``listen``: a TCP address served too (needs munged; ``munge_socket``: its socket)."""
        self.dir = d
        self.prefix = prefix or []  # e.g. setpriv dropping capabilities, as systemd/harpd.service does
        self.env = env
        self.socket = str(d / "harpd.sock")
        self.store = store or d / "lib" / "harp.db"
        self.config = d / "harpd.toml"
        self.log = d / "harpd.log"
        self.log_level = log_level
        self.proc: subprocess.Popen[bytes] | None = None
        self.listen = listen
        self.config.write_text(
            f'[server]\nsocket = "{self.socket}"\nmax_clients = 64\n'
            + (f'listen = ["{listen}"]\n' if listen else "")
            + f'[store]\npath = "{self.store}"\n'
            "[ingest]\npoll_interval_s = 3600\n[recovery]\nenabled = false\n"
            + (f'[munge]\nsocket = "{munge_socket}"\n' if munge_socket else "")
        )

    def start(self, timeout: float = 60) -> None:
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                [
                    *self.prefix,
                    sys.executable,
                    "-m",
                    "harpd.daemon.main",
                    "--config",
                    str(self.config),
                    "--log-level",
                    self.log_level,
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=str(self.dir),
            )
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"harpd exited {self.proc.returncode} at start:\n{self.log.read_text()[-3000:]}")
            try:
                if client.call(self.socket, {"op": "health"}, 5).get("store") == "ok":
                    return
            except client.HarpdUnavailable:
                pass
            if time.monotonic() > end:
                raise RuntimeError("harpd did not start:\n" + self.log.read_text()[-3000:])
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def latencies(self, op: str = "predict") -> list[float]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            m = _LOG_LINE.search(line)
            if m and m.group(1) == op and m.group(2) == "ok":
                out.append(float(m.group(3)))
        return out

    def problems(self) -> list[str]:
        """Error answers, errors and tracebacks harpd logged.

        Not ``status``'s "harp knows no job" answers: ``registered`` asks
        about every job while registrations (detached children of each
        harp-submit) are still on their way, and that answer is the truth
        then; a registration that never lands fails ``registered`` itself.
        """
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            m = _LOG_LINE.search(line)
            if m and m.group(1) == "status" and "harp knows no job" in line:
                continue
            if (m and m.group(2) == "error") or " ERROR " in line or "Traceback" in line or " CRITICAL " in line:
                out.append(line.strip())
        return out


@dataclass
class Result:
    name: str
    rc: int | None = None
    job_id: str | None = None
    stderr: str = ""
    seconds: float = 0.0


@dataclass
class Load:
    token: str
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0


def submit_all(names: list[str], clients: int, env: dict[str, str], cwd: Path, token: str, on_progress=None) -> Load:
    """harp-submit every name from ``clients`` threads; each a held job, comment = token."""
    todo: queue.Queue[str] = queue.Queue()
    for n in names:
        todo.put(n)
    load = Load(token)
    lock = threading.Lock()
    done = [0]

    def worker() -> None:
        while True:
            try:
                name = todo.get_nowait()
            except queue.Empty:
                return
            r = Result(name)
            t = time.perf_counter()
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", RUN_MAIN, "-H", "--parsable", "-J", name, f"--comment={token}", "job.sh"],
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=str(cwd),
                    stdin=subprocess.DEVNULL,
                    timeout=180,
                )
                r.rc, r.stderr = proc.returncode, proc.stderr
                word = proc.stdout.strip().split(";")[0]
                r.job_id = word if word.isdigit() else None
            except subprocess.TimeoutExpired:
                r.stderr = "harp-submit did not finish within 180 s"
            r.seconds = time.perf_counter() - t
            with lock:
                load.results.append(r)
                done[0] += 1
                n = done[0]
            if on_progress is not None:
                on_progress(n)

    start = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    load.seconds = time.monotonic() - start
    return load


def queued_jobs(token: str, env: dict[str, str]) -> list[tuple[str, str]]:
    """(job id, name) of every job in the queue carrying this run's token as its comment."""
    out = subprocess.run(
        ["squeue", "-h", "-a", "-t", "all", "-o", "%i|%j|%k"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and parts[2] == token:
            rows.append((parts[0], parts[1]))
    return rows


def cancel(job_ids: list[str], env: dict[str, str]) -> None:
    for k in range(0, len(job_ids), 200):
        subprocess.run(["scancel", *job_ids[k : k + 200]], env=env, capture_output=True, timeout=120)


@dataclass
class Landing:
    expected: int
    exactly_once: int
    missing: list[str]
    duplicated: list[str]
    id_mismatch: list[str]


def check_landing(load: Load, names: list[str], env: dict[str, str]) -> Landing:
    rows = queued_jobs(load.token, env)
    by_name: dict[str, list[str]] = {}
    for jid, name in rows:
        by_name.setdefault(name, []).append(jid)
    printed = {r.name: r.job_id for r in load.results}
    once = [n for n in names if len(by_name.get(n, [])) == 1]
    mismatch = [n for n in once if printed.get(n) != by_name[n][0]]
    return Landing(
        expected=len(names),
        exactly_once=len(once) - len(mismatch),
        missing=[n for n in names if n not in by_name],
        duplicated=[n for n in names if len(by_name.get(n, [])) > 1],
        id_mismatch=mismatch,
    )


def registered(socket_path: str, load: Load) -> int:
    """How many of the load's jobs harpd has a registration for (asked over its socket, as root)."""
    n = 0
    for r in load.results:
        if r.job_id is None:
            continue
        try:
            job = client.call(socket_path, {"op": "status", "job_id": r.job_id}, 10)["job"]
        except client.HarpdUnavailable:
            continue
        n += bool(job.get("registered"))
    return n


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def client_env(conf: str, sock: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SBATCH_", "SLURM_"))}
    env.update(
        {"SLURM_CONF": conf, "HARP_SOCKET": sock, "HARP_CONFIG": "/nonexistent/harpd.toml", "PYTHONPATH": str(REPO)}
    )
    return env


def harp_warnings(load: Load) -> list[str]:
    return [f"{r.name}: {line}" for r in load.results for line in r.stderr.splitlines() if line.strip()]


def figure(name: str, value: float, unit: str, op: str, target: float, fmt: str = "{:.0f}") -> str:
    ok = {"<=": value <= target, ">=": value >= target, "==": value == target}[op]
    return f"FIGURE {name}: {fmt.format(value)} {unit} (target {op} {fmt.format(target)}) {'PASS' if ok else 'FAIL'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="submissions with harpd up (default 1000)")
    ap.add_argument("--clients", type=int, default=20, help="concurrent harp-submit runs (default 20)")
    ap.add_argument(
        "--kill-n", type=int, default=300, help="submissions of the SIGKILL phase (default 300; 0 skips it)"
    )
    args = ap.parse_args()

    conf = slurm_conf()
    if conf is None or shutil.which("sbatch") is None:
        print("no Slurm cluster: start one with scripts/localslurm start (or set SLURM_CONF)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="hl-", dir="/tmp"))  # short: Unix socket paths are limited
    os.chmod(work, 0o755)
    (work / "job.sh").write_text(SCRIPT)
    denv = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SLURM_"))}
    denv.update({"SLURM_CONF": conf, "PYTHONPATH": str(REPO)})
    harpd = Harpd(work, denv)
    env = client_env(conf, harpd.socket)
    tokens: list[str] = []
    lines: list[str] = []
    code = 0
    try:
        harpd.start()
        # ---------------------------------------------------------------- phase 1
        token = "harp-load-" + uuid.uuid4().hex[:10]
        tokens.append(token)
        names = [f"{token}-{i}" for i in range(args.n)]
        load = submit_all(names, args.clients, env, work, token)
        landing = check_landing(load, names, env)
        failed = [r for r in load.results if r.rc != 0 or r.job_id is None]
        warnings = harp_warnings(load)
        time.sleep(1.0)  # registrations finish in detached children
        problems = harpd.problems()
        lat = harpd.latencies("predict")
        reg_lat = harpd.latencies("register")
        n_reg = registered(harpd.socket, load)
        wall = sorted(r.seconds for r in load.results)
        print(
            f"phase 1: {args.n} submissions from {args.clients} clients in {load.seconds:.1f} s "
            f"({args.n / load.seconds:.1f}/s); harp-submit wall p50 {percentile(wall, 50) * 1000:.0f} ms, "
            f"p99 {percentile(wall, 99) * 1000:.0f} ms; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        print(
            f"phase 1: harpd predict latency over {len(lat)} requests: p50 {percentile(lat, 50):.1f} ms, "
            f"p95 {percentile(lat, 95):.1f} ms, p99 {percentile(lat, 99):.1f} ms, max {max(lat, default=0):.1f} ms"
        )
        print(
            f"phase 1: harpd register latency over {len(reg_lat)} requests: p50 {percentile(reg_lat, 50):.1f} ms, "
            f"p99 {percentile(reg_lat, 99):.1f} ms"
        )
        print(
            f"phase 1: landed exactly once {landing.exactly_once}/{landing.expected}, missing {len(landing.missing)}, "
            f"duplicated {len(landing.duplicated)}, id mismatch {len(landing.id_mismatch)}; registered {n_reg}"
        )
        errors = len(failed) + len(warnings) + len(problems)
        for what, items in (
            ("failed harp-submit", [f"{r.name}: rc={r.rc} {r.stderr.strip()[:200]}" for r in failed]),
            ("harp warning", warnings),
            ("harpd problem", problems),
        ):
            for item in items[:5]:
                print(f"phase 1: {what}: {item}")
        lines += [
            figure("load_submit_landed_once", landing.exactly_once, "jobs", "==", args.n),
            figure("load_submit_predict_p50", percentile(lat, 50), "ms", "<=", TARGET_P50_MS, "{:.1f}"),
            figure("load_submit_predict_p95", percentile(lat, 95), "ms", "<=", TARGET_P95_MS, "{:.1f}"),
            figure("load_submit_predict_p99", percentile(lat, 99), "ms", "<=", TARGET_P99_MS, "{:.1f}"),
            figure("load_submit_errors", errors, "errors", "==", 0),
            figure("load_submit_registered", n_reg, "jobs", "==", args.n),
        ]
        # ---------------------------------------------------------------- phase 2
        if args.kill_n > 0:
            token2 = "harp-kill-" + uuid.uuid4().hex[:10]
            tokens.append(token2)
            names2 = [f"{token2}-{i}" for i in range(args.kill_n)]
            events: list[str] = []
            state = {"killed": False, "restarted": False}
            guard = threading.Lock()

            def progress(n: int) -> None:
                with guard:
                    if not state["killed"] and n >= args.kill_n // 3:
                        state["killed"] = True
                        harpd.kill()
                        events.append(f"SIGKILL after {n}")
                    elif state["killed"] and not state["restarted"] and n >= 2 * args.kill_n // 3:
                        state["restarted"] = True
                        harpd.start()
                        events.append(f"restarted after {n}")

            load2 = submit_all(names2, args.clients, env, work, token2, on_progress=progress)
            landing2 = check_landing(load2, names2, env)
            failed2 = [r for r in load2.results if r.rc != 0 or r.job_id is None]
            fail_open = sum(1 for r in load2.results if "submitting your job unchanged" in r.stderr)
            health = client.call(harpd.socket, {"op": "health"}, 5)
            print(
                f"phase 2: {args.kill_n} submissions, harpd {', '.join(events)}; {fail_open} failed open; "
                f"landed exactly once {landing2.exactly_once}/{landing2.expected}, missing {len(landing2.missing)}, "
                f"duplicated {len(landing2.duplicated)}; failed harp-submit {len(failed2)}; "
                f"store after restart: {health.get('store')}"
            )
            for r in failed2[:5]:
                print(f"phase 2: failed harp-submit {r.name}: rc={r.rc} {r.stderr.strip()[:200]}")
            ok2 = (
                landing2.exactly_once == args.kill_n
                and not failed2
                and health.get("store") == "ok"
                and len(events) == 2
            )
            lines.append(figure("load_submit_sigkill_landed_once", landing2.exactly_once, "jobs", "==", args.kill_n))
            if not ok2 and landing2.exactly_once == args.kill_n:
                lines.append(
                    figure(
                        "load_submit_sigkill_errors",
                        len(failed2) + (health.get("store") != "ok") + (len(events) != 2),
                        "errors",
                        "==",
                        0,
                    )
                )
    except Exception as exc:  # noqa: BLE001 - report, clean up, fail
        print(f"load_submit: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        harpd.stop()
        for t in tokens:
            try:
                cancel([jid for jid, _ in queued_jobs(t, env)], env)
            except (subprocess.SubprocessError, OSError) as exc:
                print(f"load_submit: could not cancel jobs of {t}: {exc}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    for line in lines:
        print(line)
    if not lines or any(line.endswith("FAIL") for line in lines):
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
