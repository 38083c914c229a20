"""The registration child waits for harp-submit to end before it competes with it for the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from submit_fakes import FakeHarpd

from harp_submit import registration

REPO = Path(__file__).resolve().parents[3]

# a parent that registers a job, then stays alive for argv[2] seconds, then says when it ended;
# its child waits at most argv[4] seconds for it
PARENT = (
    "import sys, time; sys.path.insert(0, sys.argv[1])\n"
    "from harp_submit import registration, route\n"
    "registration.PARENT_WAIT_S = float(sys.argv[4])\n"
    "where = route.Route(sys.argv[3])\n"
    "registration.register_in_background(where, {'op': 'register', 'job_id': '7'}, 5.0, {})\n"
    "time.sleep(float(sys.argv[2]))\n"
    "print(time.monotonic(), flush=True)\n"
)


def _register(tmp_path: Path, parent_lives_s: float, child_waits_s: float) -> tuple[float, float]:
    """(when the parent ended, when harpd got the registration), both on time.monotonic()."""
    with FakeHarpd(tmp_path / "h.sock") as harpd:
        proc = subprocess.run(
            [sys.executable, "-S", "-c", PARENT, str(REPO), str(parent_lives_s), harpd.path, str(child_waits_s)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        harpd.wait_for("register", timeout=60)
        arrived = harpd.arrival("register")
        assert arrived is not None
        return float(proc.stdout), arrived


def test_the_child_registers_once_its_parent_has_ended(tmp_path: Path) -> None:
    ended, arrived = _register(tmp_path, 0.3, 120)  # a bound no busy machine reaches
    assert arrived >= ended


def test_a_parent_that_lives_on_delays_the_registration_at_most_a_second(tmp_path: Path) -> None:
    """``sbatch --wait`` keeps harp-submit for the job's whole run: harpd still hears of the job soon."""
    ended, arrived = _register(tmp_path, 12, registration.PARENT_WAIT_S)  # 1 s, then it registers
    assert arrived < ended
