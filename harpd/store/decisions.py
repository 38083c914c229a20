"""The ``decisions`` table: what harpd decided for a predict call, under the token harp-submit echoes back."""

from __future__ import annotations

import time
from typing import Any

from harpd.records import IssuedDecision
from harpd.store.base import StoreBase, _dumps, _loads


class DecisionsTable(StoreBase):
    """Decisions by token, claimed once by the job that registers with it."""

    def add_decision(
        self,
        token: str,
        uid: int,
        user: str | None,
        job: dict[str, Any],
        decided: dict[str, Any],
        decision: dict[str, Any],
        decided_at: float | None = None,
    ) -> None:
        """Record what harpd decided for one ``predict`` call, under a fresh ``token``.

        Not fsynced on its own (``durable=False``): it is on every submission's
        path, and the registration that claims it, a durable commit, follows
        within the same submission; a power cut between the two loses the
        registration as well, with or without this row.
        """
        with self.transaction(durable=False) as db:
            db.conn.execute(
                """INSERT INTO decisions (token, uid, user, decided_at, job, decided, decision)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (
                    str(token),
                    int(uid),
                    user,
                    time.time() if decided_at is None else float(decided_at),
                    _dumps(job),
                    _dumps(decided),
                    _dumps(decision),
                ),
            )

    def get_decision(self, token: str) -> IssuedDecision | None:
        """The recorded decision of ``token`` (claimed or not); None when harpd never made it."""
        rows = self._query("SELECT * FROM decisions WHERE token = ?", [str(token)])
        if not rows:
            return None
        row = rows[0]
        return IssuedDecision.from_row({**row, **{k: _loads(row[k]) for k in ("job", "decided", "decision")}})

    def unclaimed_tokens(self, since: float) -> set[str]:
        """Tokens of decisions made at or after ``since`` that no job has claimed yet.

        Only decisions that changed something: harp-submit puts the token in
        the job's comment only then, so a dry run or an unchanged job never
        makes harpd list the queue looking for it.
        """
        rows = self._read(
            "SELECT token FROM decisions WHERE job_id IS NULL AND decided_at >= ? "
            "AND json_array_length(decision, '$.changes') > 0",
            (float(since),),
        )
        return {r[0] for r in rows}

    def drop_decisions(self, before: float) -> int:
        """Forget unclaimed decisions older than ``before`` (their job never came); returns how many."""
        with self.transaction() as db:
            cur = db.conn.execute("DELETE FROM decisions WHERE job_id IS NULL AND decided_at < ?", (float(before),))
            return int(cur.rowcount)
