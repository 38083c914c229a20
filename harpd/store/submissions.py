"""The ``submissions`` table: each job harp-submit registered, what its user asked, what went in, what harp decided."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from harpd.protocol import Decision
from harpd.records import Outcome, Resources, Submission
from harpd.store.base import OwnerChanged, StoreBase, _dumps, _loads
from harpd.store.columns import _q


class SubmissionsTable(StoreBase):
    """Registrations (``Submission`` records) and their outcome."""

    def add_submission(
        self,
        job_id: str,
        uid: int,
        user: str | None,
        job: Mapping[str, Any],
        original: Resources,
        submitted: Resources,
        decision: Decision | None,
        chain_id: str | None = None,
        *,
        token: str | None = None,
        verified: bool = False,
    ) -> None:
        """Record what harp-submit submitted (state ``pending``).

        Registering the same job id again (a client retry) updates the
        record but keeps its first ``submitted_at`` and its state.
        ``verified``: slurmctld vouched for the owner and limits (harpd's
        registration checks); ``token``: the decision it was bound to.
        ``job`` is the job's JSON object as harp-submit sent it, or as another
        harp stored it (a resubmission registers it again unchanged): a
        ``JobRequest`` of an older harp may not validate as this one's.  The
        resources and decision are written as their records dump them, the
        keys every harp reads them by (``Resources.from_json``, ``Decision``).
        """
        with self.transaction() as db:
            row = db.conn.execute("SELECT uid FROM submissions WHERE job_id = ?", (str(job_id),)).fetchone()
            if row is not None and row[0] is not None and int(row[0]) != int(uid):
                # a job's owner never changes: a registration of another uid for it is someone
                # claiming the job (#44: a takeover through a resubmission search), never an update
                raise OwnerChanged(f"job {job_id} is registered to uid {row[0]}; uid {uid} cannot register it")
            db.conn.execute(
                """INSERT INTO submissions
                   (job_id, uid, user, submitted_at, job, original, submitted, decision, state, chain_id,
                    token, verified)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)
                   ON CONFLICT(job_id) DO UPDATE SET
                     uid = excluded.uid, user = excluded.user, job = excluded.job,
                     original = excluded.original, submitted = excluded.submitted,
                     decision = excluded.decision,
                     chain_id = coalesce(excluded.chain_id, submissions.chain_id),
                     token = coalesce(excluded.token, submissions.token),
                     verified = excluded.verified""",
                (
                    str(job_id),
                    int(uid),
                    user,
                    time.time(),
                    _dumps(dict(job)),
                    _dumps(original.model_dump()),
                    _dumps(submitted.model_dump()),
                    _dumps(None if decision is None else decision.model_dump()),
                    chain_id,
                    token,
                    1 if verified else 0,
                ),
            )

    def register_decided(
        self,
        token: str,
        job_id: str,
        uid: int,
        user: str | None,
        job: Mapping[str, Any],
        original: Resources,
        submitted: Resources,
        decision: Decision | None,
    ) -> bool:
        """Claim decision ``token`` for ``job_id`` and record the verified submission, in one transaction.

        False (and nothing written) when the token is unknown or already
        claimed: a decision binds one job, once, whoever races for it.
        """
        with self.transaction() as db:
            cur = db.conn.execute(
                "UPDATE decisions SET job_id = ?, used_at = ? WHERE token = ? AND job_id IS NULL",
                (str(job_id), time.time(), str(token)),
            )
            if cur.rowcount != 1:
                return False
            self.add_submission(job_id, uid, user, job, original, submitted, decision, token=token, verified=True)
            return True

    @staticmethod
    def _submission(row: dict[str, Any]) -> Submission:
        for k in ("job", "original", "submitted", "decision"):
            row[k] = _loads(row[k])
        return Submission.from_row(row)

    def get_submission(self, job_id: str) -> Submission | None:
        rows = self._query("SELECT * FROM submissions WHERE job_id = ?", [str(job_id)])
        return self._submission(rows[0]) if rows else None

    def submissions_since(self, uid: int, since: float) -> list[Submission]:
        """The submissions of ``uid`` registered at or after ``since``, oldest first (a manager's retries)."""
        rows = self._query(
            "SELECT * FROM submissions WHERE uid = ? AND submitted_at >= ? ORDER BY submitted_at, job_id",
            [int(uid), float(since)],
        )
        return [self._submission(r) for r in rows]

    _SUBMISSION_COLS = frozenset(
        {"job_id", "uid", "user", "submitted_at", "state", "chain_id", "outcome", "done_at", "token", "verified"}
    )
    _SUBMISSION_JSON = frozenset({"job", "original", "submitted", "decision"})

    def submission_values(self, job_ids: Sequence[str], paths: Sequence[str]) -> dict[str, list[Any]]:
        """Fields of many submissions, aligned with ``job_ids`` (None where absent).

        A path is a column (``chain_id``) or ``json_column.key``
        (``original.time_s``, ``decision.model``); SQLite extracts the JSON,
        so a report reads 100k submissions without decoding each in Python.
        """
        sel: list[str] = []
        params: list[Any] = []
        for p in paths:
            col, _, key = p.partition(".")
            if key and col in self._SUBMISSION_JSON and key.replace("_", "").isalnum():
                sel.append(f"json_extract({_q(col)}, ?)")
                params.append(f"$.{key}")
            elif not key and col in self._SUBMISSION_COLS:
                sel.append(_q(col))
            else:
                raise ValueError(f"unknown submission field {p!r}")
        ids = [str(j) for j in job_ids]
        found: dict[str, tuple[Any, ...]] = {}
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT job_id{''.join(', ' + c for c in sel)} FROM submissions WHERE job_id IN ({marks})"
            for row in self._read(sql, [*params, *chunk]):
                found[row[0]] = row[1:]
        missing = (None,) * len(sel)
        rows = [found.get(j, missing) for j in ids]
        return {p: [r[k] for r in rows] for k, p in enumerate(paths)}

    def pending_submissions(self) -> list[Submission]:
        """Submissions whose outcome is not yet known, oldest first."""
        rows = self._query("SELECT * FROM submissions WHERE state = 'pending' ORDER BY submitted_at, job_id")
        return [self._submission(r) for r in rows]

    def mark_submission_done(self, job_id: str, outcome: str) -> bool:
        """Close a submission with its outcome; False if the job id is unknown."""
        with self.transaction() as db:
            cur = db.conn.execute(
                "UPDATE submissions SET state = 'done', outcome = ?, done_at = ? WHERE job_id = ?",
                (str(outcome.value if isinstance(outcome, Outcome) else outcome), time.time(), str(job_id)),
            )
            return cur.rowcount > 0

    def user_extensions(self, user: str, last: int = 50) -> tuple[int, int]:
        """(jobs, extended) among ``user``'s last ``last`` verified registrations whose time harp cut.

        A job counts as extended when harpd extended it (or one of its array
        tasks) at least once: the per-user side of the soft-limit budget.
        """
        row = self._read(
            """SELECT count(*), coalesce(sum(ext), 0) FROM (
                 SELECT EXISTS(SELECT 1 FROM limit_changes c WHERE c.kind = 'extend' AND c.step = 'done'
                               AND (c.job_id = s.job_id
                                    OR substr(c.job_id, 1, length(s.job_id) + 1) = s.job_id || '_')) AS ext
                 FROM submissions s
                 WHERE s.user = ? AND s.verified = 1
                   AND EXISTS(SELECT 1 FROM json_each(s.decision, '$.changes') ch
                              WHERE json_extract(ch.value, '$.option') = 'time')
                 ORDER BY s.submitted_at DESC LIMIT ?)""",
            (str(user), int(last)),
        ).fetchone()
        return int(row[0]), int(row[1])
