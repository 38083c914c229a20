"""The demo's driver: harp's whole loop on the local Slurm cluster, step by step.

Run through ``bash scripts/demo`` (which sets up the checkout, starts the
cluster and exports SLURM_CONF).  Every step says what it does, checks that
it happened, and explains what is on the screen.  Parts of harp that are not
there (yet) or do not act are reported as such, with the reason, and the demo
goes on: only a broken cluster, harpd or submission stops it.

Everything lives in one demo directory (config, socket, store, scripts,
outputs); harpd runs in the foreground of this script and is stopped at the
end; the cluster is left running.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # .venv/bin: harpd, harp, harp-submit
# the history the demo imports: a slice of a public log shipped in the repository (demo/traces/README.md);
# HARP_DEMO_TRACE names another SWF or sacct file, of which the first HARP_DEMO_TRACE_JOBS jobs are imported
SHIPPED_TRACE = REPO / "demo" / "traces" / "CTC-SP2-1996-3.1-cln.first4000.swf.gz"
TRACE = Path(os.environ.get("HARP_DEMO_TRACE") or SHIPPED_TRACE)
TRACE_JOBS = int(os.environ.get("HARP_DEMO_TRACE_JOBS", "4000"))
TRAIN_WAIT_S = 300  # harpd's training at start: seconds on 4000 jobs, minutes on a loaded machine
WARMUP_RUNS = 6  # harpd's guard rail: 5 finished runs of a program before it changes anything

# name: (program copy, --mb, --seconds, #SBATCH lines) -- requests far above what the runs use
APPS = {
    "simulate": ("simulate.py", 200, 8, ["--time=30", "--mem=1G"]),
    "analyse": ("analyse.py", 60, 4, ["--time=20", "--mem=500M"]),
}
# a job that asks for too little memory: Slurm kills it, harpd's recovery runs it again with more
# (recovery touches only jobs harp resized, or scripts that opt in with '#HARP retry')
GROW = ("grow.py", 180, 6, ["--time=10", "--mem=100M"], "#HARP retry\n")

RESULTS: list[tuple[str, str, str]] = []  # (step, "ok" | "partial" | "FAILED", note)
T0 = time.monotonic()


class DemoFailed(Exception):
    """A step the rest depends on failed; the message says what to look at."""


# --- output -------------------------------------------------------------------------------


def step(title: str) -> None:
    print(f"\n== [{time.monotonic() - T0:5.0f}s] {title}", flush=True)


def say(text: str = "") -> None:
    print(text, flush=True)


def explain(text: str) -> None:
    for line in text.strip("\n").splitlines():
        print(f"   | {line}", flush=True)


def record(name: str, status: str, note: str = "") -> None:
    RESULTS.append((name, status, note))
    if status != "ok":
        say(f"   -> {status}: {note}")


def show(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    """Run a command, print it and its output (the newcomer should see the real commands)."""
    say("$ " + " ".join(_q(a) for a in cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    out = (proc.stdout + proc.stderr).rstrip()
    if out:
        say(out)
    return proc


def _free_port() -> int:
    """A TCP port free on loopback now, for the demo's /metrics (the demo may run beside another harpd)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _q(a: str) -> str:
    return a if re.fullmatch(r"[\w@%+=:,./-]+", a) else "'" + a.replace("'", "'\\''") + "'"


# --- the demo directory, harpd ------------------------------------------------------------


