"""Register the jobs whose registration message never came, from the token in their comment.

harp-submit sends ``register`` from a detached child that may lose its
message (a node under load, a killed child).  A job whose request harp
changed also carries its decision's token in its Slurm comment
(``harp_submit.registration.comment_argv``), so on each poll harpd lists the
queue, finds jobs carrying the token of a recorded decision no job has
claimed yet (finished jobs too, while slurmctld keeps them: a job that ran
in seconds is gone from the queue by the next poll), and registers them itself after the same checks with slurmctld
as a ``register`` message gets (``Registrar``): owner is the decision's uid,
limits the decided ones, submitted after the decision, token used once.

Nothing is listed while no decision waits for its job, so a quiet harpd
costs Slurm nothing.  Decisions no job claimed within ``KEEP_S`` are dropped
(their job was never submitted, or was refused by sbatch).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from harpd.daemon.registration import NotAnswered, Refused, Registrar, token_in_comment
from harpd.slurm.base import SlurmBackend, SlurmError, SlurmUnavailable, waiting_on_slurm
from harpd.slurm.job_ids import submitted_id
from harpd.store import Store, StoreError

log = logging.getLogger("harpd.adopt")

__all__ = ["Adopter", "KEEP_S", "JOB_ID"]

KEEP_S = 86400.0  # a day: a submission held up longer than that by a slow node is not worth binding
JOB_ID = "harp-adopt"


class Adopter:
    """Finds decided jobs in the queue and registers those nobody registered."""

    def __init__(self, store: Store, backend: SlurmBackend, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.backend = backend
        self.registrar = Registrar(store, backend)
        self.clock = clock
        self._waiting_since: float | None = None  # when Slurm stopped answering (None: it answers)

    def tick(self) -> int:
        """One pass; returns how many jobs were registered.  Never raises (a scheduler job).

        A Slurm that does not answer is said once when the wait begins and
        once when it ends, not on every poll: the tokens stay, so the jobs are
        registered once it answers.
        """
        try:
            made = self._tick()
        except SlurmError as exc:
            if not waiting_on_slurm(exc):
                log.warning("adopt: %s; next poll tries again", exc)
            elif self._waiting_since is None:
                self._waiting_since = self.clock()
                log.warning("adopt: Slurm does not answer (%s); decided jobs are registered once it does", exc)
            return 0
        except StoreError as exc:
            log.warning("adopt: %s; next poll tries again", exc)
            return 0
        except Exception:  # noqa: BLE001 - a scheduler job must not die
            log.exception("adopt: failed")
            return 0
        if self._waiting_since is not None:
            log.info("adopt: Slurm answers again after %.0f s", self.clock() - self._waiting_since)
            self._waiting_since = None
        return made

    def _tick(self) -> int:
        now = self.clock()
        dropped = self.store.drop_decisions(now - KEEP_S)
        if dropped:
            log.info("adopt: forgot %d decision(s) no job claimed within %g h", dropped, KEEP_S / 3600)
        tokens = self.store.unclaimed_tokens(now - KEEP_S)
        if not tokens:
            return 0
        made = 0
        seen: set[str] = set()
        for job in self.backend.held_jobs():
            token = token_in_comment(job.comment)
            job_id = submitted_id(job.job_id)
            if token is None or token not in tokens or job_id in seen:
                continue
            seen.add(job_id)
            made += self._adopt(job_id, token)
        return made

    def _adopt(self, job_id: str, token: str) -> int:
        row = self.store.get_decision(token)
        if row is None or row.job_id is not None:
            return 0  # registered meanwhile by its own message
        try:
            v = self.registrar.register(job_id, row.uid, token)
        except NotAnswered as exc:
            raise SlurmUnavailable(str(exc)) from None  # the token stays: registered once Slurm answers
        except Refused as exc:
            log.warning("adopt: job %s carries a decision token but is not registered: %s", job_id, exc)
            return 0
        log.info(
            "adopt: registered job %s of %s (uid %d) from the decision token in its comment "
            "(its registration message never came)",
            job_id,
            v.user,
            v.uid,
        )
        return 1

    def schedule(self, scheduler: Any, interval_s: float) -> Adopter:
        """Run on the daemon's scheduler (``harpd.daemon.scheduler.Scheduler``), every ``interval_s``."""
        scheduler.every(
            self.tick, interval_s, id=JOB_ID, name="harp adopt (register decided jobs whose message was lost)"
        )
        return self
