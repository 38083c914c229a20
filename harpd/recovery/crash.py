"""Crash-test hooks: ``HARP_TEST_CRASH_AT=<point>`` SIGKILLs harpd at that step of recovery.

Recovery promises each attempt happens exactly once even when harpd dies
between committing a decision and carrying it out, or between a Slurm side
effect and its commit.  The crash tests (unit and real-Slurm) prove it by
killing harpd at each of these points and restarting it; outside tests the
variable is unset and every point is a no-op.
"""

from __future__ import annotations

import logging
import os
import signal
import time

log = logging.getLogger("harpd.recovery")

__all__ = ["CRASH_ENV", "CRASH_POINTS", "crash_point"]

CRASH_ENV = "HARP_TEST_CRASH_AT"
#: where HARP_TEST_CRASH_AT may kill harpd: after the decision's commit, after
#: each Slurm side effect (before its commit), after that commit, after an
#: attempt's outcome is committed (before the next decision)
CRASH_POINTS = ("decided", "held", "updated", "released", "submitted", "committed", "done")


def crash_point(name: str) -> None:
    """Die like ``kill -9`` here when HARP_TEST_CRASH_AT names this point (tests only)."""
    if os.environ.get(CRASH_ENV) == name:
        log.critical("%s=%s: killing harpd (test crash point)", CRASH_ENV, name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # never returns