class Demo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "harpd.toml"
        self.sock = root / "harpd.sock"
        self.store = root / "harp.db"
        self.work = root / "jobs"
        self.daemon: subprocess.Popen | None = None
        self.metrics_port = _free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("HARP_", "SBATCH_"))}
        self.env.update({"HARP_CONFIG": str(self.config), "HARP_SOCKET": str(self.sock)})

    # harpd ---------------------------------------------------------------------------------
    def write_config(self) -> None:
        self.config.write_text(
            "# the demo's harpd: everything in this directory, outcomes polled every 3 s\n"
            f'[server]\nsocket = "{self.sock}"\n'
            f'[store]\npath = "{self.store}"\n'
            "[ingest]\npoll_interval_s = 3\n"
            '[recovery]\nenabled = true\nmode = "auto"\n'
            "# Prometheus metrics (docs/deployment.md), on loopback\n"
            f'[metrics]\nenabled = true\nlisten = "127.0.0.1:{self.metrics_port}"\n'
        )

    def start_harpd(self) -> None:
        log = open(self.root / "harpd.log", "w")
        # run in the demo directory: nothing harpd or a job it resubmits writes may land in the checkout
        self.daemon = subprocess.Popen(
            [str(BIN / "harpd"), "--config", str(self.config)],
            env=self.env,
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise DemoFailed(f"harpd exited with {self.daemon.returncode}:\n{self.log_tail()}")
            try:
                health = self.call("health", timeout=2)
                say(
                    f"harpd {health.get('version')} is up: store {health.get('store')}, "
                    f"predictor {health.get('predictor')}, pid {self.daemon.pid}"
                )
                return
            except RuntimeError:
                time.sleep(0.3)
        raise DemoFailed(f"harpd did not answer within 60 s:\n{self.log_tail()}")

    def stop_harpd(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join((self.root / "harpd.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no harpd.log)"

    def call(self, op: str, timeout: float = 5.0, **fields) -> dict:
        """One request to harpd (harp-submit's own client); RuntimeError with harpd's reason."""
        sys.path.insert(0, str(REPO))
        from harp_submit import client

        try:
            return client.call(str(self.sock), {"op": op, **fields}, timeout)
        except client.HarpdUnavailable as exc:
            raise RuntimeError(exc.reason) from None

    # Slurm -----------------------------------------------------------------------------------
    def submit(self, script: str, *extra: str, quiet_title: str | None = None) -> tuple[str, str]:
        """harp-submit (sbatch's drop-in); returns (job id, harp's lines)."""
        cmd = [str(BIN / "harp-submit"), *extra, script]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=self.work, env=self.env, timeout=120)
        m = re.search(r"Submitted batch job (\d+)", proc.stdout)
        if proc.returncode != 0 or not m:
            raise DemoFailed(
                f"harp-submit {script} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}"
            )
        return m.group(1), proc.stderr.strip()

    def sacct(self, jobs: list[str], fields: str, dup: bool = False) -> list[dict[str, str]]:
        names = fields.split(",")
        cmd = ["sacct", "-n", "-P", "-X", "-j", ",".join(jobs), "-o", fields] + (["--duplicates"] if dup else [])
        out = subprocess.run(cmd, capture_output=True, text=True, env=self.env).stdout
        return [dict(zip(names, line.split("|"))) for line in out.splitlines() if line]

    def wait_jobs(self, jobs: list[str], timeout: float, what: str) -> dict[str, str]:
        """Final state of each job (sacct), waiting up to ``timeout`` s."""
        final = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL"}
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {r["JobID"]: r["State"].split()[0] for r in self.sacct(jobs, "JobID,State") if r["State"]}
            if len(states) == len(jobs) and set(states.values()) <= final:
                return states
            time.sleep(2)
        queue = subprocess.run(
            ["squeue", "-j", ",".join(jobs), "-o", "%i %T %r"], capture_output=True, text=True, env=self.env
        ).stdout
        raise DemoFailed(f"{what}: not finished after {timeout:.0f} s (another test may hold the node):\n{queue}")

    def max_rss(self, job: str) -> str:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-j", f"{job}.batch", "-o", "MaxRSS"], capture_output=True, text=True, env=self.env
        ).stdout.split()
        if not out or not out[0]:
            return "?"
        v = out[0]
        if v.endswith("K") and v[:-1].isdigit():
            return f"{int(v[:-1]) // 1024}M"
        return v

    def scontrol_field(self, job: str, name: str) -> str | None:
        out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=self.env).stdout
        m = re.search(rf"\b{name}=(\S*)", out)
        return m.group(1) if m else None

    def stored(self, jobs: list[str]) -> set[str]:
        """Which of these jobs harpd has a finished record of (its ingest poll wrote them)."""
        have = set()
        for job in jobs:
            try:
                got = self.call("status", job_id=job).get("job") or {}
            except RuntimeError:
                continue
            if got.get("record"):
                have.add(job)
        return have


# --- the steps ------------------------------------------------------------------------------------


def write_jobs(demo: Demo) -> dict[str, str]:
    """The demo's programs and batch scripts, in the demo directory (shown to the user)."""
    demo.work.mkdir(mode=0o755)
    scripts = {}
    for name, (prog, mb, secs, opts, *more) in list(APPS.items()) + [("grow", GROW)]:
        shutil.copy(REPO / "demo" / "workload.py", demo.work / prog)
        header = "".join(f"#SBATCH {o}\n" for o in opts)
        asked = dict(o[2:].split("=", 1) for o in opts)
        text = (
            f"#!/bin/bash\n{header}#SBATCH --output={name}-%j.out\n{''.join(more)}"
            f"# asks for {asked['time']} min and {asked['mem']}; runs about {secs} s and holds {mb} MiB\n"
            f"python3 {prog} --mb {mb} --seconds {secs}\n"
        )
        (demo.work / f"{name}.sbatch").write_text(text)
        scripts[name] = f"{name}.sbatch"
    return scripts


def import_history(demo: Demo) -> None:
    shipped = TRACE == SHIPPED_TRACE
    step(f"Importing real history: {'' if shipped else f'the first {TRACE_JOBS} jobs of '}{TRACE.name}")
    explain(
        """
harp learns from a site's own accounting. A new site starts from its past
(sacct exports, SWF traces) with `harp import`, before or after starting harpd.
"""
        + (
            """Here: the first 4000 jobs of the Cornell Theory Center SP2 log (1996, from the
Parallel Workloads Archive; demo/traces/README.md), requested vs. used run time
of real jobs.
"""
            if shipped
            else f"Here: the first {TRACE_JOBS} jobs of {TRACE} (HARP_DEMO_TRACE).\n"
        )
    )
    if not TRACE.exists():
        record("import history", "partial", f"{TRACE} not found (HARP_DEMO_TRACE); models cannot be trained")
        return
    path = TRACE if shipped else cut_trace(TRACE, TRACE_JOBS, demo.root)
    proc = show([str(BIN / "harp"), "--config", str(demo.config), "import", "--no-progress", str(path)], env=demo.env)
    record(
        "import history",
        "ok" if proc.returncode == 0 else "partial",
        "" if proc.returncode == 0 else f"harp import exited {proc.returncode}",
    )


def cut_trace(trace: Path, jobs: int, folder: Path) -> Path:
    """The header and the first ``jobs`` jobs of an SWF or sacct -P file, as a plain file in ``folder``.

    A sacct --json export is one document, not lines: it is imported whole.
    """
    opener = gzip.open if trace.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(trace, "rt", errors="replace") as src:
        if src.read(4096).lstrip().startswith("{"):
            return trace
    stem = trace.name.removesuffix(".gz")
    suffix = next((s for s in (".swf", ".psv", ".txt", ".csv") if stem.endswith(s)), "")
    out = folder / f"{stem.removesuffix(suffix)}.first{jobs}{suffix}"
    with opener(trace, "rt", errors="replace") as src, open(out, "w") as dst:
        n = 0
        for i, line in enumerate(src):
            dst.write(line)
            if line.startswith(";") or (i == 0 and "|" in line and not line[:1].isdigit()):
                continue  # SWF header, sacct column names
            n += 1
            if n >= jobs:
                break
    return out


def train(demo: Demo) -> None:
    step("Training: harpd found history and no model at start, so it trains now")
    explain("""
Candidates (Tsafrir, ALEA, a gradient-boosted quantile model, harp's conformal
model) are scored on the newest 20% of the history as if deployed, with the
users' own requests competing too: a model only wins where it beats them.
harpd does this in the background when it starts on a store with history and
no model (and again as outcomes come in); requests are answered meanwhile.
""")
    champions = wait_for_models(demo)
    if champions:
        show_models(demo, champions)
        if all(c in (None, "request") for c in champions.values()):
            record("training", "partial", "the users' requests beat every model on this history; harpd keeps requests")
        else:
            record("training", "ok", "harpd trained at start on the imported history")
    else:
        say(f"harpd trained no model on its own within {TRAIN_WAIT_S} s; asking it to: harp retrain")
        proc = show([str(BIN / "harp"), "--config", str(demo.config), "retrain"], env=demo.env, timeout=900)
        record(
            "training",
            "partial",
            "harpd did not train at start" + ("; trained when asked (harp retrain)" if proc.returncode == 0 else ""),
        )
    if "mem" not in champions:
        explain("""
No memory model: SWF traces record run time, not measured memory (METACENTRUM
has usage but no requests). Memory comes in through harpd's own accounting
polls as jobs finish; until a memory model is trained, a program with enough
runs of its own is sized from them. Recovery below handles memory that runs out.
""")


def wait_for_models(demo: Demo) -> dict[str, str]:
    """The champions harpd's health names once it has trained on its own (resource -> model), or {}."""
    deadline = time.monotonic() + TRAIN_WAIT_S
    while time.monotonic() < deadline:
        if demo.daemon is not None and demo.daemon.poll() is not None:
            raise DemoFailed(f"harpd exited with {demo.daemon.returncode} while training:\n{demo.log_tail()}")
        try:
            models = demo.call("health", timeout=5).get("models") or {}
        except RuntimeError:
            models = {}
        if models:
            return {res: m.get("name") for res, m in models.items()}
        time.sleep(1)
    return {}


def show_models(demo: Demo, champions: dict[str, str]) -> None:
    """What harpd trained: each candidate's score on the held-out newest jobs (read from the store)."""
    sys.path.insert(0, str(REPO))
    from harpd.store import Store

    store = Store.open(demo.store)
    try:
        rows = store.models()
    finally:
        store.close()
    for res, name in sorted(champions.items()):
        champ = next((m for m in reversed(rows) if m.resource == res and m.champion), None)
        if champ is None:
            continue
        # the candidates of the same training (the store keeps every model ever trained)
        same = {m.name: m.score for m in rows if m.resource == res and m.n_train == champ.n_train}
        scores = ", ".join(f"{n} {sc['score']:.3f}" for n, sc in same.items() if isinstance(sc, dict) and "score" in sc)
        say(
            f"  {res:5s}: champion {name}, trained on {champ.n_train:,} jobs"
            f"  (harp score on the newest 20%, lower is better: {scores})"
        )
        sc = champ.score
        if sc.get("under_rate") is not None and sc.get("over_vs_request") is not None:
            say(
                f"         there it under-predicted {sc['under_rate']:.1%} of the jobs; its over-reservation "
                f"was {sc['over_vs_request']:.2f} x the users' own"
            )
    if "mem" not in champions:
        say("  mem  : not trained (this history records run times, not memory)")


def warm_up(demo: Demo, scripts: dict[str, str]) -> list[str]:
    step(f"Cold start: {WARMUP_RUNS} runs of each application, submitted with harp-submit")
    explain(f"""
harp-submit is a drop-in sbatch (users alias sbatch=harp-submit). harpd leaves
a program's request alone until it has seen {WARMUP_RUNS - 1} finished runs of it
(per user): these runs go through unchanged, and harpd records what they use.
""")
    for name in APPS:
        say(f"--- {scripts[name]}:")
        say((demo.work / scripts[name]).read_text().rstrip())
    jobs: list[str] = []
    for i in range(WARMUP_RUNS):
        for name in APPS:
            extra = ["--harp-explain"] if i == 0 else []
            job, lines = demo.submit(scripts[name], *extra)
            if i == 0:
                say(f"$ harp-submit --harp-explain {scripts[name]}   -> job {job}")
                for line in lines.splitlines():
                    if "reason" in line or "cold start" in line or "model:" in line:
                        say("  " + line)
            jobs.append(job)
    say(f"submitted {len(jobs)} jobs: {jobs[0]}..{jobs[-1]}; waiting for them to finish")
    states = demo.wait_jobs(jobs, 300, "the cold-start runs")
    bad = {j: s for j, s in states.items() if s != "COMPLETED"}
    if bad:
        raise DemoFailed(f"cold-start runs did not complete: {bad}")
    rows = demo.sacct(jobs[: len(APPS)], "JobID,JobName,Timelimit,Elapsed,ReqMem")
    say("what they asked for vs. used (first of each; MaxRSS is the batch step's peak memory):")
    for r in rows:
        say(
            f"  job {r['JobID']:>6} {r['JobName']:16s} time asked {r['Timelimit']:>9} used {r['Elapsed']}"
            f"   mem asked {r['ReqMem']:>5} used {demo.max_rss(r['JobID'])}"
        )
    # harpd's ingest poll (every 3 s) copies finished jobs from sacct into its store
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(demo.stored(jobs)) < len(jobs):
        time.sleep(2)
    have = len(demo.stored(jobs))
    say(f"harpd's store holds {have} of {len(jobs)} of these runs (ingest poll of sacct)")
    if have < len(jobs):
        record("learning outcomes", "partial", f"ingest stored only {have} of {len(jobs)} runs within 90 s")
    else:
        record("learning outcomes", "ok")
    try:
        demo.call("reload", timeout=60)  # the live history now includes them (else within a minute)
    except RuntimeError as exc:
        say(f"(reload: {exc})")
    return jobs


def rewritten(demo: Demo, scripts: dict[str, str]) -> None:
    step("The next submissions: harp right-sizes them")
    explain("""
Same scripts, same harp-submit command. harpd predicts an upper bound of what
each run needs from the champion model and this program's history, applies its
guard rails (never below 1 min / 100 MB, never above the partition limit, leave
requests alone when the cut is small), and harp-submit rewrites the #SBATCH line.
""")
    jobs = []
    changed = 0
    for name in APPS:
        job, lines = demo.submit(scripts[name], "--harp-explain")
        jobs.append(job)
        say(f"$ harp-submit --harp-explain {scripts[name]}   -> job {job}")
        for line in lines.splitlines():
            say("  " + line)
        tl = demo.scontrol_field(job, "TimeLimit")
        mem = demo.scontrol_field(job, "MinMemoryNode")
        asked = dict(o[2:].split("=", 1) for o in APPS[name][3])
        say(
            f"  Slurm has: TimeLimit={tl} MinMemoryNode={mem}   "
            f"(the script asked --time={asked['time']} --mem={asked['mem']})"
        )
        if "->" in lines:
            changed += 1
    states = demo.wait_jobs(jobs, 240, "the right-sized runs")
    for r in demo.sacct(jobs, "JobID,JobName,Timelimit,Elapsed,State"):
        say(f"  job {r['JobID']:>6} {r['JobName']:16s} limit {r['Timelimit']:>9} used {r['Elapsed']} -> {r['State']}")
    if any(s != "COMPLETED" for s in states.values()):
        record("right-sizing", "partial", f"a right-sized run did not complete: {states} (recovery would retry it)")
    elif changed == 0:
        record(
            "right-sizing",
            "partial",
            "harpd kept every request (see the explain lines: cold start, no confident bound, or no model)",
        )
    else:
        record("right-sizing", "ok", f"{changed} of {len(jobs)} requests rewritten")


def recovery(demo: Demo, scripts: dict[str, str]) -> None:
    step("A job that runs out of memory, and harpd's recovery")
    explain("""
grow.sbatch asks for 100 MB and needs about 180: Slurm kills it (OverMemoryKill).
harpd sees the outcome in its next poll, doubles what ran out (escalation rule,
capped by the node and recovery.max_attempts) and runs the job again: as root it
requeues the same job id with the new limit (Slurm keeps both runs). Recovery
acts on jobs harp resized, and on scripts that ask for it with '#HARP retry'.
""")
    say((demo.work / scripts["grow"]).read_text().rstrip())
    job, _lines = demo.submit(scripts["grow"])
    say(f"$ harp-submit {scripts['grow']}   -> job {job}")
    deadline = time.monotonic() + 240
    status: dict = {}
    final = False
    seen_attempts = 0
    while time.monotonic() < deadline:
        try:
            status = demo.call("status", job_id=job).get("job") or {}
        except RuntimeError:
            status = {}
        attempts = status.get("attempts") or []
        if len(attempts) > seen_attempts:
            for a in attempts[seen_attempts:]:
                say(
                    f"  harpd: attempt {a.get('attempt')} job {a.get('job_id')}: {a.get('step')} "
                    f"limits {json.dumps(a.get('limits'))} ({a.get('reason') or ''})"
                )
            seen_attempts = len(attempts)
        runs = demo.sacct([job], "JobID,State,ReqMem,MaxRSS,Elapsed", dup=True)
        last = runs[-1]["State"].split()[0] if runs else ""
        if seen_attempts and last == "COMPLETED":
            final = True
            # let harpd's next poll record the good run too, so 'harp status' below shows it
            settle = time.monotonic() + 20
            while time.monotonic() < settle:
                try:
                    got = demo.call("status", job_id=job).get("job") or {}
                except RuntimeError:
                    got = {}
                if got.get("outcome") == "completed" or (got.get("record") or {}).get("outcome") == "completed":
                    break
                time.sleep(2)
            break
        if not seen_attempts and time.monotonic() > deadline - 150 and last in ("FAILED", "OUT_OF_MEMORY"):
            break  # no recovery decision 90 s after the failure: stop waiting
        time.sleep(3)
    say("$ sacct --duplicates -j " + job)
    for r in demo.sacct([job], "JobID,JobName,State,ExitCode,ReqMem,Elapsed", dup=True):
        say(
            f"  {r['JobID']:>6} {r['JobName']:12s} {r['State']:12s} "
            f"exit {r['ExitCode']:5s} mem {r['ReqMem']:>6} {r['Elapsed']}"
        )
    show([str(BIN / "harp"), "--config", str(demo.config), "status", job], env=demo.env)
    if final:
        record("recovery", "ok", f"job {job} ran out of memory and completed on attempt {seen_attempts}")
    elif seen_attempts:
        record("recovery", "partial", f"harpd decided a new attempt for job {job}, which had not completed in time")
    else:
        record("recovery", "partial", f"no recovery attempt for job {job} within the wait (see {demo.root}/harpd.log)")


def report(demo: Demo) -> None:
    step("harp report: what was allocated, what was used, what harp saved")
    explain("""
The store holds every finished job harp saw: imported history and the demo's
runs. The report below covers the demo's jobs (ended in the last 2 hours).
""")
    ok = True
    for extra in (["--by", "user"], ["--by", "signature"]):
        proc = show(
            [str(BIN / "harp"), "--config", str(demo.config), "report", "--since", "2h", *extra],
            env=demo.env,
            timeout=300,
        )
        ok &= proc.returncode == 0
    html = demo.root / "report.html"
    proc = subprocess.run(
        [
            str(BIN / "harp"),
            "--config",
            str(demo.config),
            "report",
            "--since",
            "2h",
            "--format",
            "html",
            "-o",
            str(html),
        ],
        capture_output=True,
        text=True,
        env=demo.env,
    )
    if proc.returncode == 0 and html.exists():
        say(f"(the same as a web page: {html})")
    record("report", "ok" if ok else "partial", "" if ok else "harp report failed (see above)")


def metrics(demo: Demo) -> None:
    """Where harpd's Prometheus metrics are, and one line of them (issue #49)."""
    import urllib.request

    step("What a Prometheus scraping harpd sees")
    url = f"http://127.0.0.1:{demo.metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
    except OSError as exc:
        say(f"harpd's metrics at {url} did not answer: {exc}")
        record("metrics", "partial", f"{url} did not answer")
        return
    lines = [ln for ln in text.splitlines() if ln.startswith("harp_")]
    # the line of what the demo just did: its recovery, else a request harp changed, else any counter
    wanted = ('harp_recoveries_total{outcome="requeued"}', 'harp_decisions_total{outcome="changed"', "harp_")
    shown = next((ln for w in wanted for ln in lines if ln.startswith(w) and not ln.endswith(" 0.0")), "(none)")
    say(f"harpd serves its metrics at {url} ({len(lines)} harp_* samples; dashboard: etc/grafana-harp.json), e.g.:")
    say("  " + shown)
    record("metrics", "ok")


def main() -> int:
    if not os.environ.get("SLURM_CONF"):
        print("demo: SLURM_CONF is not set; run it as: bash scripts/demo", file=sys.stderr)
        return 2
    root = Path(os.environ.get("HARP_DEMO_DIR") or "")
    if not root.is_dir():
        print("demo: HARP_DEMO_DIR must name an existing directory (scripts/demo makes one)", file=sys.stderr)
        return 2
    demo = Demo(root)
    failed = None
    try:
        step(f"harpd's config: its own socket and store in {root}")
        explain("""
harpd is the daemon users' submissions ask (a Unix socket; one JSON line each
way, 2 s deadline, fail-open). It also polls Slurm's accounting for outcomes,
trains models and recovers jobs that ran out.
""")
        demo.write_config()
        say(demo.config.read_text().rstrip())
        scripts = write_jobs(demo)
        import_history(demo)
        step("Starting harpd on that store")
        demo.start_harpd()
        record("harpd", "ok")
        train(demo)
        warm_up(demo, scripts)
        rewritten(demo, scripts)
        recovery(demo, scripts)
        report(demo)
        metrics(demo)
    except DemoFailed as exc:
        failed = str(exc)
        record("demo", "FAILED", failed)
    except KeyboardInterrupt:
        failed = "interrupted"
    finally:
        demo.stop_harpd()
    elapsed = time.monotonic() - T0
    step(f"Summary ({elapsed:.0f} s)")
    for name, status, note in RESULTS:
        say(f"  {status:8s} {name}{': ' + note if note else ''}")
    done = {name for name, status, _ in RESULTS if status == "ok"}
    lessons = [
        (
            "training",
            "harp trained candidate models on real history and kept the one that beat the\n"
            "    users' own requests on a held-out slice (the champion).",
        ),
        (
            "right-sizing",
            "harp-submit rewrote #SBATCH requests that were far above what the programs\n"
            "    use, once harpd had seen enough of their runs; Slurm ran the jobs with the\n"
            "    smaller limits and they completed.",
        ),
        (
            "recovery",
            "a job whose memory request was too small was killed by Slurm and run again by\n"
            "    harpd with twice the memory, same job id, without the user doing anything.",
        ),
        ("report", "harp report compares what was allocated with what was used, and what harp saved."),
        ("metrics", "harpd counted the same decisions and recoveries on /metrics, for Prometheus and Grafana."),
    ]
    say("\nWhat you looked at:")
    for name, text in lessons:
        if name in done:
            say(f"  - {text}")
    missing = [name for name, _ in lessons if name not in done]
    if missing:
        say(f"  (not shown this time: {', '.join(missing)}; the reasons are in the summary above)")
    say(f"Files: {root} (harpd.toml, harpd.log, harp.db, jobs/ with the scripts and outputs).")
    say("Plain sbatch can get the same advice through Slurm's cli_filter: docs/plugins.md.")
    if failed:
        print(f"\ndemo: stopped: {failed}", file=sys.stderr)
        return 1
    return 0 if all(s == "ok" for _, s, _ in RESULTS) else 3


if __name__ == "__main__":
    sys.exit(main())
