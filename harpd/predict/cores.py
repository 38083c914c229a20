"""Cores for single-task jobs: what a signature's history shows its runs use.

A run's cores used are its CPU time over its elapsed time (sacct's
TotalCPU / Elapsed; Nextflow's ``%cpu`` x realtime / realtime).  harp gives
a job the one-sided upper quantile of its signature's recent runs' cores,
rounded up to whole cores, never above the request: the
``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` exchangeable runs, so at
most ``alpha`` of jobs would have used more than harp gives (the conformal
guarantee time and memory have).  Fewer cores than a run keeps busy slow it,
they do not kill it, so the guarantee is on how much: the cores given are
the fewest whole cores on which that quantile's run takes at most
``tolerance`` (``predict.cores_tolerance``) longer: 0.05 by default (the owner's decision on #27), so a program whose
runs keep 5.0-5.14 of 6 cores busy gets 5, about a third of its runs take up
to 3 % longer, and a sixth of its reservation is freed.  A task counts as
slowed only when harp's cores make it more than the tolerance longer (at
most ``alpha`` of them), and the time harp gives it includes the slowdown
the cut allows (``slowdown``; ``harpd.predict.live``), so a task slowed
within the tolerance never meets its time limit because of harp's cut:
where the time limit has no room for it (kept at the request), the cores
are cut with no tolerance.  0 keeps every job's speed (docs/metrics.md,
"Cores", has both figures).

A signature with fewer runs than that order needs (19 at alpha = 0.05) is
bounded from its own runs and everyone's: the most its runs used, times the
same order statistic of the *pooled* ratios "a run's cores over the most
its signature's earlier runs had used", recorded for every run that came
while its signature was that young.  Treating those runs as exchangeable
across signatures, at most ``alpha`` of young signatures' jobs use more
than that.  Workflows submit a process's samples while its first ones run,
so waiting for 19 runs of each would leave most tasks at their request.
With no run of its own, or fewer than that order of pooled ratios, the
request stands.  (A prior from other signatures' share of their request
was measured and left out: tasks of a new process are sized together and
fail together, so the 5 % held per job was broken, 5.1-6.1 % slowed on
nf-core rnaseq.)

Why a quantile of the signature's own runs and no trained model: cores used
are a property of the program (its threads, its I/O waits) far more than of
the user or the request, and the rule needs no training, so it holds from
the first day at a site with TotalCPU in its accounting.

Shared by the live predictor (``live``) and the replay figures
(``cores_replay``), so the figures are those of the rule harp runs.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from harpd.records import JobRecord, Outcome

#: runs of a signature kept (the most recent): enough for alpha = 0.01
WINDOW = 200
#: pooled ratios of young signatures' runs kept (the most recent)
POOL_WINDOW = 2000
#: a run that used this little over a whole core is counted as one core:
#: ``%cpu`` of 101 % on one core is accounting noise, not a second thread
SLACK = 0.05
#: launchers whose steps ask for CPUs of their own, and what reads the CPU
#: count: they bound or forbid a cut (``cut_bounds``)
MPI_WORDS = ("srun", "mpirun", "mpiexec", "orterun", "aprun", "charmrun")
CPU_VARS = (
    "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "OMP_NUM_THREADS",
    "nproc",
    "cpu_count",
    "NSLOTS",
)


def cores_used(used_cpu_s: float | None, used_time_s: float | None) -> float | None:
    """Mean cores a run kept busy (CPU time / elapsed), or None when either is unknown or zero."""
    if used_cpu_s is None or used_time_s is None or used_time_s <= 0 or used_cpu_s < 0:
        return None
    if math.isnan(used_cpu_s) or math.isnan(used_time_s):
        return None
    return used_cpu_s / used_time_s


def run_cores(rec: JobRecord) -> float | None:
    """The cores a finished run used, as a sample of what its program needs; None when it is not one.

    Only a COMPLETED run: a failed one may have stopped before its threads
    started (a job step refused at start keeps no core busy), so its cores
    say nothing of the program's (``harpd.features.usage``, the same rule for
    time and memory).
    """
    if rec.outcome != Outcome.COMPLETED:
        return None
    return cores_used(rec.used_cpu_s, rec.used_time_s)


def whole_cores(cores: float) -> int:
    """Whole cores that hold ``cores`` (with ``SLACK`` forgiven), at least one."""
    return max(1, math.ceil(cores - SLACK))


def resized_while_pending(requested: int, ntasks: int, lowered: bool, workflow: bool) -> bool:
    """Whether harpd re-decides a pending job's CPUs per task on its siblings' outcomes (kind ``resize-cpus``).

    Single-task jobs that asked for more than one CPU (what harp ever
    lowers): those whose CPUs harp lowered at submission, and workflow tasks
    it left as asked because none of their type had finished yet.  The
    resizer (``harpd.watch.managed.cpus_to_resize``) and the cores replay
    (``harpd.evaluate.cores_replay``) both ask this, so the replay re-sizes
    what harpd re-sizes.
    """
    return requested > 1 and ntasks == 1 and (lowered or workflow)


def order_index(n: int, alpha: float) -> int | None:
    """1-based order statistic of ``n`` runs that bounds a new run with probability 1 - alpha; None if > n."""
    k = math.ceil((n + 1) * (1.0 - alpha))
    return k if k <= n else None


def runs_needed(alpha: float) -> int:
    """The fewest runs whose order statistic bounds a new run at ``1 - alpha``."""
    n = max(1, math.ceil((1.0 - alpha) / alpha) - 1)
    while order_index(n, alpha) is None:
        n += 1
    return n


def quantile_bound(runs: list[float] | deque[float] | tuple[()], alpha: float) -> float | None:
    """The conformal upper bound of the next run's cores from ``runs``, or None with too few runs."""
    k = order_index(len(runs), alpha)
    if k is None:
        return None
    return sorted(runs)[k - 1]


