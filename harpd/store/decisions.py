"""The ``decisions`` table: what harpd decided for a predict call, under the token harp-submit echoes back."""

from __future__ import annotations

import time
from typing import Any

from harpd.records import IssuedDecision
from harpd.store.base import QuotaExceeded, StoreBase, _dumps, _loads


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
        quota: tuple[int, int] | None = None,
    ) -> None:
        """Record what harpd decided for one ``predict`` call, under a fresh ``token``.

        Not fsynced on its own (``durable=False``): it is on every submission's
        path, and the registration that claims it, a durable commit, follows
        within the same submission; a power cut between the two loses the
        registration as well, with or without this row.

        ``quota``: (decisions, bytes) one uid may have stored that no job has
        claimed yet; past it QuotaExceeded and nothing is stored, so one user
        can never make root's store grow without bound (#44: 44 MB in 1.5 s).
        """
        texts = (_dumps(job), _dumps(decided), _dumps(decision))
        size = sum(len(t or "") for t in texts)
        with self.transaction(durable=False) as db:
            if quota is not None:
                count, stored = db.conn.execute(
                    "SELECT count(*), coalesce(sum(length(job) + length(decided) + length(decision)), 0) "
                    "FROM decisions WHERE uid = ? AND job_id IS NULL",
                    (int(uid),),
                ).fetchone()
                if count + 1 > quota[0] or stored + size > quota[1]:
                    raise QuotaExceeded(
                        f"uid {uid} has {count} decisions ({stored // 1024} KiB) that no job has used yet, "
                        f"the most harpd keeps per user ({quota[0]} decisions, {quota[1] // 1024} KiB: "
                        "store.max_pending_decisions_per_user); they expire after a day"
                    )
            db.conn.execute(
                """INSERT INTO decisions (token, uid, user, decided_at, job, decided, decision)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (
                    str(token),
                    int(uid),
                    user,
                    time.time() if decided_at is None else float(decided_at),
                    *texts,
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
