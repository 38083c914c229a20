"""The watch step of convergence-aware trials: the rule of harpd.dnn.trials applied to Slurm's queue.

Each watch interval: the trials' reports and study policies from the store,
the running and pending jobs from the one queue listing; a job is a trial when
it (or, for an array's pending tasks listed as one record, its array) has
reported, and only when Slurm's owner of the job is the uid the reports came
from.  Studies are keyed by owner, so one user's study never ranks or stops
another's jobs.  New nice values go to pending trials (``scontrol update
Nice=``; for an array's pending record, to all its pending tasks); stopped
trials are cancelled when running and held when pending.  Each action is
recorded (``harp status`` shows it) and not repeated.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from harpd.config import HarpSettings
from harpd.dnn.trials import ProgressReport, StudyPolicy, Trial, decide_trials
from harpd.records import TrialStudy
from harpd.slurm.base import QueuedJob, SlurmError
from harpd.store import Store

log = logging.getLogger("harpd.watch.trials")

REPORT_DAYS = 30  # reports older than this are forgotten


def _key(uid: int, study: str) -> str:
    return f"{uid}:{study}"


def _policy(row: TrialStudy) -> StudyPolicy:
    pol = dict(row.policy or {})
    pol["study"] = _key(int(row.uid), str(row.study))
    fields = StudyPolicy.__dataclass_fields__
    return StudyPolicy(**{k: v for k, v in pol.items() if k in fields})


class TrialStep:
    """``tick(jobs)``: nice and stops for the trials in this listing."""

    def __init__(self, store: Store, backend: Any, settings: HarpSettings) -> None:
        self.store = store
        self.backend = backend
        self.max_nice = int(settings.watch.trials_max_nice)
        self._last_prune = 0.0

    def trials_in(self, jobs: list[QueuedJob], owner_of: dict[str, tuple[int, str]]) -> list[Trial]:
        """The listed jobs that are trials of a reported study, owned (per Slurm) by the reporting uid."""
        actions = self.store.trial_actions()
        out = []
        for j in jobs:
            if not (j.running or j.pending) or j.uid is None:
                continue
            known = owner_of.get(j.job_id) or (owner_of.get(f"array:{j.array_job_id}") if j.array_job_id else None)
            if known is None or known[0] != j.uid:
                continue  # not a trial, or not the reporting owner's job: left alone
            act = actions.get(j.job_id)
            if act is not None and act.stopped:
                continue  # already stopped (held or cancelled) by harpd
            nice = int(act.nice) if act is not None and act.nice is not None else 0
            out.append(Trial(j.job_id, _key(*known), j.uid, j.state, nice))
        return out

    def tick(self, jobs: list[QueuedJob]) -> None:
        now = time.time()
        if now - self._last_prune > 86400:
            self.store.drop_trial_reports(now - REPORT_DAYS * 86400)
            self._last_prune = now
        rows = self.store.trial_reports()
        if not rows:
            return
        owner_of: dict[str, tuple[int, str]] = {}
        reports = []
        for r in rows:
            uid, study, jid = int(r.uid), str(r.study), str(r.job_id)
            owner_of[jid] = (uid, study)
            if "_" in jid:
                owner_of[f"array:{jid.split('_', 1)[0]}"] = (uid, study)
            reports.append(ProgressReport(jid, _key(uid, study), str(r.metric), float(r.value), float(r.elapsed_s)))
        policies = {p.study: p for p in map(_policy, self.store.trial_studies())}
        trials = self.trials_in(jobs, owner_of)
        if not trials:
            return
        by_id = {t.job_id: t for t in trials}
        for a in decide_trials(trials, reports, policies, self.max_nice):
            t = by_id[a.job_id]
            study = a.study.split(":", 1)[1]
            try:
                if a.stop and t.state == "RUNNING":
                    self.backend.cancel(a.job_id)
                    verb = "cancelled"
                elif a.stop:
                    self.backend.hold(a.job_id)
                    verb = "held"
                else:
                    self.backend.set_nice(a.job_id, int(a.nice or 0))
                    verb = f"nice {a.nice}"
            except (SlurmError, AttributeError) as exc:
                log.warning("trials: job %s of study %s: %s", a.job_id, study, exc)
                continue
            self.store.set_trial_action(a.job_id, t.uid, study, a.nice, a.stop, f"{verb}: {a.reason}")
            log.info("trials: job %s (study %s, uid %d) %s: %s", a.job_id, study, t.uid, verb, a.reason)