def cores_to_give(requested: int, bound: float | None, tolerance: float = 0.0) -> int | None:
    """The cores to give for a request and a bound; None to keep the request.

    The fewest whole cores on which a run that keeps ``bound`` cores busy
    takes at most ``tolerance`` longer (``k >= bound / (1 + tolerance)``): a
    CPU-bound program with ``u`` threads' work on ``k < u`` cores runs about
    ``u / k`` times as long.
    """
    if bound is None or requested <= 1:
        return None
    cores = whole_cores(bound / (1.0 + tolerance))
    return cores if cores < requested else None


def time_share(rec: JobRecord) -> float | None:
    """The share of its time request a run took (1 or more: it ran to its limit); None without both."""
    if not rec.used_time_s or not rec.req_time_s or rec.req_time_s <= 0:
        return None
    return float(rec.used_time_s) / float(rec.req_time_s)


def slowdown(bound: float | None, cores: int | None) -> float:
    """How much longer (a factor >= 1) a run that keeps ``bound`` cores busy takes on ``cores``."""
    if bound is None or cores is None or cores <= 0:
        return 1.0
    return max(1.0, bound / cores)


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) > 0 else None


#: launcher options that take no value (every other option is read as taking one)
_SRUN_FLAGS = frozenset(
    {
        "-h",
        "-H",
        "-k",
        "-l",
        "-O",
        "-Q",
        "-s",
        "-u",
        "-v",
        "-V",
        "-X",
        "-Z",
        "-E",
        "--exclusive",
        "--overcommit",
        "--pty",
        "--label",
        "--unbuffered",
        "--verbose",
        "--quiet",
        "--exact",
        "--overlap",
        "--oversubscribe",
        "--hold",
        "--disable-status",
        "--kill-on-bad-exit",
        "--no-kill",
        "--multi-prog",
        "--preserve-env",
        "--test-only",
        "--spread-job",
        "--use-min-nodes",
        "--whole",
        "--contiguous",
        "--nice",
        "--help",
    }
)
_MPI_FLAGS = frozenset(
    {
        "-v",
        "--verbose",
        "-q",
        "--quiet",
        "--oversubscribe",
        "-oversubscribe",
        "--allow-run-as-root",
        "-allow-run-as-root",
        "--tag-output",
        "-tag-output",
        "--report-bindings",
        "-report-bindings",
        "--display-map",
        "-display-map",
    }
)


