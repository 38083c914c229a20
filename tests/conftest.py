"""Shared fixtures: the real local Slurm cluster (``scripts/localslurm``).

The cluster is started once per test session and shared by every test (and by
every engineer's session on the same machine), so the fixture stops it at the
end only if this session started it.  Outside CI a missing cluster (not root,
start failure) skips the Slurm tests with the reason; in CI (``CI=true``) it
fails them, because integration tests that silently skip prove nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOCALSLURM = REPO / "scripts" / "localslurm"
DEFAULT_DIR = Path(os.environ.get("HARP_SLURM_DIR", "/tmp/harp-localslurm"))

# Job states after which a job will not change by itself (sacct's spelling).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)


#: The tests/slurm files also run on a newer Slurm (``-m release``; HARP_TEST_RELEASES in scripts/test):
#: each tests something Slurm releases do differently, as harp meets it.
RELEASE_FILES = {
    "test_foundation.py": "sbatch, squeue, sacct of the cluster itself; the scontrol harp reads",
    "test_submit.py": "harp-submit in front of the release's sbatch (its options and errors)",
    "test_sbatch_meaning.py": "what sbatch makes of the options harp writes (time, memory, CPUs)",
    "test_ingest_slurm.py": "sacct --parsable2 of every outcome, requeued runs (22.05 says REQUEUED, later TIMEOUT)",
    "test_recovery.py": "requeuehold, scontrol update and release of a finished job; resubmission",
    "test_recovery_durable.py": "a requeue long after the run: what sacct keeps of the first run",
    "test_soft_limits_live.py": "scontrol update of TimeLimit and memory on running and pending jobs",
    "test_scontrol_forgery.py": "squeue --json of the release (22.05's layout, 23.02+'s), with a job's own text in it",
    "test_trust_by_construction.py": "#44's attacks: squeue and sacct JSON of the release, requeuehold of a "
    "--no-requeue job refused",
    "test_plugins.py": "the Lua cli_filter and job_submit plugins on the release's Lua API",
    "test_cores_live.py": "CPUs allocated and used as sacct reports them",
    "test_dnn.py": "GRES of partitions and nodes as scontrol shows them; TresPerNode (22.05 gres:gpu, later gres/gpu)",
    "test_resize_cpus_live.py": "a step asking more CPUs than the job holds (22.05 fails, later waits until TIMEOUT); "
    "scontrol update of a pending job's CPUs",
    "test_workflow_oom.py": "requeuehold of a running job from its TaskEpilog (COMPLETING, then held); "
    "what sacct keeps of the run it ended",
    "test_queue_load_live.py": "squeue --json's waiting jobs (limits, tasks) and the partitions' nodes and CPUs: "
    "the queue rule's view",
    "test_queue_rule_live.py": "squeue --json's state reasons (held, waiting) read by harpd's watcher: the queue rule "
    "in a root harpd",
}

#: The release files CI runs on 26.05 on every run (``-m release_ci``; scripts/test with CI=true): those that
#: take seconds, not minutes (about 4.5 min together on a loaded 2-core machine), and between them read every
#: kind of output harp parses from the release (sbatch, squeue, sacct, scontrol, the Lua plugins).  The rest of
#: RELEASE_FILES (requeue, durable recovery, soft limits, the starved step: about 26 min) runs with
#: HARP_TEST_RELEASES, which CI's 90 minutes cannot hold beside the 22.05 suite and a cold build.
CI_RELEASE_FILES = (
    "test_foundation.py",
    "test_queue_load_live.py",
    "test_queue_rule_live.py",
    "test_submit.py",
    "test_sbatch_meaning.py",
    "test_scontrol_forgery.py",
    "test_plugins.py",
    "test_cores_live.py",
    "test_dnn.py",
)
assert set(CI_RELEASE_FILES) <= set(RELEASE_FILES)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: needs the real local Slurm cluster (scripts/localslurm)")
    config.addinivalue_line(
        "markers", "release: a Slurm test of behaviour that differs between Slurm releases (RELEASE_FILES)"
    )
    config.addinivalue_line(
        "markers", "release_ci: a release test CI runs on Slurm 26.05 on every run (CI_RELEASE_FILES)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything under tests/slurm/ needs the cluster, marked or not, so
    # `-m "not slurm"` reliably gives the fast unit run.
    slurm_dir = REPO / "tests" / "slurm"
    for item in items:
        if slurm_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slurm)
            if Path(str(item.fspath)).name in RELEASE_FILES:
                item.add_marker(pytest.mark.release)
            if Path(str(item.fspath)).name in CI_RELEASE_FILES:
                item.add_marker(pytest.mark.release_ci)


class SlurmError(RuntimeError):
    """A Slurm command failed; the message carries its stderr."""


@dataclass
class SlurmCluster:
    """Handle on the running local cluster, with the few commands tests need.

    ``workdir`` is world-writable (mode 1777) so jobs of any user can write
    their output there; ``sbatch`` runs from it unless told otherwise.
    """

    dir: Path
    conf: Path
    workdir: Path
    started_here: bool = False
    env: dict[str, str] = field(default_factory=dict)

    partitions = {"short": 60, "long": 1440, "tiny": 3, "gpu": 60}  # MaxTime, minutes
    default_partition = "short"
    cluster_name = "harptest"

    @property
    def version(self) -> str:
        """The Slurm release the cluster runs ("22.05", "26.05"), as localslurm recorded it."""
        f = self.dir / "slurm-version"
        return f.read_text().strip() if f.exists() else "22.05"

    def requeued_state(self, own: str) -> str:
        """What ``sacct --duplicates`` says of a finished run after ``scontrol requeue``.

        22.05's slurmdbd rewrites that run as REQUEUED; 25.11 and 26.05 keep
        its own end state (``own``: TIMEOUT, OUT_OF_MEMORY, ...).
        """
        return "REQUEUED" if self.version == "22.05" else own

    @property
    def default_conf(self) -> Path:
        """The slurm.conf a client of this release reads when SLURM_CONF is unset (srun in Snakemake's jobs).

        Debian's 22.05 reads /etc/slurm/slurm.conf; a release built by scripts/build-slurm reads its
        --sysconfdir, PREFIX/etc/slurm.conf, and never /etc/slurm.
        """
        if self.version == "22.05":
            return Path("/etc/slurm/slurm.conf")
        srun = shutil.which("srun", path=self.env.get("PATH"))
        if srun is None:
            raise RuntimeError(f"no srun of Slurm {self.version} on PATH")
        return Path(srun).parents[1] / "etc" / "slurm.conf"

    @property
    def user_path(self) -> str:
        """An ordinary user's PATH on the node: the release's Slurm commands, then /usr/bin:/bin.

        A built release's commands are not in /usr/bin; there Debian's 22.05 sbatch would talk to
        the newer slurmctld and be refused ("Insane message length").
        """
        if self.version == "22.05":
            return "/usr/bin:/bin"
        sbatch = shutil.which("sbatch", path=self.env.get("PATH"))
        if sbatch is None:
            raise RuntimeError(f"no sbatch of Slurm {self.version} on PATH")
        return f"{Path(sbatch).parent}:/usr/bin:/bin"

    def starved_step_end(self) -> str:
        """How a job ends whose ``srun`` asks more CPUs than the job holds (a step harp cannot see, cut).

        22.05's srun fails at once ("More processors requested than permitted"): FAILED.  25.11 and
        26.05's srun says "Job step may never run" and waits for CPUs the job never gets, until the
        job's time limit: TIMEOUT.
        """
        return "FAILED" if self.version == "22.05" else "TIMEOUT"

    def tres_per_node(self, gres: str) -> str:
        """The ``TresPerNode=`` field of ``scontrol show job`` for a job of ``--gres=gres``.

        22.05 prints ``TresPerNode=gres:gpu:a100:2``; 25.11 and 26.05 name the TRES as
        sacct does, ``TresPerNode=gres/gpu:a100:2``.
        """
        return f"TresPerNode=gres{':' if self.version == '22.05' else '/'}{gres}"

    def run(
        self,
        argv: list[str],
        *,
        user: str | None = None,
        input: str | None = None,
        cwd: Path | str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with this cluster's SLURM_CONF, optionally as ``user``."""
        if user is not None and user != "root":
            argv = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.conf}", *argv]
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            cwd=str(cwd or self.workdir),
            env=self.env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def sbatch(
        self, *args: str, script: str | None = None, user: str | None = None, cwd: Path | str | None = None
    ) -> str:
        """Submit; return the job id.  ``script`` (text) goes on stdin.

        Without ``script``, pass ``--wrap=...`` or a script path in ``args``.
        """
        if script is not None and not script.startswith("#!"):
            script = "#!/bin/bash\n" + script
        out = self.run(["sbatch", "--parsable", *args], user=user, input=script, cwd=cwd).stdout
        return out.strip().split(";")[0]

    def sacct(
        self,
        job_id: str,
        fields: str | list[str] = "JobID,State,ExitCode",
        *,
        steps: bool = True,
        duplicates: bool = False,
    ) -> list[dict[str, str]]:
        """sacct rows (job first, then its steps) as dicts keyed by field name."""
        names = fields.split(",") if isinstance(fields, str) else list(fields)
        argv = ["sacct", "-P", "-n", "-j", job_id, "-o", ",".join(names)]
        if not steps:
            argv.append("-X")
        if duplicates:
            argv.append("--duplicates")
        out = self.run(argv).stdout
        return [dict(zip(names, line.split("|"))) for line in out.splitlines() if line]

    def node_cpus(self) -> int:
        """The cluster's processors as sinfo lists them: each node once, though partitions share nodes."""
        rows = self.run(["sinfo", "-h", "-N", "-o", "%N %c"]).stdout.split("\n")
        return sum(int(cpus) for _node, cpus in {tuple(r.split()) for r in rows if r.strip()})

    def state(self, job_id: str) -> str:
        """The job's state as sacct has it, first word only ('' when not yet recorded)."""
        rows = self.sacct(job_id, "JobID,State", steps=False)
        for row in rows:
            if row["JobID"] == job_id:
                return row["State"].split()[0] if row["State"] else ""
        return ""

    _SETTLE_FIELDS = "JobID,State,ExitCode,Partition,End,MaxRSS,AllocTRES"

    def wait_job(self, job_id: str, timeout: float = 180) -> str:
        """Poll sacct until the job's record is final and settled; return its state.

        For an array job every task must be final; the distinct states are
        returned comma-joined (``"COMPLETED"`` when all tasks completed).

        Settled matters: slurmdbd shows a fast job COMPLETED a second or two
        before its Partition (and step MaxRSS) arrive, so a final State alone
        is not enough.  We wait for a non-empty Partition and two identical
        consecutive snapshots of the job and its steps.

        Raises TimeoutError with squeue's view of the job (its Reason) when it
        does not finish in time, which is what one needs to see in a failure.
        """
        deadline = time.monotonic() + timeout
        state, previous = "", None
        while time.monotonic() < deadline:
            rows = self.sacct(job_id, self._SETTLE_FIELDS)
            # The job itself, or every task of an array job (12_1, 12_2, ...).
            tops = [r for r in rows if "." not in r["JobID"]]
            states = {r["State"].split()[0] for r in tops if r["State"]}
            state = ",".join(sorted(states))
            if (
                tops
                and states <= FINAL_STATES
                and all(r["State"] and r["Partition"] and r["End"] != "Unknown" for r in tops)
            ):
                if rows == previous:
                    return state
                previous = rows
            else:
                previous = None
            time.sleep(0.5 if previous else 1)
        queue = self.run(["squeue", "-j", job_id, "-o", "%i %T %r %M %l"], check=False).stdout
        raise TimeoutError(f"job {job_id} still {state or 'unknown'} after {timeout}s:\n{queue}")

    def scontrol(self, *args: str) -> str:
        return self.run(["scontrol", *args]).stdout


