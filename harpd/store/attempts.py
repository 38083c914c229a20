"""The ``attempts`` table: recovery's chains, one row per attempt, inserted exactly once."""

from __future__ import annotations

import time
from typing import Any

from harpd.records import AttemptRecord, Outcome
from harpd.store.base import StoreBase, _dumps, _loads
from harpd.store.columns import _q


class AttemptsTable(StoreBase):
    """Recovery attempts (``AttemptRecord``) and the chain a job belongs to."""

    _ATTEMPT_COLS = frozenset({"job_id", "limits", "reason", "step", "outcome"})

    def all_attempts(self) -> list[AttemptRecord]:
        """Every attempt of every chain, by chain then attempt (reports; the table holds only resubmissions)."""
        rows = self._query("SELECT * FROM attempts ORDER BY chain_id, attempt")
        return [AttemptRecord(**{**r, "limits": _loads(r["limits"])}) for r in rows]

    def add_attempt(
        self,
        chain_id: str,
        attempt: int,
        job_id: str | None,
        limits: dict[str, Any],
        reason: str,
        step: str,
    ) -> bool:
        """Insert attempt ``attempt`` of ``chain_id``; False if it already exists.

        The unique (chain_id, attempt) key is what makes a resubmission
        happen exactly once even if two threads or a restart race on it.
        """
        now = time.time()
        with self.transaction() as db:
            cur = db.conn.execute(
                """INSERT INTO attempts (chain_id, attempt, job_id, limits, reason, step, created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(chain_id, attempt) DO NOTHING""",
                (
                    str(chain_id),
                    int(attempt),
                    None if job_id is None else str(job_id),
                    _dumps(limits),
                    reason,
                    step,
                    now,
                    now,
                ),
            )
            return cur.rowcount > 0

    def update_attempt(self, chain_id: str, attempt: int, **cols: Any) -> bool:
        """Set columns (job_id, limits, reason, step, outcome) of one attempt; False if absent."""
        bad = set(cols) - self._ATTEMPT_COLS
        if bad:
            raise ValueError(f"unknown attempt column(s): {', '.join(sorted(bad))}")
        if not cols:
            return False
        values = []
        for k, v in cols.items():
            if k == "limits":
                v = _dumps(v)
            elif isinstance(v, Outcome):
                v = v.value
            elif k == "job_id" and v is not None:
                v = str(v)
            values.append(v)
        sets = ", ".join(f"{_q(k)} = ?" for k in cols)
        with self.transaction() as db:
            cur = db.conn.execute(
                f"UPDATE attempts SET {sets}, updated_at = ? WHERE chain_id = ? AND attempt = ?",
                (*values, time.time(), str(chain_id), int(attempt)),
            )
            return cur.rowcount > 0

    def attempts(self, chain_id: str) -> list[AttemptRecord]:
        """The attempts of one chain, in order."""
        rows = self._query("SELECT * FROM attempts WHERE chain_id = ? ORDER BY attempt", [str(chain_id)])
        return [AttemptRecord(**{**r, "limits": _loads(r["limits"])}) for r in rows]

    def chain_of(self, job_id: str) -> str | None:
        """The chain (first job id) a job belongs to, from attempts or submissions."""
        row = self._read("SELECT chain_id FROM attempts WHERE job_id = ? LIMIT 1", (str(job_id),)).fetchone()
        if row is not None:
            return row[0]
        row = self._read(
            "SELECT chain_id FROM submissions WHERE job_id = ? AND chain_id IS NOT NULL", (str(job_id),)
        ).fetchone()
        if row is not None:
            return row[0]
        row = self._read("SELECT chain_id FROM attempts WHERE chain_id = ? LIMIT 1", (str(job_id),)).fetchone()
        return None if row is None else row[0]