def _launcher_options(
    tokens: list[str], flags: frozenset[str], single_dash_long: bool = False
) -> list[tuple[str, str]]:
    """(option, value) pairs of a launcher's own options, up to its program (the first word that is no option).

    ``-c2`` and ``--cpus-per-task=2`` carry their value; any other option not
    in ``flags`` takes the next word.  A misread either way keeps harp
    conservative: a value taken for the program ends the options early (no
    count: the request stands), a program taken for a value lets the
    program's own options in, where anything that is not a whole number
    keeps the request too.
    """
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if not t.startswith("-") or t == "-":
            break
        name, eq, value = t.partition("=")
        if eq:
            out.append((name, value))
        elif t.startswith("--") or len(t) == 2 or t in flags:
            if t in flags:
                out.append((t, ""))
            else:
                out.append((t, tokens[i + 1] if i + 1 < len(tokens) else ""))
                i += 1
        elif not single_dash_long or t[2:].isdigit():  # -c2, -N1: a short option and its value
            out.append((t[:2], t[2:]))
        else:  # a single-dash long option (mpirun's -np 4, -host h)
            out.append((t, tokens[i + 1] if i + 1 < len(tokens) else ""))
            i += 1
        i += 1
    return out


def step_cpus(launcher: str, tokens: list[str]) -> int | None:
    """The CPUs a launcher's step asks for, from its explicit options; None when it does not say.

    ``srun`` needs an explicit ``-c/--cpus-per-task`` (times ``-n/--ntasks``);
    ``mpirun``/``mpiexec``/``orterun`` an explicit ``-n/-np/-c`` (one core a
    rank).  A value harp cannot read (a variable) or a launcher it does not
    know is None.  Only the launcher's own options count, up to its program.
    """
    if launcher == "srun":
        opts = _launcher_options(tokens, _SRUN_FLAGS)
        c = [_int(v) for k, v in opts if k in ("-c", "--cpus-per-task")]
        n = [_int(v) for k, v in opts if k in ("-n", "--ntasks")]
        if not c or None in c or None in n:
            return None
        return max(c) * (max(n) if n else 1)  # type: ignore[type-var, operator]  # None excluded above
    if launcher in ("mpirun", "mpiexec", "orterun"):
        opts = _launcher_options(tokens, _MPI_FLAGS, single_dash_long=True)
        n = [_int(v) for k, v in opts if k in ("-n", "-np", "-c", "--n", "--np")]
        return None if not n or None in n else max(n)  # type: ignore[type-var]
    return None


def cut_bounds(
    ntasks: int | None, nodes: int | None, commands: list[str], manager: str | None = None
) -> tuple[str | None, int]:
    """(why a job's CPUs must stay as requested, or None; the fewest CPUs per task harp may give it).

    A job is never given fewer CPUs than its own steps ask for: a step that
    asks more than the job holds is refused at start (``srun: error: Unable
    to create step ... More processors requested than permitted``).  So:

    * several tasks or nodes: MPI ranks keep their cores;
    * a Snakemake job: its job step runs ``srun --cpus-per-task`` with the
      rule's threads, which are what the job asked for, and that ``srun`` is
      not in the command harp reads: the request stands;
    * a launcher line (``srun``, ``mpirun`` ...) with an explicit CPU count
      bounds the cut from below at that count; one without (or with a
      variable) keeps the request, as does a script that reads its CPU count
      (a thread pool sized from ``$SLURM_CPUS_PER_TASK`` behaves differently
      with fewer cores than the history measured).

    A step hidden in a program the script calls cannot be seen here: its
    first failed run restores the CPUs for good (``harpd.predict.restore``).
    """
    if (ntasks or 1) > 1:
        return f"--ntasks={ntasks}: MPI ranks keep their cores", 1
    if (nodes or 1) > 1:
        return f"--nodes={nodes}: a multi-node job keeps its cores", 1
    if manager == "snakemake":
        return (
            "a Snakemake job: its job step runs srun --cpus-per-task with the rule's threads, "
            "which are what it asked: kept"
        ), 1
    floor = 1
    for line in commands:
        for var in CPU_VARS:
            if var in line:
                return f"the script reads {var}: its threads follow the cores it gets", 1
        for part in line.replace("|", ";").replace("&", ";").split(";"):
            words = part.split()
            for i, w in enumerate(words):
                name = w.rsplit("/", 1)[-1]
                if name not in MPI_WORDS:
                    continue
                asks = step_cpus(name, words[i + 1 :])
                if asks is None:
                    return f"the script runs {name} without a CPU count harp can read: its steps keep their cores", 1
                floor = max(floor, asks)
    return None, floor


