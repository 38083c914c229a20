"""The trial tables: what running trials report, each owner's study policy, and what harpd last did to a trial."""

from __future__ import annotations

import time
from typing import Any

from harpd.records import TrialAction, TrialReport, TrialStatus, TrialStudy
from harpd.store.base import StoreBase, _dumps, _loads


class TrialsTable(StoreBase):
    """Trial reports, study policies and harpd's last action per trial (``harpd.dnn.trials``)."""

    def add_trial_report(
        self, job_id: str, uid: int, study: str, metric: str, value: float, policy: dict[str, Any] | None = None
    ) -> float:
        """Record a running trial's report; its run time counted from the trial's first report, returned.

        ``uid`` is Slurm's owner of the job (the daemon checked it); a policy,
        when given, replaces that owner's policy of the study.
        """
        now = time.time()
        with self.transaction() as db:
            row = db.conn.execute(
                "SELECT MIN(reported_at) FROM trial_reports WHERE job_id = ? AND uid = ?", (str(job_id), int(uid))
            ).fetchone()
            elapsed = 0.0 if row is None or row[0] is None else max(0.0, now - float(row[0]))
            db.conn.execute(
                """INSERT INTO trial_reports (job_id, uid, study, metric, value, elapsed_s, reported_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (str(job_id), int(uid), str(study), str(metric), float(value), elapsed, now),
            )
            if policy is not None:
                db.conn.execute(
                    """INSERT INTO trial_studies (uid, study, policy, updated_at) VALUES (?, ?, ?, ?)
                       ON CONFLICT(uid, study) DO UPDATE SET policy = excluded.policy,
                       updated_at = excluded.updated_at""",
                    (int(uid), str(study), _dumps(policy), now),
                )
        return elapsed

    def trial_reports(self, since: float | None = None) -> list[TrialReport]:
        """Every trial report (or those since ``since``), oldest first."""
        sql, params = "SELECT * FROM trial_reports", []
        if since is not None:
            sql += " WHERE reported_at >= ?"
            params.append(float(since))
        return [TrialReport(**r) for r in self._query(sql + " ORDER BY reported_at, id", params)]

    def trial_studies(self) -> list[TrialStudy]:
        """Each owner's study policies (policy decoded)."""
        return [TrialStudy(**{**r, "policy": _loads(r["policy"])}) for r in self._query("SELECT * FROM trial_studies")]

    def set_trial_action(self, job_id: str, uid: int, study: str, nice: int | None, stopped: bool, reason: str) -> None:
        """What harpd last did to a trial (shown by ``harp status``)."""
        with self.transaction() as db:
            db.conn.execute(
                """INSERT INTO trial_actions (job_id, uid, study, nice, stopped, reason, at)
                   VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id) DO UPDATE SET uid = excluded.uid,
                   study = excluded.study, nice = excluded.nice, stopped = excluded.stopped,
                   reason = excluded.reason, at = excluded.at""",
                (str(job_id), int(uid), str(study), nice, int(bool(stopped)), reason, time.time()),
            )

    def trial_actions(self) -> dict[str, TrialAction]:
        """job id -> harpd's last action on that trial."""
        return {r["job_id"]: TrialAction(**r) for r in self._query("SELECT * FROM trial_actions")}

    def trial_status(self, job_id: str) -> TrialStatus | None:
        """One trial's study, owner, last report and harpd's last action; None if it never reported nor was acted on."""
        jid = str(job_id)
        last = self._query(
            "SELECT * FROM trial_reports WHERE job_id = ? ORDER BY reported_at DESC, id DESC LIMIT 1", [jid]
        )
        acts = self._query("SELECT * FROM trial_actions WHERE job_id = ?", [jid])
        if not acts and "_" in jid:  # a pending array task is acted on through its array's id
            acts = self._query("SELECT * FROM trial_actions WHERE job_id = ?", [jid.split("_", 1)[0]])
        if not last and not acts:
            return None
        n = self._read("SELECT COUNT(*) FROM trial_reports WHERE job_id = ?", (jid,)).fetchone()[0]
        first = (last or acts)[0]
        return TrialStatus(
            study=first["study"],
            uid=int(first["uid"]),
            reports=int(n),
            last_report=TrialReport(**last[0]) if last else None,
            action=TrialAction(**acts[0]) if acts else None,
        )

    def drop_trial_reports(self, before: float) -> int:
        """Forget reports older than ``before`` (epoch seconds); how many went."""
        with self.transaction() as db:
            return db.conn.execute("DELETE FROM trial_reports WHERE reported_at < ?", (float(before),)).rowcount
