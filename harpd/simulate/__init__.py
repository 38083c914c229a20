"""What harp does to the queue: an event-driven FCFS + EASY backfilling simulator.

A site deciding whether to deploy harp asks whether its users will wait less.
Tighter limits let backfill start more jobs, while kills and extensions
disturb the plan; only simulating the queue sums all of this up.  The package
is self-contained (standard library, numpy): the caller turns a trace into a
``Workload``, each allocation policy into a ``LimitPolicy`` (limits at
submission, hard or soft, and the hook deciding a killed job's resubmission
or a running job's extension), and reads the ``Schedule`` and its
``Summary``.

Modules: ``workload`` (inputs), ``easy`` (the scheduler), ``schedule``
(per-job outcome and the figures' definitions), ``progress`` (a stderr
progress bar for long runs), ``saved`` (the figures left beside the store
for ``harp report``).  ``harpd.evaluate.schedule_simulation`` turns a replay into these
inputs.
"""

from harpd.simulate.easy import simulate
from harpd.simulate.schedule import SLOWDOWN_BOUND_S, Schedule, Summary
from harpd.simulate.workload import LimitHook, LimitPolicy, SubmitHook, Workload

__all__ = [
    "SLOWDOWN_BOUND_S",
    "LimitHook",
    "LimitPolicy",
    "Schedule",
    "SubmitHook",
    "Summary",
    "Workload",
    "simulate",
]
