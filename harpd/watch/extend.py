"""Extend a running job before harp's limit runs out, exactly once per crossing.

A job harp shortened keeps the user's own request as its true kill time.
When less than ``watch.margin_s`` is left of its current limit, harpd raises
the limit by the soft policy's extension rule (``harpd.predict.extension``,
the one the replay scores: by default straight back to the user's request,
never past the partition's MaxTime).  Each extension appends a note to the job's
comment, replacing an earlier extension's note (never the rest: the comment
may carry recovery's marker, which a search after a crash reads, and a
workflow manager's own text).

Exactly once, as recovery's attempts are.  Each extension is a row of the
store's ``limit_changes`` table keyed (job, "extend", old limit), moved
through persisted steps::

    decided --(scontrol update)--> done
    decided --(job gone / not running)--> ended
    decided --(Slurm refused)--> refused

``decided`` is committed BEFORE ``scontrol update``.  A row left ``decided``
by a crash is finished on the next tick by looking at the job: its limit
already at the new value means the update happened (``done``); the job no
longer running means it ended (``ended``, never extended after its end); the
limit unchanged means the update never happened and is made now.  Setting
TimeLimit is absolute, so making it again is harmless; the key makes a
second extension of the same crossing impossible.

Fail safe: a refusal (a reservation, an association limit, no rights) is
recorded and the job runs into its limit, where recovery resubmits it, as
without soft limits.  A Slurm error that may be transient (no answer) keeps
the row ``decided`` to try again while the job runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from harp_submit.units import fmt_time
from harpd.config import HarpSettings
from harpd.limits.ledger import read_ledger
from harpd.metrics import record as metrics
from harpd.predict.extension import next_extension
from harpd.predict.soft import SoftPolicy
from harpd.records import LimitChange
from harpd.recovery.attempts import EXTENDED_NOTE, without_notes
from harpd.recovery.crash import crash_point
from harpd.slurm.base import PartitionInfo, QueuedJob, SlurmError, waiting_on_slurm
from harpd.slurm.partitions import partition_of
from harpd.store import Store
from harpd.watch.changes import DECIDED, DONE, ENDED, REFUSED, decided, row_of, set_step, still_to_do
from harpd.watch.managed import LeftAlone, harp_set_time, original_time_s, submission_of

log = logging.getLogger("harpd.watch")

__all__ = ["Extender", "EXTEND", "note"]

EXTEND = "extend"

# scontrol's answers that mean the job is no longer there to extend
_GONE = ("invalid job id", "already completed", "job has already finished", "job is no longer")
# answers that may be transient: try again next tick
_TRANSIENT = ("gave no answer", "cannot run", "socket timed out", "unable to contact", "connection refused")


def note(old_s: int, new_s: int) -> str:
    """The comment text of one extension (no ``=``: scontrol's key=value output stays parseable)."""
    return f"harp extended {fmt_time(old_s)} -> {fmt_time(new_s)}"


def _appended(comment: str | None, text: str) -> str:
    """The comment with this extension's note, an earlier extension's note replaced: the comment says
    what is true now (the job's own comment and recovery's marker kept)."""
    return "; ".join([*without_notes(comment, EXTENDED_NOTE), text])


class Extender:
    """Raises running jobs' limits before they run out.  Not thread-safe: one tick at a time."""

    def __init__(
        self,
        store: Store,
        backend: Any,
        settings: HarpSettings,
        partitions: Callable[[], dict[str, PartitionInfo]] | None = None,
        on_extended: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.margin_s = float(settings.watch.margin_s)
        # the soft policy's last extension goes straight to the user's request (SoftPolicy.max_extensions)
        self.max_extensions = int(SoftPolicy.from_settings(settings.predict).max_extensions)
        self._partitions = partitions or backend.partitions
        self._on_extended = on_extended  # told of each extension made (the soft budget counts them)
        self._left_alone = LeftAlone()  # Slurm's owner and limit checked before each extension

    def tick(self, jobs: Iterable[QueuedJob]) -> int:
        """Finish interrupted extensions, then extend what crosses the margin; returns extensions made."""
        by_id = {j.job_id: j for j in jobs}
        made = 0
        for row in decided(self.store, EXTEND):
            made += self._carry_out(row, by_id.get(row.job_id))
        for job in by_id.values():
            left = job.time_left_s
            if job.running and left is not None and left < self.margin_s:
                made += self._consider(job)
        return made

    # ------------------------------------------------------------ deciding

    def _cap(self, partition: str | None) -> int | None:
        try:
            parts = self._partitions()
        except SlurmError as exc:
            log.warning("partition limits unavailable (%s): extending up to the user's request only", exc)
            return None
        info = partition_of(parts, partition)
        return None if info is None else info.max_time_s

    def _consider(self, job: QueuedJob) -> int:
        current = job.time_limit_s
        if current is None:
            return 0
        rows = {int(r.old_time_s): r for r in self.store.limit_changes(job.job_id) if r.kind == EXTEND}
        if current in rows:  # this crossing was handled (or refused): never twice
            return 0
        sub = submission_of(self.store, job)
        if sub is None or not harp_set_time(sub):
            return 0  # not sized by harp, or opted out: its limit is the user's
        original = original_time_s(sub)
        if original is None or current >= original:
            return 0  # already at the user's own request: that is the kill time
        if not self._left_alone.check(self.store, job, sub, "extended"):
            return 0
        cap = self._cap(job.partition)
        made = sum(1 for r in rows.values() if r.step == DONE)
        ext = next_extension(current, original, cap, made, self.max_extensions)
        if ext is None:
            return 0
        new, how = ext.limit_s, ext.how
        reason = f"{fmt_time(job.time_left_s)} left of {fmt_time(current)}; {how}"
        attempt = read_ledger(self.store, job.job_id, sub).attempt  # the run it extends, in the limits ledger
        if self.store.add_limit_change(job.job_id, EXTEND, current, new, reason, DECIDED, attempt=attempt):
            log.info("job %s: extension decided, %s -> %s (%s)", job.job_id, fmt_time(current), fmt_time(new), reason)
        crash_point("extend-decided")
        row = row_of(self.store, job.job_id, EXTEND, current)
        return self._carry_out(row, job) if row.step == DECIDED else 0

    # ------------------------------------------------------------ carrying out

    def _carry_out(self, row: LimitChange, job: QueuedJob | None) -> int:
        jid, old, new = str(row.job_id), int(row.old_time_s), int(row.new_time_s)
        if not still_to_do(self.store, row, job, "RUNNING"):
            return 0
        assert job is not None
        try:
            self.backend.update_job(jid, time_limit_s=new, comment=_appended(job.comment, note(old, new)))
        except SlurmError as exc:
            msg = str(exc).lower()
            if any(s in msg for s in _GONE):
                set_step(self.store, row, ENDED, f"Slurm: {exc}")
                metrics.extension("refused", "job_ended")
            elif waiting_on_slurm(exc) or any(s in msg for s in _TRANSIENT):
                log.warning("job %s: extension not made yet (%s); trying again next tick", jid, exc)
            else:
                set_step(self.store, row, REFUSED, f"Slurm refused: {exc}")
                metrics.extension("refused", "slurm_refused")
                log.warning(
                    "job %s: extension %s -> %s refused by Slurm (%s); it runs into its limit and recovery takes over",
                    jid,
                    fmt_time(old),
                    fmt_time(new),
                    exc,
                )
            return 0
        crash_point("extend-updated")
        set_step(self.store, row, DONE)
        metrics.extension("made")
        log.info("job %s: extended %s -> %s", jid, fmt_time(old), fmt_time(new))
        if self._on_extended is not None:
            try:
                self._on_extended(jid)
            except Exception:  # noqa: BLE001 - learning from it must not undo the extension
                log.exception("job %s: extension not counted in the soft budget", jid)
        return 1
