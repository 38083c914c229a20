"""What harpd sees of the queue at the moment of a decision: one record both sides fill.

The live daemon fills it from the scheduler's state, the replay from its
simulated queue at each job's submission, so a policy that reads the queue
(issue #48) decides the same way in both.  The decision kernel
(``harpd.predict.decide``) takes it as an input and, under soft limits, hands
it to the queue rule (``harpd.predict.queue_policy``); harpd fills it only
with ``predict.queue_rule`` on (``harpd.slurm.queue_load``), so by default
live decisions read no queue.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QueueView"]


@dataclass(frozen=True, slots=True)
class QueueView:
    """The queue at one instant: what is waiting, how much work that is, what runs."""

    pending_jobs: int
    backlog_core_s: float  # the waiting jobs' requested core-seconds
    running_jobs: int
    now: float  # the clock of this view (epoch seconds; the replay's simulated clock)
    # the cluster's processors (cores) the waiting work shares; 0: unknown, and no rule reads the depth
    total_cores: int = 0

    @property
    def drain_s(self) -> float | None:
        """Seconds the whole machine would take to run the waiting work (None: cores unknown)."""
        return self.backlog_core_s / self.total_cores if self.total_cores > 0 else None