def _localslurm(cmd: str, d: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(LOCALSLURM), cmd, str(d)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _cluster_path(d: Path) -> str:
    """PATH with the cluster's own Slurm commands first ('' when it runs the system's).

    A cluster of a built Slurm version (``--slurm 26.05``) must be driven by
    that version's sbatch/sacct/scontrol; ``localslurm env`` says where they are,
    and the shell that evaluates it is the one authority on what PATH becomes.
    """
    proc = subprocess.run(
        ["bash", "-c", 'eval "$(bash "$0" env "$1")" && printf %s "$PATH"', str(LOCALSLURM), str(d)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0 or proc.stdout == os.environ.get("PATH", ""):
        return ""
    return proc.stdout


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"local Slurm cluster unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"local Slurm cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster():
    """The running local cluster; started (and later stopped) only if needed."""
    if os.geteuid() != 0:
        _unavailable("tests must run as root to start/use scripts/localslurm")
    if shutil.which("bash") is None:
        _unavailable("bash not found")
    d = DEFAULT_DIR
    was_running = _localslurm("status", d, timeout=60).returncode == 0
    if not was_running:
        try:
            proc = _localslurm("start", d, timeout=600)
        except subprocess.TimeoutExpired:
            _unavailable("scripts/localslurm start did not finish in 600s")
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-40:])
            _unavailable(f"scripts/localslurm start exited {proc.returncode}:\n{tail}")
        # status can fail on a running cluster (a drained node); start then
        # finds it running and launches nothing, so it is not ours to stop.
        was_running = "already running from" in proc.stderr
    conf = d / "etc" / "slurm.conf"
    os.environ["SLURM_CONF"] = str(conf)
    path = _cluster_path(d)
    if path:
        os.environ["PATH"] = path
    workdir = Path(tempfile.mkdtemp(prefix="harp-slurm-tests-"))
    workdir.chmod(0o1777)
    cluster = SlurmCluster(dir=d, conf=conf, workdir=workdir, started_here=not was_running, env=dict(os.environ))
    try:
        yield cluster
    finally:
        if cluster.started_here:
            _localslurm("stop", d, timeout=180)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def no_harpd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No HARP_* setting of the developer's shell leaks in, and harpd is not running:
    HARP_SOCKET names a socket that does not exist (returned)."""
    for k in list(os.environ):
        if k.startswith("HARP_"):
            monkeypatch.delenv(k)
    sock = tmp_path / "no-harpd.sock"
    monkeypatch.setenv("HARP_SOCKET", str(sock))
    return sock