class CoresHistory:
    """Per signature, the cores its most recent finished runs used; not thread-safe (the caller locks)."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._runs: dict[str, deque[float]] = {}
        # per signature, the share of its time request each recent run took (whether a slower run still fits)
        self._time_shares: dict[str, deque[float]] = {}
        # (runs its signature had before it, its cores over their most): the pooled ratios
        self._ratios: deque[tuple[int, float]] = deque(maxlen=POOL_WINDOW)
        self._factor: dict[float, float | None] = {}  # alpha -> pooled factor, until the next run

    def add(self, signature: str | None, used: float | None, time_share: float | None = None) -> None:
        if signature is not None and time_share is not None and time_share > 0:
            self._time_shares.setdefault(signature, deque(maxlen=self.window)).append(time_share)
        if signature is None or used is None:
            return
        runs = self._runs.get(signature)
        if runs is None:
            runs = self._runs[signature] = deque(maxlen=self.window)
        if runs and max(runs) > 0:
            self._ratios.append((len(runs), used / max(runs)))
            self._factor.clear()
        runs.append(used)

    def time_share_bound(self, signature: str | None, alpha: float, margin: float) -> float | None:
        """A bound of the share of its time request the next run takes; None with no run.

        The conformal bound once there are runs enough for ``alpha``; before,
        the most of them times ``margin`` (the history rule's, for a young
        program: its next run may well take longer than any so far).
        """
        shares = self._time_shares.get(signature or "", ())
        if not shares:
            return None
        bound = quantile_bound(shares, alpha)
        return bound if bound is not None else max(shares) * margin

    def count(self, signature: str | None) -> int:
        return len(self._runs.get(signature or "", ()))

    def pooled_factor(self, alpha: float) -> float | None:
        """The order statistic of the ratios of runs whose signature had fewer runs than ``alpha`` needs."""
        if alpha not in self._factor:
            need = runs_needed(alpha)
            self._factor[alpha] = quantile_bound([r for n, r in self._ratios if n < need], alpha)
        return self._factor[alpha]

    def bound_and_source(self, signature: str | None, alpha: float) -> tuple[float | None, str]:
        """The conformal bound of the next run's cores and where it comes from ("own", "pooled", "none")."""
        runs = self._runs.get(signature or "")
        if not runs:
            return None, "none"
        own = quantile_bound(runs, alpha)
        if own is not None:
            return own, "own"
        factor = self.pooled_factor(alpha)
        return (None, "none") if factor is None else (factor * max(runs), "pooled")

    def bound(self, signature: str | None, alpha: float) -> float | None:
        return self.bound_and_source(signature, alpha)[0]

    def decide(
        self, signature: str | None, requested: int, alpha: float, tolerance: float = 0.0
    ) -> tuple[int | None, dict[str, Any]]:
        """(cores to give or None, the explanation) for a single-task request of ``requested`` cores.

        ``tolerance``: how much longer the cores given may make a run that
        keeps the bound busy (``cores_to_give``).
        """
        n = self.count(signature)
        bound, source = self.bound_and_source(signature, alpha)
        ex: dict[str, Any] = {"n_history": n, "alpha": alpha, "tolerance": tolerance}
        if bound is None:
            ex["reason"] = (
                f"{n} runs with CPU time recorded, {runs_needed(alpha)} needed "
                f"(or 1 and enough young programs' runs to pool): request kept"
            )
            return None, ex
        ex["bound_cores"] = round(bound, 3)
        ex["bound_from"] = source
        cores = cores_to_give(requested, bound, tolerance)
        slow = slowdown(bound, cores)
        if cores is not None and slow > 1.0:
            ex["slowdown"] = round(slow, 4)
        slower = f", at most {tolerance:.0%} slower on {cores}" if tolerance > 0 else ""
        if cores is None:
            ex["reason"] = f"its runs use up to {bound:.2f} cores of {requested}: request kept"
        elif source == "own":
            ex["reason"] = f"{1 - alpha:.0%} of its last {n} runs used at most {bound:.2f} cores{slower}"
        else:
            ex["reason"] = (
                f"its {n} runs used at most {max(self._runs[signature or '']):.2f} cores; with the "
                f"margin {1 - alpha:.0%} of young programs' runs kept over their earlier runs: "
                f"{bound:.2f}{slower}"
            )
        return cores, ex
